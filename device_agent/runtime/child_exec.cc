#include "device_agent/runtime/child_exec.h"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace tunefarm::runtime {

double MonotonicSeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void LimitAddressSpace(int64_t extra) {
  if (extra <= 0) return;
  long pages = 0;
  if (FILE* f = std::fopen("/proc/self/statm", "r")) {
    if (std::fscanf(f, "%ld", &pages) != 1) pages = 0;
    std::fclose(f);
  }
  rlim_t limit = rlim_t(pages) * rlim_t(sysconf(_SC_PAGESIZE)) + rlim_t(extra);
  rlimit rl{limit, limit};
  setrlimit(RLIMIT_AS, &rl);
}

int64_t MaxKernelElements(int64_t memory_limit_bytes) {
  return (memory_limit_bytes > 0 ? memory_limit_bytes : int64_t{4} << 30) / 4;
}

bool Executable(const std::string& path) {
  return !path.empty() && access(path.c_str(), X_OK) == 0;
}

std::string FindHelper(const char* env_var, const std::string& name, const char* build_path) {
  if (const char* env = getenv(env_var); env != nullptr && Executable(env)) return env;
  char self[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n > 0) {
    std::string dir(self, size_t(n));
    dir = dir.substr(0, dir.rfind('/'));
    if (Executable(dir + "/" + name)) return dir + "/" + name;
  }
  if (build_path != nullptr && Executable(build_path)) return build_path;
  return "";
}

int NewRequestFile(const char* name) {
  return int(syscall(SYS_memfd_create, name, MFD_CLOEXEC | MFD_ALLOW_SEALING));
}

namespace {

// `fd` sealed against every change (no writes through any descriptor or
// mapping, no size change), as a read-only descriptor of its own: both
// where the system allows, one at least (qemu-user may not know seals;
// /proc may be missing); -1 when neither. Takes `fd` over.
int SealedReadOnly(int fd) {
  const bool sealed =
      fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE | F_SEAL_GROW | F_SEAL_SHRINK | F_SEAL_SEAL) == 0;
  char path[64];
  std::snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
  const int read_only = open(path, O_RDONLY | O_CLOEXEC);
  if (read_only < 0 && !sealed) {
    close(fd);
    return -1;
  }
  if (read_only < 0) return fd;
  close(fd);
  return read_only;
}

// Writes `bytes` to a pipe whose reader may be gone: EPIPE, not SIGPIPE
// (blocked for this thread around the write, and taken if it came).
void AnswerChild(int fd, const std::string& bytes) {
  sigset_t pipe_sig, old;
  sigemptyset(&pipe_sig);
  sigaddset(&pipe_sig, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe_sig, &old);
  bool written = true;
  for (size_t at = 0; written && at < bytes.size();) {
    const ssize_t n = write(fd, bytes.data() + at, bytes.size() - at);
    if (n < 0 && errno == EINTR) continue;
    written = n > 0;
    if (written) at += size_t(n);
  }
  if (!written) {
    const timespec now{0, 0};
    while (sigtimedwait(&pipe_sig, nullptr, &now) < 0 && errno == EINTR) {
    }
  }
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
}

// The descriptors one exchange hands its child, all above fd 5 and
// close-on-exec; -1 where not made (answers without on_report).
struct ChildFds {
  int req = -1, dev_null = -1;
  int report[2] = {-1, -1}, answers[2] = {-1, -1}, exec_err[2] = {-1, -1};
};

