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

namespace tunefarm::cli {
namespace {

constexpr const char* kHelp =
    R"(usage: tunefarm token --role ROLE [--name NAME] [--keys K1,K2] [--devices ID1,ID2]
                      [--secret-file FILE]

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
)";

}  // namespace

int RunToken(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  absl::StatusOr<Flags> parsed =
      ParseFlags(args, FlagSpec{{"role", "name", "keys", "devices", "secret_file"}, {}}, "token");
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
  if (!file.empty()) {
    int fd = open(file.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) {
      return Fail(err, kExitFailed,
                  absl::StrCat("token: cannot create ", file, ": ", std::strerror(errno)));
    }
    const std::string text = *secret + "\n";
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
