#include "tests/testing/process.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/ascii.h"
#include "tests/testing/temp_dir.h"

namespace tunefarm::testing {

std::string BinPath(const std::string& name) { return std::string(TF_BIN_DIR) + "/" + name; }
std::string TestBinPath(const std::string& name) {
  return std::string(TF_TEST_BIN_DIR) + "/" + name;
}

int Occurrences(const std::string &text, const std::string &what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos;
       at = text.find(what, at + 1))
    ++n;
  return n;
}

int ConnectLoopback(int port, const char* source) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in from{};
  from.sin_family = AF_INET;
  inet_pton(AF_INET, source, &from.sin_addr);
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(uint16_t(port));
  to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (bind(fd, reinterpret_cast<sockaddr*>(&from), sizeof(from)) != 0 ||
      connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof(to)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

bool WaitFor(const std::function<bool()>& pred, absl::Duration timeout) {
  absl::Time deadline = absl::Now() + timeout;
  absl::Duration step = absl::Milliseconds(2);
  while (true) {
    if (pred()) return true;
    if (absl::Now() > deadline) return false;
    absl::SleepFor(step);
    step = std::min(step * 2, absl::Milliseconds(100));
  }
}

CommandResult RunCommand(const std::vector<std::string>& argv, const std::string& scratch_dir,
                         absl::Duration quiet) {
  static std::atomic<int> counter{0};
  std::string err_path = absl::StrCat(scratch_dir, "/cmd-", getpid(), "-", counter++, ".err");
  Subprocess::Options opts;
  opts.stderr_path = err_path;
  CommandResult r;
  auto child = Subprocess::Start(argv, opts);
  if (!child.ok()) return r;
  std::string line;
  while ((*child)->ReadLine(&line, quiet).ok()) r.out += line + "\n";
  auto status = (*child)->Wait(quiet);
  if (status.ok() && WIFEXITED(*status)) r.exit_code = WEXITSTATUS(*status);
  r.err = ReadFileOrEmpty(err_path);
  return r;
}

absl::StatusOr<std::unique_ptr<ReservedPort>> ReservedPort::Take() {
  auto r = std::unique_ptr<ReservedPort>(new ReservedPort());
  r->fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (r->fd_ < 0) return absl::InternalError(absl::StrCat("socket: ", strerror(errno)));
  int one = 1;
  if (setsockopt(r->fd_, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)) != 0)
    return absl::InternalError(absl::StrCat("SO_REUSEPORT: ", strerror(errno)));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  socklen_t len = sizeof(a);
  if (bind(r->fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
      getsockname(r->fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    return absl::InternalError(absl::StrCat("bind 127.0.0.1:0: ", strerror(errno)));
  }
  r->port_ = ntohs(a.sin_port);
  return r;
}

ReservedPort::~ReservedPort() {
  if (fd_ >= 0) close(fd_);
}

absl::StatusOr<std::unique_ptr<ServerProcess>> ServerProcess::Start(
    const std::string& db, const std::string& dir, const std::vector<std::string>& extra) {
  static std::atomic<int> counter{0};
  std::string port_file = absl::StrCat(dir, "/port-", counter++);
  std::vector<std::string> argv = {BinPath("tunefarm-server"), "--listen=127.0.0.1:0",
                                   "--db=" + db, "--port_file=" + port_file,
                                   "--log_level=warn"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  Subprocess::Options opts;
  opts.capture_stdout = false;
  opts.stderr_path = dir + "/server.log";
  auto proc = Subprocess::Start(argv, opts);
  if (!proc.ok()) return proc.status();
  auto s = std::unique_ptr<ServerProcess>(new ServerProcess());
  s->proc_ = *std::move(proc);
  s->signing_key_ = db + ".signing-key";
  for (const std::string& flag : extra) {
    if (absl::StartsWith(flag, "--signing_key=")) s->signing_key_ = flag.substr(14);
  }
  bool up = WaitFor(
      [&] {
        std::string text(absl::StripAsciiWhitespace(ReadFileOrEmpty(port_file)));
        return absl::SimpleAtoi(text, &s->port_) && s->port_ > 0;
      },
      absl::Seconds(30));
  if (!up) {
    return absl::DeadlineExceededError(
        absl::StrCat("server did not write its port; log:\n", ReadFileOrEmpty(dir + "/server.log")));
  }
  return s;
}

CommandResult ServerProcess::Cli(std::vector<std::string> args,
                                 const std::string& scratch_dir) const {
  args.insert(args.begin(), {BinPath("tunefarm"), "--server=" + address()});
  return RunCommand(args, scratch_dir);
}

absl::StatusOr<int> ServerProcess::Stop() {
  proc_->Kill(SIGTERM);
  return proc_->Wait(absl::Seconds(30));
}

}  // namespace tunefarm::testing