// Makes the child's descriptors from `request_fd` (taken over; < 0 when
// sealing it failed): "" and *f filled, or the error with everything closed
// (also when there is no command).
std::string OpenChildFds(bool have_command, int request_fd, bool with_answers, ChildFds* f) {
  int fds[2] = {-1, -1}, answers[2] = {-1, -1}, exec_err[2] = {-1, -1};
  const int null = open("/dev/null", O_RDWR | O_CLOEXEC);
  if (!have_command || request_fd < 0 || null < 0 || pipe2(fds, O_CLOEXEC) != 0 ||
      pipe2(exec_err, O_CLOEXEC) != 0 || (with_answers && pipe2(answers, O_CLOEXEC) != 0)) {
    for (int fd : {request_fd, null, fds[0], fds[1], exec_err[0], exec_err[1]})
      if (fd >= 0) close(fd);
    return "cannot set up the child process (request file, /dev/null or pipe failed)";
  }
  // The child dup2s these onto fds 0-5. One already there would stay
  // close-on-exec (dup2 onto itself changes nothing) or be overwritten by
  // another, so all move above 5 first (a process with few files open gets
  // fd 3 for its request file).
  auto above = [](int fd) {
    if (fd < 0 || fd > kChildAnswerFd) return fd;
    int moved = fcntl(fd, F_DUPFD_CLOEXEC, kChildAnswerFd + 1);
    close(fd);
    return moved < 0 ? -2 : moved;
  };
  f->req = above(request_fd);
  f->dev_null = above(null);
  f->report[0] = above(fds[0]);
  f->report[1] = above(fds[1]);
  f->answers[0] = above(answers[0]);
  f->answers[1] = above(answers[1]);
  f->exec_err[0] = above(exec_err[0]);
  f->exec_err[1] = above(exec_err[1]);
  if (f->req < 0 || f->dev_null < 0 || f->report[0] < 0 || f->report[1] < 0 ||
      f->answers[0] == -2 || f->answers[1] == -2 || f->exec_err[0] < 0 || f->exec_err[1] < 0) {
    for (int fd : {f->req, f->dev_null, f->report[0], f->report[1], f->answers[0], f->answers[1],
                   f->exec_err[0], f->exec_err[1]})
      if (fd >= 0) close(fd);
    return "cannot set up the child process (no file descriptors)";
  }
  return "";
}

// The forked child: puts `f` on fds 0-5, closes the rest and execs; never
// returns. Runs between fork and exec, so it allocates nothing.
[[noreturn]] void ExecChild(const ChildFds& f, pid_t parent, const char* const* argv,
                            const char* const* envp) {
  // Dies with its parent, even one killed outright; starts with no signal
  // blocked or ignored (the caller's mask and dispositions would carry
  // over exec).
  if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent) _exit(125);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  for (int sig = 1; sig < NSIG; ++sig) {
    if (sig != SIGKILL && sig != SIGSTOP) signal(sig, SIG_DFL);
  }
  // Nothing of the caller's terminal, log or journal: stdin, stdout and
  // stderr are /dev/null.
  for (int fd = 0; fd <= 2; ++fd) {
    if (dup2(f.dev_null, fd) < 0) _exit(126);
  }
  if (dup2(f.req, kChildRequestFd) < 0 || dup2(f.report[1], kChildReportFd) < 0) _exit(126);
  if (f.answers[0] >= 0 && dup2(f.answers[0], kChildAnswerFd) < 0) _exit(126);
  // Everything else closes; the exec-error pipe (close-on-exec) stays
  // until the exec, to carry its errno back.
  const unsigned first = f.answers[0] >= 0 ? kChildAnswerFd + 1 : kChildReportFd + 1;
  const unsigned keep = unsigned(f.exec_err[1]);
  if (keep > first) syscall(SYS_close_range, first, keep - 1, 0);
  syscall(SYS_close_range, keep + 1, ~0U, 0);
  execve(argv[0], const_cast<char* const*>(argv), const_cast<char* const*>(envp));
  const int why = errno;
  (void)!write(f.exec_err[1], &why, sizeof(why));
  _exit(127);
}

