#include "cli/token_cmd.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "cli/command_util.h"
#include "cli/flags.h"
#include "common/access_tokens.h"
#include "common/sha256.h"
#include "common/signing.h"
#include "proto/client.h"

namespace tunefarm::cli {
namespace {

constexpr const char* kHelp =
    R"(usage: tunefarm token --role ROLE [--name NAME] [--keys K1,K2] [--devices ID1,ID2]
                      [--secret-file FILE [--server_key SERVER_DB.signing-key.pub]]

Makes a new access token: 256 random bits, "tf_" and 43 characters. Prints
the line for the server's --tokens_file, which holds only the token's
SHA-256, so the server's copy is no secret. The token itself goes to the
client, in the file its --token_file names: --secret-file FILE writes it
there (mode 0600; an existing file is not overwritten); without it, it is
printed first, on its own line.

  --role     (required) reader: jobs, records, devices; submitter: that and
             submit, cancel, resume, run models; admin: everything, import
             records included; worker: serve as a compile worker; agent:
             serve as a device agent
  --name     the token's name in the server's logs and errors
  --keys     agents: the device keys it may register for (default: any)
  --devices  agents and workers: the device ids it may register as; an
             entry ending in * matches every id with that prefix (default: any)
  --server_key  agents: also write the server's public signing key into the
             --secret-file, after the token: an agent given that one file
             runs only code the server signed, with no --server_key of its own
)";

}  // namespace

int RunToken(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  absl::StatusOr<Flags> parsed =
      ParseFlags(args, FlagSpec{{"role", "name", "keys", "devices", "secret_file", "server_key"}, {}}, "token");
  if (!parsed.ok()) return Fail(err, kExitUsage, std::string(parsed.status().message()));
  if (parsed->help()) {
    out << kHelp;
    return kExitOk;
  }
  if (!parsed->positional().empty()) {
    return Fail(err, kExitUsage,
                absl::StrCat("token: unexpected argument '", parsed->positional()[0], "'"));
  }
  if (!parsed->Has("role")) {
    return Fail(err, kExitUsage,
                "token: --role is required (reader, submitter, admin, worker or agent)");
  }
  absl::StatusOr<std::string> secret = NewTokenSecret();
  if (!secret.ok()) return Fail(err, kExitFailed, std::string(secret.status().message()));
  // The line is checked by the server's own parser, so what is printed is
  // what the server accepts.
  std::string line = absl::StrCat("sha256:", Sha256Hex(*secret), " ", parsed->Get("role"));
  for (const char* field : {"name", "keys", "devices"}) {
    if (parsed->Has(field)) absl::StrAppend(&line, " ", field, "=", parsed->Get(field));
  }
  absl::StatusOr<AccessTokens> check = AccessTokens::FromText(line, "token");
  if (!check.ok()) {
    std::string message(check.status().message());
    absl::string_view what = message;
    if (absl::StartsWith(what, "token line 1: ")) what.remove_prefix(14);
    return Fail(err, kExitUsage, absl::StrCat("token: ", what));
  }
  const std::string file = parsed->Get("secret_file");
  std::string server_key;
  if (parsed->Has("server_key")) {
    if (file.empty()) {
      return Fail(err, kExitUsage,
                  "token: --server_key goes into the --secret-file; give both");
    }
    server_key = ReadPublicKeyPem(parsed->Get("server_key"));
    if (server_key.empty()) {
      return Fail(err, kExitFailed,
                  absl::StrCat("token: ", parsed->Get("server_key"),
                               " holds no PEM public key (the server's --signing_key file's .pub)"));
    }
    if (absl::Status v = Verifier::FromPem(server_key).status(); !v.ok()) {
      return Fail(err, kExitFailed, absl::StrCat("token: ", parsed->Get("server_key"), ": ",
                                                 v.message()));
    }
  }
  if (!file.empty()) {
    int fd = open(file.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) {
      return Fail(err, kExitFailed,
                  absl::StrCat("token: cannot create ", file, ": ", std::strerror(errno)));
    }
    const std::string text = *secret + "\n" + server_key;
    const bool ok = write(fd, text.data(), text.size()) == ssize_t(text.size());
    const bool closed = close(fd) == 0;
    if (!ok || !closed) {
      unlink(file.c_str());
      return Fail(err, kExitFailed, absl::StrCat("token: cannot write ", file));
    }
  } else {
    out << *secret << "\n";
  }
  out << line << "\n";
  return kExitOk;
}

}  // namespace tunefarm::cli
