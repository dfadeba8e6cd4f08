// Access tokens: the server's tokens file, the roles it gives, and fresh
// secrets for `tunefarm token`.
//
// A tokens file has one token per line; '#' starts a comment:
//
//   # SECRET or sha256:HEX   ROLE       [name=NAME] [keys=K1,K2] [devices=ID1,ID2]
//   sha256:9f2c...e1         admin      name=ops
//   sha256:41d0...7a         submitter  name=ci
//   sha256:07bb...c3         agent      name=orin-01 keys=jetson-orin devices=orin-01
//   sha256:c5e9...02         worker     name=builders devices=build-*
//
// The first field is the secret itself or, better, the SHA-256 of it
// (`tunefarm token` prints such a line; the server never needs the secret).
// keys= (agents) and devices= (agents and workers) limit what the token may
// register as; an entry ending in '*' matches every name with that prefix;
// no list means any. A line with a token and no role is an admin token (the
// format before roles); FromText says so in `warnings`.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tunefarm {

// Every character in [A-Za-z0-9._:-]: the names of devices, device keys
// and tokens, which are logged and matched.
bool IsNameText(absl::string_view s);

enum class TokenRole { kReader, kSubmitter, kAdmin, kWorker, kAgent };

// "reader", "submitter", "admin", "worker", "agent".
absl::string_view TokenRoleName(TokenRole role);
absl::StatusOr<TokenRole> ParseTokenRole(absl::string_view name);

// What a call needs; a role grants some of these (see Grants).
enum class Permission {
  kRead,    // jobs, records, devices: reader, submitter, admin
  kSubmit,  // submit, cancel, resume jobs, run models: submitter, admin
  kAdmin,   // import records: admin
  kFarm,    // register and serve as a worker or an agent: worker, agent, admin
};
absl::string_view PermissionName(Permission p);
bool Grants(TokenRole role, Permission p);

struct AccessToken {
  std::string digest;  // SHA-256 of the secret, lower-case hex
  TokenRole role = TokenRole::kAdmin;
  std::string name;                  // for logs and errors; never the secret
  std::vector<std::string> keys;     // agents: device keys it may register for; empty: any
  std::vector<std::string> devices;  // agents, workers: device ids; empty: any

  // Whether this token may register device `device_id` (and, for an agent,
  // `device_key`).
  bool MayRegister(const std::string& device_id, const std::string& device_key) const;

  // The same line of a tokens file: digest, role, name and lists.
  bool operator==(const AccessToken& other) const;
  bool operator!=(const AccessToken& other) const { return !(*this == other); }
};

class AccessTokens {
 public:
  // Parses a tokens file's text; `origin` names it in errors ("tokens file
  // F line 3: ..."). Every problem is an error: an unknown role or field, a
  // list on a role that has none, a bad digest, a repeated token, no token.
  static absl::StatusOr<AccessTokens> FromText(absl::string_view text, const std::string& origin,
                                               std::vector<std::string>* warnings = nullptr);
  static absl::StatusOr<AccessTokens> FromFile(const std::string& path,
                                               std::vector<std::string>* warnings = nullptr);

  // The token whose secret is `secret`, or nullptr. Compares the secret's
  // digest with every entry's in constant time, whichever matches.
  const AccessToken* Find(absl::string_view secret) const;

  // The token whose secret's SHA-256 is `digest` (lower-case hex), or
  // nullptr. For digests the server already holds, not for a caller's secret
  // (use Find: this one is not constant-time).
  const AccessToken* FindDigest(absl::string_view digest) const;

  size_t size() const { return tokens_.size(); }
  const std::vector<AccessToken>& tokens() const { return tokens_; }

  // The names of the tokens whose devices= list names `device_id` (an
  // entry equal to it, or a prefix pattern matching it): only they may
  // register that id. Empty when no token's list names it.
  std::vector<std::string> Reserving(const std::string& device_id) const;

 private:
  std::vector<AccessToken> tokens_;
};

// A new secret: "tf_" and 43 characters of base64url (256 random bits).
absl::StatusOr<std::string> NewTokenSecret();

// `n` bytes from the kernel's random source (getrandom), as lower-case hex.
absl::StatusOr<std::string> RandomHex(size_t n);

// The tokens-file line for `token` with its secret given by digest.
std::string TokensFileLine(const AccessToken& token);

}  // namespace tunefarm