// Reads the child's reports from `report_fd` into x->report (at most
// max_report bytes) until end of stream, the deadline, cancellation or a stop.
void PumpReports(int report_fd, int answer_fd, double deadline_s, size_t max_report,
                 const std::function<bool()>& cancelled,
                 const std::function<ReportStep(const std::string&)>& on_report,
                 ChildExchange* x) {
  char buf[1 << 16];
  for (;;) {
    double left = deadline_s - MonotonicSeconds();
    if (left <= 0) {
      x->timed_out = true;
      break;
    }
    if (cancelled && cancelled()) {
      x->cancelled = true;
      break;
    }
    pollfd p{report_fd, POLLIN, 0};
    const double slice = cancelled ? std::min(left, 0.1) : left;
    if (poll(&p, 1, int(std::ceil(slice * 1000))) <= 0) continue;
    ssize_t n = read(report_fd, buf, sizeof(buf));
    if (n <= 0) break;  // the child closed fd 4 (exited)
    if (x->report.size() < max_report)
      x->report.append(buf, std::min(size_t(n), max_report - x->report.size()));
    if (on_report) {
      ReportStep step = on_report(x->report);
      if (step.stop) {
        x->stopped = true;
        break;
      }
      if (!step.answer.empty()) AnswerChild(answer_fd, step.answer);
    }
  }
}

// Waits for the child `pid` to end, killing it first when the exchange was
// cut short, or at the deadline; sets x->wait_status (and x->timed_out).
void ReapChild(pid_t pid, double deadline_s, ChildExchange* x) {
  const bool killed = x->timed_out || x->cancelled || x->stopped;
  if (killed) kill(pid, SIGKILL);
  // After end of stream the child is exiting; one that closed fd 4 and kept
  // running is given until the deadline, then killed.
  for (;;) {
    pid_t r = waitpid(pid, &x->wait_status, killed ? 0 : WNOHANG);
    if (r == pid || (r < 0 && errno != EINTR)) break;
    if (r == 0 && MonotonicSeconds() >= deadline_s) {
      kill(pid, SIGKILL);
      x->timed_out = true;
    } else if (r == 0) {
      usleep(1000);
    }
  }
}

}  // namespace

ChildExchange ExchangeWithChild(const std::vector<std::string>& command, int request_fd,
                                double deadline_s,
                                size_t max_report, const std::function<bool()>& cancelled,
                                const std::function<ReportStep(const std::string&)>& on_report) {
  ChildExchange x;
  if (request_fd >= 0) request_fd = SealedReadOnly(request_fd);
  ChildFds f;
  x.error = OpenChildFds(!command.empty(), request_fd, bool(on_report), &f);
  if (!x.error.empty()) return x;
  std::vector<const char*> argv;
  for (const std::string& a : command) argv.push_back(a.c_str());
  argv.push_back(nullptr);
  // A clean environment: nothing of the caller's (tokens, paths) reaches the
  // child; the CUDA device choice does.
  std::string cuda_devices;
  if (const char* v = getenv("CUDA_VISIBLE_DEVICES"))
    cuda_devices = std::string("CUDA_VISIBLE_DEVICES=") + v;
  const char* envp[] = {cuda_devices.empty() ? nullptr : cuda_devices.c_str(), nullptr};
  const pid_t parent = getpid();
  pid_t pid = fork();
  if (pid == 0) ExecChild(f, parent, argv.data(), envp);
  close(f.exec_err[1]);
  close(f.req);
  close(f.dev_null);
  close(f.report[1]);
  if (f.answers[0] >= 0) close(f.answers[0]);
  if (pid < 0) {
    close(f.report[0]);
    close(f.exec_err[0]);
    if (f.answers[1] >= 0) close(f.answers[1]);
    x.error = "fork failed";
    return x;
  }
  x.started = true;
  PumpReports(f.report[0], f.answers[1], deadline_s, max_report, cancelled, on_report, &x);
  close(f.report[0]);
  if (f.answers[1] >= 0) close(f.answers[1]);
  ReapChild(pid, deadline_s, &x);
  // The child is gone: its end of the pipe is closed, so this does not block.
  int why = 0;
  if (read(f.exec_err[0], &why, sizeof(why)) == ssize_t(sizeof(why))) x.exec_errno = why;
  close(f.exec_err[0]);
  return x;
}

