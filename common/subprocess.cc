#include "common/subprocess.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace tunefarm {

absl::StatusOr<std::unique_ptr<Subprocess>> Subprocess::Start(const std::vector<std::string>& argv,
                                                              const Options& options) {
  if (argv.empty()) return absl::InvalidArgumentError("Subprocess::Start: empty argv");
  int fds[2] = {-1, -1};
  if (options.capture_stdout && pipe2(fds, O_CLOEXEC) != 0) {
    return absl::InternalError(absl::StrCat("pipe: ", std::strerror(errno)));
  }
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);

  pid_t pid = fork();
  if (pid < 0) {
    if (fds[0] >= 0) close(fds[0]), close(fds[1]);
    return absl::InternalError(absl::StrCat("fork: ", std::strerror(errno)));
  }
  if (pid == 0) {
    if (options.capture_stdout) dup2(fds[1], STDOUT_FILENO);
    if (!options.stderr_path.empty()) {
      int fd = open(options.stderr_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
      if (fd >= 0) dup2(fd, STDERR_FILENO);
    }
    execv(args[0], args.data());
    // Only async-signal-safe calls between fork and exec/_exit.
    static const char kMsg[] = "exec failed\n";
    ssize_t ignored = write(STDERR_FILENO, kMsg, sizeof(kMsg) - 1);
    (void)ignored;
    _exit(127);
  }
  if (options.capture_stdout) close(fds[1]);
  return std::unique_ptr<Subprocess>(new Subprocess(pid, fds[0]));
}

Subprocess::~Subprocess() {
  if (!reaped_) {
    kill(pid_, SIGKILL);
    waitpid(pid_, &wait_status_, 0);
  }
  if (stdout_fd_ >= 0) close(stdout_fd_);
}

absl::Status Subprocess::ReadLine(std::string* line, absl::Duration timeout) {
  if (stdout_fd_ < 0) return absl::FailedPreconditionError("stdout is not captured");
  absl::Time deadline = absl::Now() + timeout;
  while (true) {
    size_t nl = buffer_.find('\n');
    if (nl != std::string::npos) {
      *line = buffer_.substr(0, nl);
      buffer_.erase(0, nl + 1);
      return absl::OkStatus();
    }
    if (eof_) {
      if (!buffer_.empty()) {
        *line = std::move(buffer_);
        buffer_.clear();
        return absl::OkStatus();
      }
      return absl::OutOfRangeError("end of child output");
    }
    absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) return absl::DeadlineExceededError("no line from child");
    pollfd pfd{stdout_fd_, POLLIN, 0};
    int64_t wait_ms = std::min<int64_t>(absl::ToInt64Milliseconds(left), 1 << 30) + 1;
    int r = poll(&pfd, 1, static_cast<int>(wait_ms));
    if (r < 0 && errno != EINTR) return absl::InternalError(std::strerror(errno));
    if (r <= 0) continue;
    char buf[4096];
    ssize_t n = read(stdout_fd_, buf, sizeof(buf));
    if (n < 0 && errno != EINTR && errno != EAGAIN) return absl::InternalError(std::strerror(errno));
    if (n == 0) eof_ = true;
    if (n > 0) buffer_.append(buf, static_cast<size_t>(n));
  }
}

void Subprocess::Kill(int signal) {
  if (!reaped_) kill(pid_, signal);
}

absl::StatusOr<int> Subprocess::Wait(absl::Duration timeout) {
  if (reaped_) return wait_status_;
  absl::Time deadline = absl::Now() + timeout;
  absl::Duration step = absl::Milliseconds(1);
  while (true) {
    pid_t r = waitpid(pid_, &wait_status_, WNOHANG);
    if (r == pid_) {
      reaped_ = true;
      return wait_status_;
    }
    if (r < 0 && errno != EINTR) return absl::InternalError(std::strerror(errno));
    if (absl::Now() >= deadline) return absl::DeadlineExceededError("child still running");
    // waitpid has no timeout; poll with a short, growing back-off.
    absl::SleepFor(step);
    step = std::min(step * 2, absl::Milliseconds(50));
  }
}

std::string DescribeWaitStatus(int wait_status) {
  if (WIFEXITED(wait_status)) return absl::StrCat("exited with ", WEXITSTATUS(wait_status));
  if (WIFSIGNALED(wait_status)) return absl::StrCat("killed by signal ", WTERMSIG(wait_status));
  return absl::StrCat("wait status ", wait_status);
}

}  // namespace tunefarm
