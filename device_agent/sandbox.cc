#include "device_agent/sandbox.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstring>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/subprocess.h"
#include "device_agent/sandbox_wire.h"

namespace tunefarm::runner {
namespace {

using Status = SandboxOutcome::Status;

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

bool Executable(const std::string& path) {
  return !path.empty() && access(path.c_str(), X_OK) == 0;
}

// The runner: $TUNEFARM_RUNNER, beside this executable, or where the build
// put it.
std::string FindRunner() {
  if (const char* env = getenv("TUNEFARM_RUNNER"); env != nullptr && Executable(env)) return env;
  char self[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n > 0) {
    std::string dir(self, size_t(n));
    dir = dir.substr(0, dir.rfind('/'));
    if (Executable(dir + "/tunefarm-runner")) return dir + "/tunefarm-runner";
  }
#ifdef TF_RUNNER_BUILD_PATH
  if (Executable(TF_RUNNER_BUILD_PATH)) return TF_RUNNER_BUILD_PATH;
#endif
  return "";
}

// The request in a memfd (sandbox_wire.h); -1 on failure.
int WriteRequest(const std::string& so, const std::vector<const std::vector<float>*>& args,
                 int64_t n_out, const std::vector<float>& reference, const SandboxOptions& o,
                 bool want_output) {
  int fd = int(syscall(SYS_memfd_create, "tunefarm-run", MFD_CLOEXEC));
  if (fd < 0) return -1;
  wire::RunRequestHeader h{};
  h.magic = wire::kMagic;
  h.threads = o.threads;
  h.repeats = o.repeats;
  h.want_output = want_output;
  h.number = o.number;
  h.flush_cache = o.flush_cache;
  h.min_repeat_ms = o.min_repeat_ms;
  h.max_timing_s = o.max_timing_s;
  h.tolerance = o.tolerance;
  h.memory_limit_bytes = o.memory_limit_bytes;
  h.n_out = n_out;
  h.n_args = int64_t(args.size());
  h.so_bytes = int64_t(so.size());
  h.reference_count = int64_t(reference.size());
  bool ok = wire::WriteAll(fd, &h, sizeof(h)) && wire::WriteAll(fd, so.data(), so.size());
  for (const std::vector<float>* a : args) {
    int64_t count = int64_t(a->size());
    ok = ok && wire::WriteAll(fd, &count, sizeof(count)) &&
         wire::WriteAll(fd, a->data(), a->size() * 4);
  }
  ok = ok && wire::WriteAll(fd, reference.data(), reference.size() * 4);
  if (!ok) {
    close(fd);
    return -1;
  }
  return fd;
}

}  // namespace

const std::string& RunnerPath() {
  static const std::string path = FindRunner();
  return path;
}

SandboxOutcome MeasureInSandbox(const std::string& shared_object,
                                const std::vector<const std::vector<float>*>& args, int64_t n_out,
                                const std::vector<float>& reference, const SandboxOptions& options,
                                std::vector<float>* output) {
  SandboxOutcome result;
  const double start = Now();
  if (!reference.empty() && int64_t(reference.size()) != n_out) {
    result.error = absl::StrCat("reference has ", reference.size(), " values, the output ", n_out);
    return result;
  }
  const std::string runner = options.runner_path.empty() ? RunnerPath() : options.runner_path;
  if (!Executable(runner)) {
    result.error =
        "tunefarm-runner not found (install it beside this program or set "
        "TUNEFARM_RUNNER)";
    return result;
  }
  const bool want_output = output != nullptr;
  int req = WriteRequest(shared_object, args, n_out, reference, options, want_output);
  int fds[2];
  if (req < 0 || pipe2(fds, O_CLOEXEC) != 0) {
    if (req >= 0) close(req);
    result.error = "cannot set up the measurement process (memfd or pipe failed)";
    return result;
  }
  // The child dup2s these onto fds 3 and 4. One already there would stay
  // close-on-exec (dup2 onto itself changes nothing) or be overwritten by the
  // other, so both move above 4 first (a process with few files open gets
  // fd 3 for its memfd).
  auto above = [](int fd) {
    if (fd > wire::kReportFd) return fd;
    int moved = fcntl(fd, F_DUPFD_CLOEXEC, wire::kReportFd + 1);
    close(fd);
    return moved;
  };
  req = above(req);
  fds[0] = above(fds[0]);
  fds[1] = above(fds[1]);
  if (req < 0 || fds[0] < 0 || fds[1] < 0) {
    for (int fd : {req, fds[0], fds[1]})
      if (fd >= 0) close(fd);
    result.error = "cannot set up the measurement process (no file descriptors)";
    return result;
  }
  // Everything the child touches is ready before fork: between fork and exec
  // it only makes async-signal-safe calls (the caller has other threads).
  const char* argv[] = {runner.c_str(), nullptr};
  pid_t pid = fork();
  if (pid == 0) {
    if (dup2(req, wire::kRequestFd) < 0 || dup2(fds[1], wire::kReportFd) < 0) _exit(126);
    syscall(SYS_close_range, wire::kReportFd + 1, ~0U, 0);
    execv(argv[0], const_cast<char* const*>(argv));
    _exit(127);
  }
  close(req);
  close(fds[1]);
  if (pid < 0) {
    close(fds[0]);
    result.error = "fork failed";
    return result;
  }
  wire::RunReport rep{};
  std::vector<float> out(want_output ? size_t(n_out) : 0);
  const size_t want = sizeof(rep) + out.size() * 4;
  size_t got = 0;
  const double deadline = start + options.time_limit_s;
  bool timed_out = false;
  while (got < want) {
    double left = deadline - Now();
    if (left <= 0) {
      timed_out = true;
      break;
    }
    pollfd p{fds[0], POLLIN, 0};
    if (poll(&p, 1, int(std::ceil(left * 1000))) <= 0) continue;
    char* dst = got < sizeof(rep) ? reinterpret_cast<char*>(&rep) + got
                                  : reinterpret_cast<char*>(out.data()) + (got - sizeof(rep));
    size_t room = got < sizeof(rep) ? sizeof(rep) - got : want - got;
    ssize_t n = read(fds[0], dst, room);
    if (n <= 0) break;
    got += size_t(n);
    if (got == sizeof(rep) && (rep.load_failed || rep.bad_request)) break;  // no output follows
  }
  close(fds[0]);
  if (timed_out) kill(pid, SIGKILL);
  int wstatus = 0;
  waitpid(pid, &wstatus, 0);
  result.run_s = Now() - start;
  const bool have_report = got >= sizeof(rep) && rep.magic == wire::kMagic;
  if (timed_out) {
    result.status = Status::kTimeout;
    result.error = absl::StrFormat("no result within %.2f s", options.time_limit_s);
  } else if (!have_report) {
    result.status = Status::kRuntimeError;
    result.error = WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 127
                       ? absl::StrCat("cannot run ", runner)
                       : absl::StrCat("kernel process ", DescribeWaitStatus(wstatus));
  } else if (rep.bad_request) {
    result.status = Status::kRuntimeError;
    result.error = absl::StrCat(
        "runner: ", std::string(rep.message, strnlen(rep.message, sizeof(rep.message))));
  } else if (rep.load_failed) {
    result.status = Status::kLoadError;
    result.error =
        absl::StrCat("the kernel library did not load: ",
                     std::string(rep.message, strnlen(rep.message, sizeof(rep.message))));
  } else {
    switch (rep.status) {
      case wire::RunStatus::kWrongResult:
        result.status = Status::kWrongResult;
        result.error =
            absl::StrCat("output ", rep.bad_index, " off by ", rep.worst_error, " (relative)");
        break;
      case wire::RunStatus::kOk: {
        result.status = Status::kOk;
        result.costs.assign(rep.costs, rep.costs + std::clamp(rep.repeats, 1, wire::kMaxRepeats));
        std::vector<double> sorted = result.costs;
        std::sort(sorted.begin(), sorted.end());
        result.seconds = sorted[sorted.size() / 2];
        break;
      }
      default:
        result.status = Status::kRuntimeError;
        result.error = absl::StrCat("kernel returned ", rep.rc);
    }
    if (want_output && got == want && rep.rc == 0) *output = std::move(out);
  }
  return result;
}

}  // namespace tunefarm::runner