std::vector<std::string> HelperCommand(const std::vector<std::string>& wrapper,
                                       const std::string& helper) {
  std::vector<std::string> command = wrapper;
  if (!command.empty() && command[0].find('/') == std::string::npos) {
    // The child's environment is empty: resolve the wrapper on our $PATH.
    const char* path = getenv("PATH");
    std::string dirs = path != nullptr ? path : "/usr/local/bin:/usr/bin:/bin";
    for (size_t at = 0; at <= dirs.size();) {
      size_t end = dirs.find(':', at);
      if (end == std::string::npos) end = dirs.size();
      const std::string candidate = dirs.substr(at, end - at) + "/" + command[0];
      if (end > at && Executable(candidate)) {
        command[0] = candidate;
        break;
      }
      at = end + 1;
    }
  }
  command.push_back(helper);
  return command;
}

namespace {

// The machine an ELF file is built for ("aarch64", "x86-64", ...); "" when
// it is not an ELF file or cannot be read.
std::string ElfMachine(const std::string& path) {
  unsigned char h[20] = {};
  FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return "";
  const size_t n = std::fread(h, 1, sizeof(h), f);
  std::fclose(f);
  if (n < sizeof(h) || h[0] != 0x7f || h[1] != 'E' || h[2] != 'L' || h[3] != 'F') return "";
  const int machine = h[5] == 2 ? (h[18] << 8 | h[19]) : (h[18] | h[19] << 8);
  switch (machine) {
    case 62: return "x86-64";
    case 183: return "aarch64";
    case 40: return "arm";
    case 243: return "riscv";
    case 3: return "i386";
    default: return "machine " + std::to_string(machine);
  }
}

}  // namespace

std::string DescribeExecFailure(const std::vector<std::string>& command, int exec_errno) {
  const std::string& program = command.empty() ? std::string() : command[0];
  std::string why = "cannot run " + program + ": " + std::strerror(exec_errno);
  if (exec_errno == ENOEXEC) {
    const std::string machine = ElfMachine(program);
    if (!machine.empty()) {
      why += " (built for " + machine + ", which this system cannot execute: give "
             "--runner_wrapper=qemu-" + (machine == "x86-64" ? "x86_64" : machine) +
             " (qemu-user), or register qemu-user with binfmt_misc)";
    }
  } else if (exec_errno == ENOENT && !ElfMachine(program).empty()) {
    why += " (its program loader is missing: it was built for another system's libraries)";
  }
  return why;
}

std::string ProbeHelper(const std::vector<std::string>& command, double timeout_s) {
  if (command.empty()) return "no program to run";
  for (const std::string& part : {command.front(), command.back()}) {
    if (!Executable(part)) return "cannot run " + part + ": " + std::strerror(errno);
  }
  const int fd = NewRequestFile("tunefarm-probe");
  if (fd < 0) return "cannot make a request file (memfd_create failed)";
  ChildExchange x = ExchangeWithChild(command, fd, MonotonicSeconds() + timeout_s, 4096);
  std::string program;
  for (const std::string& part : command) program += (program.empty() ? "" : " ") + part;
  if (!x.started) return x.error;
  if (x.exec_errno != 0) return DescribeExecFailure(command, x.exec_errno);
  if (x.timed_out) {
    return "`" + program + "` did not answer an empty request within " +
           std::to_string(int(timeout_s)) + " s";
  }
  if (!x.report.empty()) return "";
  std::string ended = WIFEXITED(x.wait_status)
                          ? "exited " + std::to_string(WEXITSTATUS(x.wait_status))
                          : "was killed by signal " + std::to_string(WTERMSIG(x.wait_status));
  std::string hint;
  if (command.size() > 1) {
    hint = " (the wrapper could not run it: is it a program of the machine the wrapper "
           "emulates?)";
  } else if (const std::string machine = ElfMachine(command.back()); !machine.empty()) {
    hint = " (built for " + machine + ": if this system runs it through binfmt_misc, check "
           "the qemu-user registration, or give --runner_wrapper)";
  }
  return "`" + program + "` " + ended + " without answering an empty request" + hint;
}

}  // namespace tunefarm::runtime
