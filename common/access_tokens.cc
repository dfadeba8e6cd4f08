#include "common/access_tokens.h"

#include <sys/random.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/file_util.h"
#include "common/sha256.h"

namespace tunefarm {
namespace {

constexpr absl::string_view kRoleNames[] = {"reader", "submitter", "admin", "worker", "agent"};

bool NameMatches(const std::vector<std::string>& allowed, const std::string& name) {
  if (allowed.empty()) return true;
  for (const std::string& a : allowed) {
    if (!a.empty() && a.back() == '*') {
      if (absl::StartsWith(name, absl::string_view(a).substr(0, a.size() - 1))) return true;
    } else if (a == name) {
      return true;
    }
  }
  return false;
}

// Names in a tokens file are logged and matched: [A-Za-z0-9._:-], and a
// final '*' in a list entry.
bool ValidName(absl::string_view s, bool pattern) {
  if (pattern && !s.empty() && s.back() == '*') s.remove_suffix(1);
  if (s.empty() && !pattern) return false;
  return IsNameText(s);
}

bool IsLowerHex(absl::string_view s) {
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

// Equal without an early exit: the time depends on the lengths only.
bool ConstantTimeEqual(absl::string_view a, absl::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

absl::Status RandomBytes(unsigned char* out, size_t n) {
  size_t got = 0;
  while (got < n) {
    ssize_t r = getrandom(out + got, n - got, 0);
    if (r < 0) {
      if (errno == EINTR) continue;
      return absl::InternalError(absl::StrCat("getrandom: ", std::strerror(errno)));
    }
    got += size_t(r);
  }
  return absl::OkStatus();
}

}  // namespace

bool IsNameText(absl::string_view s) {
  for (char c : s) {
    if (!(absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.' ||
          c == ':'))
      return false;
  }
  return true;
}

absl::string_view TokenRoleName(TokenRole role) { return kRoleNames[static_cast<int>(role)]; }

absl::StatusOr<TokenRole> ParseTokenRole(absl::string_view name) {
  for (size_t i = 0; i < std::size(kRoleNames); ++i) {
    if (kRoleNames[i] == name) return static_cast<TokenRole>(i);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown role '", name, "' (roles: ", absl::StrJoin(kRoleNames, ", "), ")"));
}

absl::string_view PermissionName(Permission p) {
  switch (p) {
    case Permission::kRead:
      return "read";
    case Permission::kSubmit:
      return "submit";
    case Permission::kAdmin:
      return "admin";
    case Permission::kFarm:
      return "farm";
  }
  return "?";
}

bool Grants(TokenRole role, Permission p) {
  switch (p) {
    case Permission::kRead:
      return role == TokenRole::kReader || role == TokenRole::kSubmitter ||
             role == TokenRole::kAdmin;
    case Permission::kSubmit:
      return role == TokenRole::kSubmitter || role == TokenRole::kAdmin;
    case Permission::kAdmin:
      return role == TokenRole::kAdmin;
    case Permission::kFarm:
      return role == TokenRole::kWorker || role == TokenRole::kAgent || role == TokenRole::kAdmin;
  }
  return false;
}

bool AccessToken::MayRegister(const std::string& device_id, const std::string& device_key) const {
  return NameMatches(devices, device_id) && NameMatches(keys, device_key);
}

bool AccessToken::operator==(const AccessToken& other) const {
  return digest == other.digest && role == other.role && name == other.name &&
         keys == other.keys && devices == other.devices;
}

std::vector<std::string> AccessTokens::Reserving(const std::string& device_id) const {
  std::vector<std::string> names;
  for (const AccessToken& t : tokens_) {
    if (!t.devices.empty() && NameMatches(t.devices, device_id)) names.push_back(t.name);
  }
  return names;
}

absl::StatusOr<AccessTokens> AccessTokens::FromText(absl::string_view text,
                                                    const std::string& origin,
                                                    std::vector<std::string>* warnings) {
  AccessTokens out;
  int line_no = 0;
  for (absl::string_view raw : absl::StrSplit(text, '\n')) {
    ++line_no;
    absl::string_view line = raw.substr(0, raw.find('#'));
    std::vector<absl::string_view> fields =
        absl::StrSplit(line, absl::ByAnyChar(" \t\r"), absl::SkipEmpty());
    if (fields.empty()) continue;
    auto error = [&](absl::string_view what) {
      return absl::InvalidArgumentError(absl::StrCat(origin, " line ", line_no, ": ", what));
    };
    AccessToken t;
    if (absl::StartsWith(fields[0], "sha256:")) {
      absl::string_view hex = fields[0].substr(7);
      if (hex.size() != 64 || !IsLowerHex(hex)) {
        return error("sha256: needs 64 lower-case hex digits (`tunefarm token` prints them)");
      }
      t.digest = std::string(hex);
    } else {
      t.digest = Sha256Hex(std::string(fields[0]));
    }
    if (fields.size() == 1) {
      if (warnings != nullptr) {
        warnings->push_back(
            absl::StrCat(origin, " line ", line_no, ": a token with no role is an admin token"));
      }
    } else {
      absl::StatusOr<TokenRole> role = ParseTokenRole(fields[1]);
      if (!role.ok()) return error(role.status().message());
      t.role = *role;
    }
    for (size_t i = 2; i < fields.size(); ++i) {
      std::pair<absl::string_view, absl::string_view> kv = absl::StrSplit(fields[i], '=');
      if (kv.second.empty()) {
        return error(absl::StrCat("'", fields[i], "' is not NAME=VALUE (name=, keys=, devices=)"));
      }
      if (kv.first == "name") {
        if (!ValidName(kv.second, false)) return error("name= takes [A-Za-z0-9._:-]");
        t.name = std::string(kv.second);
      } else if (kv.first == "keys" || kv.first == "devices") {
        const bool keys = kv.first == "keys";
        if (keys ? t.role != TokenRole::kAgent
                 : t.role != TokenRole::kAgent && t.role != TokenRole::kWorker) {
          return error(absl::StrCat(kv.first, "= is for ", keys ? "agent" : "agent and worker",
                                    " tokens, not ", TokenRoleName(t.role)));
        }
        std::vector<std::string>& list = keys ? t.keys : t.devices;
        list = absl::StrSplit(kv.second, ',', absl::SkipEmpty());
        for (const std::string& n : list) {
          if (!ValidName(n, true)) {
            return error(absl::StrCat("'", n, "' in ", kv.first,
                                      "= is not [A-Za-z0-9._:-] with an optional final *"));
          }
        }
      } else {
        return error(absl::StrCat("unknown field '", kv.first, "' (name=, keys=, devices=)"));
      }
    }
    for (const AccessToken& other : out.tokens_) {
      if (other.digest == t.digest) return error("the same token again");
    }
    if (t.name.empty()) t.name = absl::StrCat("token-", t.digest.substr(0, 8));
    out.tokens_.push_back(std::move(t));
  }
  if (out.tokens_.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(origin, " has no tokens (it would lock everyone out)"));
  }
  return out;
}

absl::StatusOr<AccessTokens> AccessTokens::FromFile(const std::string& path,
                                                    std::vector<std::string>* warnings) {
  absl::StatusOr<std::string> text = ReadFile(path);
  if (!text.ok()) return absl::NotFoundError(absl::StrCat("cannot read tokens file ", path));
  return FromText(*text, absl::StrCat("tokens file ", path), warnings);
}

const AccessToken* AccessTokens::Find(absl::string_view secret) const {
  const std::string digest = Sha256Hex(std::string(secret));
  const AccessToken* found = nullptr;
  for (const AccessToken& t : tokens_) {
    if (ConstantTimeEqual(t.digest, digest)) found = &t;
  }
  return found;
}

const AccessToken* AccessTokens::FindDigest(absl::string_view digest) const {
  for (const AccessToken& t : tokens_) {
    if (t.digest == digest) return &t;
  }
  return nullptr;
}

absl::StatusOr<std::string> RandomHex(size_t n) {
  std::string bytes(n, '\0');
  absl::Status s = RandomBytes(reinterpret_cast<unsigned char*>(bytes.data()), n);
  if (!s.ok()) return s;
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * n);
  for (unsigned char c : bytes) {
    out.push_back(kHex[c >> 4]);
    out.push_back(kHex[c & 15]);
  }
  return out;
}

absl::StatusOr<std::string> NewTokenSecret() {
  unsigned char b[33];  // 264 bits: 44 base64 characters, the first 43 of them whole
  absl::Status s = RandomBytes(b, sizeof(b));
  if (!s.ok()) return s;
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
  std::string out = "tf_";
  for (size_t i = 0; i + 2 < sizeof(b); i += 3) {
    const uint32_t v = uint32_t(b[i]) << 16 | uint32_t(b[i + 1]) << 8 | b[i + 2];
    for (int k = 3; k >= 0; --k) out.push_back(kAlphabet[(v >> (6 * k)) & 63]);
  }
  out.resize(3 + 43);
  return out;
}

std::string TokensFileLine(const AccessToken& token) {
  std::string line = absl::StrCat("sha256:", token.digest, " ", TokenRoleName(token.role));
  if (!token.name.empty()) absl::StrAppend(&line, " name=", token.name);
  if (!token.keys.empty()) absl::StrAppend(&line, " keys=", absl::StrJoin(token.keys, ","));
  if (!token.devices.empty())
    absl::StrAppend(&line, " devices=", absl::StrJoin(token.devices, ","));
  return line;
}

}  // namespace tunefarm
