// One request/report exchange with a helper executable in a child process:
// what the measurement sandbox (kernels, tunefarm-runner) and the model runs
// (whole packages, tunefarm-model-runner) share. The request is a memfd the
// child reads as fd 3, read-only and sealed (no writes, no size change); the
// child writes its report to a pipe on fd 4 and exits; where the caller
// answers reports (on_report), the child reads the answers from a pipe on
// fd 5. Its fds 0-2 are /dev/null. The child is fork+exec'd (none of the
// caller's threads or locks are inherited) with every other descriptor
// closed; past the time limit it is killed. Between fork and exec only
// async-signal-safe calls are made.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace tunefarm::runtime {

constexpr int kChildRequestFd = 3;
constexpr int kChildReportFd = 4;
constexpr int kChildAnswerFd = 5;

struct ChildExchange {
  bool started = false;    // false: setup failed (error says why), no child ran
  bool timed_out = false;  // killed at the time limit
  bool cancelled = false;  // killed because `cancelled` said so
  bool stopped = false;    // killed because on_report said so
  int wait_status = 0;     // as waitpid reports it (started)
  int exec_errno = 0;      // the exec of command[0] failed with this errno (exit 127)
  std::string report;      // what the child wrote to fd 4, up to max_report bytes
  std::string error;
};

// An anonymous, close-on-exec file for a request (sealable); -1 on failure.
int NewRequestFile(const char* name);

// What on_report decides after a read.
struct ReportStep {
  bool stop = false;  // kill the child now (ChildExchange::stopped)
  std::string answer;  // written to the child's fd 5
};

// Runs `command` (a program and its arguments: a runner, or a wrapper such
// as qemu-aarch64 followed by the runner) with `request_fd` (taken over, made read-only and
// sealed, and closed) as its fd 3 and collects its report until it closes fd 4 or
// exits. The child gets an empty environment (but CUDA_VISIBLE_DEVICES), no
// blocked or ignored signals, and SIGKILL when the calling thread dies.
// `deadline_s` is absolute, on the clock of MonotonicSeconds().
// `cancelled`, when given, is asked every 100 ms: true kills the child.
// `on_report`, when given, is called after every read with the report so
// far (up to max_report bytes); the child then has fd 5. A child that is
// gone when answered costs only the answer (no SIGPIPE).
ChildExchange ExchangeWithChild(
    const std::vector<std::string>& command, int request_fd, double deadline_s, size_t max_report,
    const std::function<bool()>& cancelled = nullptr,
    const std::function<ReportStep(const std::string& report)>& on_report = nullptr);

double MonotonicSeconds();

// `wrapper` (a program, resolved on $PATH, and its arguments; may be empty)
// followed by `helper`.
std::vector<std::string> HelperCommand(const std::vector<std::string>& wrapper,
                                       const std::string& helper);

// Whether `command` runs here: it is started with an empty request and
// must exit with a report (a runner reports a bad request). "" when it
// does, else one line saying why and what to change (the exec's errno; for
// a program built for another machine, qemu-user or binfmt_misc).
// `timeout_s` bounds the wait (an emulated runner starts slowly).
std::string ProbeHelper(const std::vector<std::string>& command, double timeout_s);

// Why `command` could not be executed, given the exec's errno: the
// program, the system's reason and, for a program of another machine
// (ENOEXEC), what runs it.
std::string DescribeExecFailure(const std::vector<std::string>& command, int exec_errno);

// In the child: the address space may grow by `extra` bytes beyond what the
// process holds now (0: no limit).
void LimitAddressSpace(int64_t extra);

// The largest kernel (all arguments together, in elements) a runner with
// address-space allowance `memory_limit_bytes` takes (0: no limit set:
// 4 GiB worth).
int64_t MaxKernelElements(int64_t memory_limit_bytes);

// Whether `path` names a file this process may execute.
bool Executable(const std::string& path);

// A helper executable: $ENV_VAR if set and executable, else `name` beside
// the current executable, else `build_path` (where the build put it); empty
// when none is found.
std::string FindHelper(const char* env_var, const std::string& name, const char* build_path);

}  // namespace tunefarm::runtime
