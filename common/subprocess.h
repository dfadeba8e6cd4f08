// A child process started with fork/exec, with its stdout readable through a
// pipe. The destructor kills (SIGKILL) and reaps a child still running, so a
// Subprocess never leaks a process. Not thread safe; one owner at a time.
//
//   TF_ASSIGN_OR_RETURN(auto child, Subprocess::Start({"/bin/echo", "hi"}));
//   std::string line;
//   child->ReadLine(&line, absl::Seconds(5));
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace tunefarm {

class Subprocess {
 public:
  struct Options {
    bool capture_stdout = true;  // else the child inherits ours
    std::string stderr_path;     // empty: inherit ours
  };

  static absl::StatusOr<std::unique_ptr<Subprocess>> Start(const std::vector<std::string>& argv,
                                                          const Options& options);
  static absl::StatusOr<std::unique_ptr<Subprocess>> Start(const std::vector<std::string>& argv) {
    return Start(argv, Options());
  }
  ~Subprocess();

  pid_t pid() const { return pid_; }

  // Reads one line (without '\n') from the child's stdout. DeadlineExceeded
  // when none arrives in time, OutOfRange at end of stream.
  absl::Status ReadLine(std::string* line, absl::Duration timeout);

  // Sends `signal` to the child (no-op once reaped).
  void Kill(int signal);

  // Waits for the child to exit and returns its wait status (as waitpid).
  // DeadlineExceeded if it is still running after `timeout`.
  absl::StatusOr<int> Wait(absl::Duration timeout);

 private:
  Subprocess(pid_t pid, int stdout_fd) : pid_(pid), stdout_fd_(stdout_fd) {}

  pid_t pid_;
  int stdout_fd_;
  bool reaped_ = false;
  int wait_status_ = 0;
  std::string buffer_;
  bool eof_ = false;
};

// Human-readable "exited with 3" / "killed by signal 9" for a wait status.
std::string DescribeWaitStatus(int wait_status);

}  // namespace tunefarm
