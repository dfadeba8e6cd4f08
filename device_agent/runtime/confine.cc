#include "device_agent/runtime/confine.h"

#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <poll.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstddef>
#include <cstring>
#include <initializer_list>
#include <utility>

#include "absl/strings/str_cat.h"
#include "device_agent/runtime/sandbox_wire.h"

namespace tunefarm::runtime {
namespace {

#if defined(__x86_64__)
constexpr uint32_t kAuditArch = AUDIT_ARCH_X86_64;
#elif defined(__aarch64__)
constexpr uint32_t kAuditArch = AUDIT_ARCH_AARCH64;
#else
#error "the runner's seccomp filter knows x86-64 and aarch64"
#endif

absl::Status Errno(absl::string_view what) {
  return absl::InternalError(absl::StrCat(what, ": ", std::strerror(errno)));
}

bool WriteWhole(const std::string& path, const std::string& text) {
  int fd = open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  bool ok = write(fd, text.data(), text.size()) == ssize_t(text.size());
  return close(fd) == 0 && ok;
}

bool WriteNewFile(const std::string& path, const std::string& bytes, mode_t mode) {
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
  if (fd < 0) return false;
  const bool written = wire::WriteAll(fd, bytes.data(), bytes.size());
  return close(fd) == 0 && written;
}

// The system calls loaded code may make, whatever their arguments. Those
// allowed with some arguments only are in Filter() below.
constexpr int kAllowed[] = {
    SYS_read,
    SYS_write,
    SYS_readv,
    SYS_writev,
    SYS_pread64,
    SYS_close,
    SYS_lseek,
    SYS_fstat,
    SYS_newfstatat,
#ifdef SYS_statx
    SYS_statx,
#endif
    SYS_mmap,
    SYS_munmap,
    SYS_mprotect,
    SYS_brk,
    SYS_mremap,
    SYS_madvise,
    SYS_futex,
    SYS_set_robust_list,
    SYS_get_robust_list,
#ifdef SYS_rseq
    SYS_rseq,
#endif
    SYS_set_tid_address,
    SYS_sched_yield,
    SYS_sched_getaffinity,
    SYS_getpid,
    SYS_getppid,
    SYS_gettid,
    SYS_getuid,
    SYS_geteuid,
    SYS_getgid,
    SYS_getegid,
    SYS_exit,
    SYS_exit_group,
    SYS_rt_sigaction,
    SYS_rt_sigprocmask,
    SYS_rt_sigreturn,
    SYS_sigaltstack,
    SYS_clock_gettime,
    SYS_clock_getres,
    SYS_clock_nanosleep,
    SYS_nanosleep,
    SYS_gettimeofday,
    SYS_getrandom,
    SYS_restart_syscall,
    SYS_membarrier,
    SYS_getcwd,
    SYS_dup,
};

// What the CUDA driver's calls and threads need besides (ConfineOptions::gpu).
constexpr int kGpuAllowed[] = {
#ifdef SYS_poll
    SYS_poll,
#endif
#ifdef SYS_epoll_wait
    SYS_epoll_wait,
#endif
#ifdef SYS_readlink
    SYS_readlink,
#endif
#ifdef SYS_access
    SYS_access,
#endif
#ifdef SYS_stat
    SYS_stat,
    SYS_lstat,
#endif
#ifdef SYS_dup2
    SYS_dup2,
#endif
#ifdef SYS_faccessat2
    SYS_faccessat2,
#endif
    SYS_ppoll,
    SYS_epoll_pwait,
    SYS_epoll_create1,
    SYS_epoll_ctl,
    SYS_eventfd2,
    SYS_pipe2,
    SYS_dup3,
    SYS_uname,
    SYS_sysinfo,
    SYS_getrusage,
    SYS_readlinkat,
    SYS_faccessat,
    SYS_getdents64,
    SYS_statfs,
    SYS_fstatfs,
    SYS_get_mempolicy,
    SYS_set_mempolicy,
    SYS_mbind,
    SYS_sched_getparam,
    SYS_sched_getscheduler,
    SYS_sched_get_priority_max,
    SYS_sched_get_priority_min,
    SYS_getpriority,
    SYS_mlock,
    SYS_munlock,
    SYS_msync,
    SYS_mincore,
    SYS_timerfd_create,
    SYS_timerfd_settime,
    SYS_timerfd_gettime,
};

// The fcntl commands loaded code may use: descriptor and status flags and
// duplicates, what the C library's stdio and the loader use. Not F_SETOWN,
// F_SETOWN_EX, F_SETSIG, F_SETLEASE or F_NOTIFY (each makes the kernel
// signal a process the caller names), and F_SETFL only without O_ASYNC.
constexpr std::initializer_list<uint32_t> kFcntlAllowed = {F_DUPFD, F_DUPFD_CLOEXEC, F_GETFD,
                                                           F_SETFD, F_GETFL};
// What the CUDA driver may use besides: record locks.
constexpr std::initializer_list<uint32_t> kGpuFcntlAllowed = {
    F_DUPFD,  F_DUPFD_CLOEXEC, F_GETFD,     F_SETFD,     F_GETFL,      F_GETLK,
    F_SETLK,  F_SETLKW,        F_OFD_GETLK, F_OFD_SETLK, F_OFD_SETLKW, F_GETPIPE_SZ};

class Program {
 public:
  // `refuse`: what a refused call returns to the kernel.
  explicit Program(uint32_t refuse) : refuse_(refuse) {}
  void Stmt(uint16_t code, uint32_t k) { p_.push_back(BPF_STMT(code, k)); }
  void Jump(uint16_t code, uint32_t k, uint8_t jt, uint8_t jf) {
    p_.push_back(BPF_JUMP(code, k, jt, jf));
  }
  void LoadNr() { Stmt(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)); }
  void Allow(int nr) {
    Jump(BPF_JMP | BPF_JEQ | BPF_K, uint32_t(nr), 0, 1);
    Stmt(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
  }
  // Allows `nr` when (low word of argument `arg` & mask) == value and
  // refuses it when not; other calls fall through (the accumulator must
  // hold the call number, and still does after).
  void AllowIf(int nr, int arg, uint32_t mask, uint32_t value) {
    Masked(nr, arg, mask, value, true);
  }
  // The opposite: refuses `nr` when (argument & mask) == value.
  void RefuseIf(int nr, int arg, uint32_t mask, uint32_t value) {
    Masked(nr, arg, mask, value, false);
  }
  // Allows `nr` when argument `arg` is one of `a`, `b`; refuses it if not.
  void AllowIfOneOf(int nr, int arg, uint32_t a, uint32_t b) {
    Jump(BPF_JMP | BPF_JEQ | BPF_K, uint32_t(nr), 0, 5);
    LoadArg(arg);
    Jump(BPF_JMP | BPF_JEQ | BPF_K, a, 2, 0);
    Jump(BPF_JMP | BPF_JEQ | BPF_K, b, 1, 0);
    Stmt(BPF_RET | BPF_K, refuse_);
    Stmt(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
  }
  // fcntl with one of `cmds`, or F_SETFL without O_ASYNC; refused with any
  // other command.
  void AllowFcntl(std::initializer_list<uint32_t> cmds) {
    const uint8_t n = uint8_t(cmds.size());
    // Body: 0 load cmd; 1 F_SETFL?; 2-4 O_ASYNC clear?; 5..4+n the
    // commands; 5+n refuse; 6+n allow.
    Jump(BPF_JMP | BPF_JEQ | BPF_K, uint32_t(SYS_fcntl), 0, uint8_t(7 + n));
    LoadArg(1);
    Jump(BPF_JMP | BPF_JEQ | BPF_K, F_SETFL, 0, 3);
    LoadArg(2);
    Stmt(BPF_ALU | BPF_AND | BPF_K, O_ASYNC);
    Jump(BPF_JMP | BPF_JEQ | BPF_K, 0, uint8_t(n + 1), n);
    uint8_t k = 0;
    for (uint32_t cmd : cmds) {
      Jump(BPF_JMP | BPF_JEQ | BPF_K, cmd, uint8_t(n - k), 0);
      ++k;
    }
    Stmt(BPF_RET | BPF_K, refuse_);
    Stmt(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
  }
  std::vector<sock_filter>& code() { return p_; }

 private:
  void LoadArg(int arg) {
    Stmt(BPF_LD | BPF_W | BPF_ABS, uint32_t(offsetof(seccomp_data, args) + 8 * arg));
  }
  void Masked(int nr, int arg, uint32_t mask, uint32_t value, bool allow_equal) {
    const uint32_t equal = allow_equal ? SECCOMP_RET_ALLOW : refuse_;
    const uint32_t other = allow_equal ? refuse_ : SECCOMP_RET_ALLOW;
    Jump(BPF_JMP | BPF_JEQ | BPF_K, uint32_t(nr), 0, 5);
    LoadArg(arg);
    Stmt(BPF_ALU | BPF_AND | BPF_K, mask);
    Jump(BPF_JMP | BPF_JEQ | BPF_K, value, 0, 1);
    Stmt(BPF_RET | BPF_K, equal);
    Stmt(BPF_RET | BPF_K, other);
  }

  const uint32_t refuse_;
  std::vector<sock_filter> p_;
};

std::vector<sock_filter> Filter(bool gpu, bool namespaces, uint32_t refuse) {
  Program p(refuse);
  p.Stmt(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, arch));
  p.Jump(BPF_JMP | BPF_JEQ | BPF_K, kAuditArch, 1, 0);
  p.Stmt(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS);
  p.LoadNr();
#if defined(__x86_64__)
  // The x32 ABI's numbers would slip past the checks below.
  p.Jump(BPF_JMP | BPF_JGE | BPF_K, 0x40000000u, 0, 1);
  p.Stmt(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS);
#endif
  for (int nr : kAllowed) p.Allow(nr);
  if (gpu) {
    for (int nr : kGpuAllowed) p.Allow(nr);
  }
  p.AllowFcntl(gpu ? kGpuFcntlAllowed : kFcntlAllowed);
  // clone3's flags sit in memory the filter cannot read: ENOSYS makes the C
  // library fall back to clone, whose flags it can.
#ifdef SYS_clone3
  p.Jump(BPF_JMP | BPF_JEQ | BPF_K, SYS_clone3, 0, 1);
  p.Stmt(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ENOSYS);
#endif
  if (gpu) {
    // The driver's threads, never a process. Files: the driver opens its
    // device files read-write, and names its threads with fopen("w") of
    // /proc/self/task/*/comm. In the runner's own root that is all there
    // is to write (the rest is read-only); without it, nothing is created
    // or truncated. ioctl: not a terminal's (TIOCSTI types into the agent's
    // terminal).
    p.AllowIf(SYS_clone, 0, CLONE_THREAD, CLONE_THREAD);
    if (namespaces) {
      p.Allow(SYS_openat);
#ifdef SYS_open
      p.Allow(SYS_open);
#endif
    } else {
      p.AllowIf(SYS_openat, 2, O_CREAT | O_TRUNC | O_APPEND, 0);
#ifdef SYS_open
      p.AllowIf(SYS_open, 1, O_CREAT | O_TRUNC | O_APPEND, 0);
#endif
    }
    p.RefuseIf(SYS_ioctl, 1, 0xff00, 0x5400);
    p.AllowIfOneOf(SYS_prctl, 0, PR_SET_NAME, PR_GET_NAME);
  } else {
    // No clone at all: the runner's threads exist before the filter does
    // (ConfineOptions::start_threads), and a new process or thread after
    // it is the loaded code's. Files: read-only.
    p.AllowIf(SYS_openat, 2, O_ACCMODE | O_CREAT | O_TRUNC | O_APPEND, O_RDONLY);
  }
  // Signals to its own threads only (abort, pthread_kill).
  p.AllowIf(SYS_tgkill, 0, 0xffffffffu, uint32_t(getpid()));
  // getrlimit, not setrlimit: no new limit (a null third argument).
  p.Jump(BPF_JMP | BPF_JEQ | BPF_K, SYS_prlimit64, 0, 6);
  p.Stmt(BPF_LD | BPF_W | BPF_ABS, uint32_t(offsetof(seccomp_data, args) + 8 * 2));
  p.Jump(BPF_JMP | BPF_JEQ | BPF_K, 0, 0, 2);
  p.Stmt(BPF_LD | BPF_W | BPF_ABS, uint32_t(offsetof(seccomp_data, args) + 8 * 2 + 4));
  p.Jump(BPF_JMP | BPF_JEQ | BPF_K, 0, 1, 0);
  p.Stmt(BPF_RET | BPF_K, refuse);
  p.Stmt(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
  p.Stmt(BPF_RET | BPF_K, refuse);  // everything else
  return std::move(p.code());
}

void (*g_on_violation)(long) = nullptr;

// SIGSYS from a filter that traps (ConfineOptions::on_violation, for
// diagnosis): the call was not made. Tells on_violation which it was, then
// dies of SIGSYS (the default action, now unblocked).
void OnRefusedCall(int, siginfo_t* info, void*) {
  if (g_on_violation != nullptr) g_on_violation(long(info->si_syscall));
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigaction(SIGSYS, &dfl, nullptr);
  sigset_t sys;
  sigemptyset(&sys);
  sigaddset(&sys, SIGSYS);
  sigprocmask(SIG_UNBLOCK, &sys, nullptr);
  syscall(SYS_tgkill, getpid(), syscall(SYS_gettid), SIGSYS);
  _exit(128 + SIGSYS);  // not reached
}

// How BindInto binds: as it is (device files, the runner's own /proc
// directory), or read-only.
enum class Bind { kAsIs, kReadOnly };

// `src` (a file or a directory) at `path` (default: the same path) under
// `root`, bound there; kReadOnly remounts it read-only with the source's
// other mount flags (a user namespace may not drop them). Where the source
// is missing or cannot be made read-only, it is left out and false
// returned.
bool BindInto(const std::string& root, const std::string& src, Bind how, std::string path = "") {
  if (path.empty()) path = src;
  struct stat st {};
  if (stat(src.c_str(), &st) != 0) return false;
  std::string dst = root;
  for (size_t at = 1; at <= path.size(); ++at) {
    if (at < path.size() && path[at] != '/') continue;
    dst = root + path.substr(0, at);
    if (at < path.size() || S_ISDIR(st.st_mode)) {
      if (mkdir(dst.c_str(), 0755) != 0 && errno != EEXIST) return false;
    } else if (!WriteNewFile(dst, "", 0644)) {
      return false;
    }
  }
  if (mount(src.c_str(), dst.c_str(), nullptr, MS_BIND | MS_REC, nullptr) != 0) return false;
  if (how == Bind::kAsIs) return true;
  struct statvfs v {};
  unsigned long keep = 0;
  if (statvfs(src.c_str(), &v) == 0) {
    if (v.f_flag & ST_NOSUID) keep |= MS_NOSUID;
    if (v.f_flag & ST_NODEV) keep |= MS_NODEV;
    if (v.f_flag & ST_NOEXEC) keep |= MS_NOEXEC;
    if (v.f_flag & ST_NOATIME) keep |= MS_NOATIME;
    if (v.f_flag & ST_NODIRATIME) keep |= MS_NODIRATIME;
    if (v.f_flag & ST_RELATIME) keep |= MS_RELATIME;
  }
  if (mount(nullptr, dst.c_str(), nullptr, MS_REMOUNT | MS_BIND | MS_RDONLY | keep, nullptr) != 0) {
    umount2(dst.c_str(), MNT_DETACH);
    return false;
  }
  return true;
}

// What the CUDA driver opens, bound into the new root: the GPU's device
// files (/dev/nvidia*; a Jetson's nvhost*, nvmap, nvgpu; an error when
// there is none), and read-only where they can be: /proc/driver/nvidia,
// the runner's own /proc/self, /sys.
absl::Status BindGpuFiles(const std::string& root) {
  DIR* dev = opendir("/dev");
  if (dev == nullptr) return Errno("listing /dev");
  int bound = 0;
  while (dirent* e = readdir(dev)) {
    const std::string name = e->d_name;
    if (name.rfind("nvidia", 0) != 0 && name.rfind("nvhost", 0) != 0 &&
        name.rfind("nvmap", 0) != 0 && name.rfind("nvgpu", 0) != 0) {
      continue;
    }
    struct stat st {};
    const std::string src = "/dev/" + name;
    if (stat(src.c_str(), &st) != 0) continue;
    if (!S_ISCHR(st.st_mode) && !S_ISDIR(st.st_mode)) continue;
    if (!BindInto(root, src, S_ISDIR(st.st_mode) ? Bind::kReadOnly : Bind::kAsIs) &&
        S_ISCHR(st.st_mode)) {
      closedir(dev);
      return Errno(absl::StrCat("binding ", src, " into the runner's root"));
    }
    bound += S_ISCHR(st.st_mode);
  }
  closedir(dev);
  if (bound == 0) return absl::FailedPreconditionError("no GPU device files in /dev to bind");
  BindInto(root, "/proc/driver/nvidia", Bind::kReadOnly);
  BindInto(root, "/sys", Bind::kReadOnly);
  // What the driver reads of the machine at cuInit (without them:
  // CUDA_ERROR_OPERATING_SYSTEM).
  for (const char* file : {"/proc/cpuinfo", "/proc/meminfo", "/proc/stat", "/proc/devices",
                           "/proc/sys/vm/mmap_min_addr", "/proc/sys/vm/max_map_count",
                           "/proc/sys/vm/overcommit_memory"}) {
    BindInto(root, file, Bind::kReadOnly);
  }
  // This process's own directory (what /proc/self names now: its pid in
  // the agent's PID namespace, which /proc shows), not /proc: the agent's
  // and every other process's stay out of reach. Writable: the driver
  // names its threads (task/*/comm) and fails when it cannot.
  char self[32] = {0};
  if (readlink("/proc/self", self, sizeof(self) - 1) <= 0) return Errno("reading /proc/self");
  BindInto(root, absl::StrCat("/proc/", self), Bind::kAsIs, "/proc/self");
  return absl::OkStatus();
}

// Ends this process as `status` (a wait status) says its child ended: with
// its exit code, or killed by its signal.
[[noreturn]] void EndAs(int status) {
  if (WIFEXITED(status)) _exit(WEXITSTATUS(status));
  const int sig = WIFSIGNALED(status) ? WTERMSIG(status) : SIGKILL;
  rlimit no_core{0, 0};
  setrlimit(RLIMIT_CORE, &no_core);
  signal(sig, SIG_DFL);
  sigset_t one;
  sigemptyset(&one);
  sigaddset(&one, sig);
  sigprocmask(SIG_UNBLOCK, &one, nullptr);
  kill(getpid(), sig);
  _exit(128 + sig);
}

// Closes every descriptor but `a` and `b` (which may be the same).
void CloseAllBut(int a, int b) {
  if (a > b) std::swap(a, b);
  auto close_from_to = [](unsigned first, unsigned last) {
    if (syscall(SYS_close_range, first, last, 0) == 0) return;
    for (unsigned fd = first; fd <= last && fd < 1024; ++fd) close(int(fd));
  };
  if (a > 0) close_from_to(0, unsigned(a) - 1);
  if (b > a + 1) close_from_to(unsigned(a) + 1, unsigned(b) - 1);
  close_from_to(unsigned(b) + 1, ~0U);
}

// The wait status of `pid`, a child; 125 (exited) when it cannot be had.
int WaitFor(pid_t pid) {
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return 125 << 8;
  }
  return status;
}

// The process outside the PID namespace (Confine): holds none of the
// runner's descriptors but `alive` (its child learns from that pipe's end
// whether it is still there) and `relay` (how the confined process ended,
// from the namespace's init), waits for its child, the init, and ends as
// the confined process ended. Never returns.
[[noreturn]] void Reap(pid_t init, int alive, int relay) {
  CloseAllBut(alive, relay);
  const int init_status = WaitFor(init);
  int status = 0;
  EndAs(read(relay, &status, sizeof(status)) == ssize_t(sizeof(status)) ? status : init_status);
}

// The PID namespace's init (pid 1): holds only `relay`, waits for the
// confined process and writes its wait status to `relay`. Its death (with
// the reaper's: PR_SET_PDEATHSIG) kills every process of the namespace.
// Never returns.
[[noreturn]] void Init(pid_t confined, int relay) {
  CloseAllBut(relay, relay);
  const int status = WaitFor(confined);
  (void)!write(relay, &status, sizeof(status));
  _exit(0);
}

// In the init: SIGKILL when the reaper dies, and gone at once if it
// already has (its end of `alive` closed: the pipe reads as hung up).
void StayWithReaper(int alive) {
  if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) _exit(125);
  pollfd p{alive, POLLIN, 0};
  if (poll(&p, 1, 0) != 0) _exit(125);
  close(alive);
}

// Forks into the PID namespace unshare made: returns in its second
// process (pid 2; not its init, so the signals it sends itself act as
// anywhere), in a session of its own. The calling process becomes the
// reaper outside, the first child the namespace's init (Reap, Init).
absl::Status ForkIntoPidNamespace() {
  int alive[2], relay[2];
  if (pipe2(alive, O_CLOEXEC) != 0) return Errno("pipe for the PID namespace");
  if (pipe2(relay, O_CLOEXEC) != 0) return Errno("pipe for the PID namespace");
  const pid_t init = fork();
  if (init < 0) return Errno("fork into the PID namespace");
  if (init > 0) {
    close(alive[0]);
    close(relay[1]);
    Reap(init, alive[1], relay[0]);
  }
  close(alive[1]);
  close(relay[0]);
  StayWithReaper(alive[0]);
  const pid_t confined = fork();
  if (confined < 0) return Errno("fork in the PID namespace");
  if (confined > 0) Init(confined, relay[1]);
  close(relay[1]);
  if (setsid() < 0) return Errno("setsid in the PID namespace");
  return absl::OkStatus();
}

// Its own user (where needed), mount, network, IPC and PID namespaces,
// with a fresh tmpfs as the root holding `files`; c->namespaces false when
// the kernel refuses them (no user namespaces for this user), and
// c->pid_namespace false where it refuses only that one. An error when it
// half-happened. With a PID namespace this forks (Confine); only the
// process confined returns.
absl::Status EnterNamespaces(const ConfineOptions& o, Confined* c) {
  const uid_t uid = getuid();
  const gid_t gid = getgid();
  const int base = CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC;
  int entered = -1;
  // GPU runs keep the agent's PID namespace: the driver names its threads
  // through the /proc/self bound in (BindGpuFiles), which is the outer
  // procfs and knows their outer ids only. The filter still keeps them
  // from naming another process.
  const int pid_ns = o.gpu ? 0 : CLONE_NEWPID;
  for (int extra : {CLONE_NEWUSER | pid_ns, CLONE_NEWUSER, pid_ns, 0}) {
    if (unshare(base | extra) == 0) {
      entered = extra;
      break;
    }
  }
  if (entered < 0) return absl::OkStatus();
  c->namespaces = true;
  c->pid_namespace = (entered & CLONE_NEWPID) != 0;
  const bool user_ns = (entered & CLONE_NEWUSER) != 0;
  if (user_ns) {
    // Root inside, the caller's own ids outside.
    if (!WriteWhole("/proc/self/setgroups", "deny") ||
        !WriteWhole("/proc/self/uid_map", absl::StrCat("0 ", uid, " 1")) ||
        !WriteWhole("/proc/self/gid_map", absl::StrCat("0 ", gid, " 1"))) {
      return Errno("writing the user namespace's id maps");
    }
  }
  if (c->pid_namespace) {
    // The new PID namespace is for the children made from now on: the
    // process confined goes on in one, where it sees no process outside
    // (its parent is the namespace's init) and is in a session of its own
    // (kill(0, ...) reaches no process group outside).
    if (absl::Status s = ForkIntoPidNamespace(); !s.ok()) return s;
  }

  if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
    return Errno("making the mounts private");
  }
  const char* root = "/tmp";
  if (mount("tunefarm-runner", root, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=1g") != 0) {
    return Errno("mounting the runner's tmpfs");
  }
  for (const auto& [name, bytes] : o.files) {
    if (name.empty() || name.find('/') != std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat("file name '", name, "' for the new root"));
    }
    if (!WriteNewFile(absl::StrCat(root, "/", name), bytes, 0755)) {
      return Errno(absl::StrCat("writing ", name, " into the runner's root"));
    }
    c->paths.push_back("/" + name);
  }
  if (o.gpu) {
    if (absl::Status s = BindGpuFiles(root); !s.ok()) return s;
  }
  if (mkdir("/tmp/.old-root", 0700) != 0) return Errno("mkdir for the old root");
  if (syscall(SYS_pivot_root, root, "/tmp/.old-root") != 0) return Errno("pivot_root");
  if (chdir("/") != 0) return Errno("chdir to the new root");
  if (umount2("/.old-root", MNT_DETACH) != 0) return Errno("detaching the old root");
  if (rmdir("/.old-root") != 0) return Errno("removing the old root's mount point");
  if (mount(nullptr, "/", nullptr, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, nullptr) != 0) {
    return Errno("remounting the root read-only");
  }
  if (!user_ns && uid == 0) {
    // Root without a user namespace: become nobody.
    const gid_t nobody = 65534;
    if (setgroups(0, nullptr) != 0 || setresgid(nobody, nobody, nobody) != 0 ||
        setresuid(nobody, nobody, nobody) != 0) {
      return Errno("dropping to uid 65534");
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Confined> Confine(const ConfineOptions& options) {
  Confined c;
  if (absl::Status s = EnterNamespaces(options, &c); !s.ok()) return s;
  if (!c.namespaces) {
    // The files as memory-backed descriptors, opened by their /proc path.
    c.paths.clear();
    for (const auto& [name, bytes] : options.files) {
      int fd = int(syscall(SYS_memfd_create, name.c_str(), 0));
      if (fd < 0) return Errno("memfd_create");
      if (!wire::WriteAll(fd, bytes.data(), bytes.size())) return Errno("writing a memfd");
      c.paths.push_back(absl::StrCat("/proc/self/fd/", fd));
    }
  }
  auto limit = [](int resource, rlim_t value) {
    rlimit rl{value, value};
    return setrlimit(resource, &rl) == 0;
  };
  // The CUDA driver holds a descriptor per device file, context and stream.
  const rlim_t files = options.gpu ? 1024 : 64;
  if (!limit(RLIMIT_CORE, 0) || !limit(RLIMIT_FSIZE, 0) || !limit(RLIMIT_NOFILE, files)) {
    return Errno("setrlimit");
  }
  // The last threads this process makes; then no more processes or threads
  // for it (NPROC 0 refuses them wherever seccomp would not). The driver of
  // a GPU run may start threads later (the filter still refuses processes).
  if (options.start_threads) options.start_threads();
  if (!options.gpu && !limit(RLIMIT_NPROC, 0)) return Errno("setrlimit NPROC");
  if (options.cpu_limit_s > 0) {
    rlimit rl{rlim_t(std::ceil(options.cpu_limit_s)), rlim_t(std::ceil(options.cpu_limit_s)) + 1};
    if (setrlimit(RLIMIT_CPU, &rl) != 0) return Errno("setrlimit CPU");
  }
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return Errno("PR_SET_NO_NEW_PRIVS");
  uint32_t refuse = SECCOMP_RET_KILL_PROCESS;
  if (options.on_violation != nullptr) {
    refuse = SECCOMP_RET_TRAP;
    g_on_violation = options.on_violation;
    struct sigaction on_sys {};
    on_sys.sa_sigaction = OnRefusedCall;
    on_sys.sa_flags = SA_SIGINFO;
    if (sigaction(SIGSYS, &on_sys, nullptr) != 0) return Errno("sigaction SIGSYS");
  }
  std::vector<sock_filter> code = Filter(options.gpu, c.namespaces, refuse);
  sock_fprog prog{static_cast<unsigned short>(code.size()), code.data()};
  // TSYNC: the filter (and NO_NEW_PRIVS) on every thread of the process.
  if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC, &prog) != 0) {
    if (options.filter_optional && (errno == EINVAL || errno == ENOSYS)) return c;
    return Errno("installing seccomp");
  }
  c.filtered = true;
  return c;
}

const char* SyscallName(long nr) {
  static const struct {
    long nr;
    const char* name;
  } kNames[] = {
#define TF_SYSCALL(name) {SYS_##name, #name},
#ifdef SYS_open
      TF_SYSCALL(open) TF_SYSCALL(creat) TF_SYSCALL(fork) TF_SYSCALL(vfork)
      TF_SYSCALL(poll) TF_SYSCALL(epoll_wait) TF_SYSCALL(readlink) TF_SYSCALL(access)
      TF_SYSCALL(stat) TF_SYSCALL(lstat) TF_SYSCALL(dup2) TF_SYSCALL(unlink) TF_SYSCALL(rename)
      TF_SYSCALL(mkdir) TF_SYSCALL(rmdir) TF_SYSCALL(chmod) TF_SYSCALL(chown) TF_SYSCALL(mknod)
      TF_SYSCALL(pipe) TF_SYSCALL(eventfd) TF_SYSCALL(epoll_create) TF_SYSCALL(signalfd)
      TF_SYSCALL(inotify_init)
#endif
      TF_SYSCALL(openat) TF_SYSCALL(ioctl) TF_SYSCALL(socket) TF_SYSCALL(socketpair)
      TF_SYSCALL(connect) TF_SYSCALL(bind) TF_SYSCALL(listen) TF_SYSCALL(accept) TF_SYSCALL(accept4)
      TF_SYSCALL(sendto) TF_SYSCALL(recvfrom) TF_SYSCALL(sendmsg) TF_SYSCALL(recvmsg)
      TF_SYSCALL(shutdown) TF_SYSCALL(setsockopt) TF_SYSCALL(getsockopt) TF_SYSCALL(clone)
      TF_SYSCALL(execve) TF_SYSCALL(execveat) TF_SYSCALL(wait4) TF_SYSCALL(waitid) TF_SYSCALL(kill)
      TF_SYSCALL(tkill) TF_SYSCALL(tgkill) TF_SYSCALL(ptrace) TF_SYSCALL(process_vm_readv)
      TF_SYSCALL(process_vm_writev) TF_SYSCALL(mount) TF_SYSCALL(umount2) TF_SYSCALL(pivot_root)
      TF_SYSCALL(chroot) TF_SYSCALL(unshare) TF_SYSCALL(setns) TF_SYSCALL(prctl)
      TF_SYSCALL(prlimit64) TF_SYSCALL(setrlimit) TF_SYSCALL(setuid) TF_SYSCALL(setgid)
      TF_SYSCALL(setresuid) TF_SYSCALL(setresgid) TF_SYSCALL(setgroups) TF_SYSCALL(capset)
      TF_SYSCALL(unlinkat) TF_SYSCALL(renameat) TF_SYSCALL(mkdirat) TF_SYSCALL(mknodat)
      TF_SYSCALL(fchmod) TF_SYSCALL(fchmodat) TF_SYSCALL(fchown) TF_SYSCALL(fchownat)
      TF_SYSCALL(truncate) TF_SYSCALL(ftruncate) TF_SYSCALL(fsync) TF_SYSCALL(fdatasync)
      TF_SYSCALL(linkat) TF_SYSCALL(symlinkat) TF_SYSCALL(readlinkat) TF_SYSCALL(faccessat)
      TF_SYSCALL(getdents64) TF_SYSCALL(statfs) TF_SYSCALL(fstatfs) TF_SYSCALL(uname)
      TF_SYSCALL(sysinfo) TF_SYSCALL(getrusage) TF_SYSCALL(ppoll) TF_SYSCALL(pselect6)
      TF_SYSCALL(epoll_create1) TF_SYSCALL(epoll_ctl) TF_SYSCALL(epoll_pwait) TF_SYSCALL(eventfd2)
      TF_SYSCALL(pipe2) TF_SYSCALL(dup3) TF_SYSCALL(signalfd4) TF_SYSCALL(inotify_init1)
      TF_SYSCALL(timerfd_create) TF_SYSCALL(timerfd_settime) TF_SYSCALL(memfd_create)
      TF_SYSCALL(get_mempolicy) TF_SYSCALL(set_mempolicy) TF_SYSCALL(mbind)
      TF_SYSCALL(migrate_pages) TF_SYSCALL(move_pages) TF_SYSCALL(sched_setaffinity)
      TF_SYSCALL(sched_setscheduler) TF_SYSCALL(sched_getparam) TF_SYSCALL(sched_getscheduler)
      TF_SYSCALL(setpriority) TF_SYSCALL(getpriority) TF_SYSCALL(mlock) TF_SYSCALL(munlock)
      TF_SYSCALL(mlockall) TF_SYSCALL(msync) TF_SYSCALL(mincore) TF_SYSCALL(shmget)
      TF_SYSCALL(shmat) TF_SYSCALL(semget) TF_SYSCALL(msgget) TF_SYSCALL(bpf)
      TF_SYSCALL(perf_event_open) TF_SYSCALL(seccomp) TF_SYSCALL(userfaultfd) TF_SYSCALL(keyctl)
      TF_SYSCALL(add_key) TF_SYSCALL(personality) TF_SYSCALL(syslog) TF_SYSCALL(kcmp)
      TF_SYSCALL(io_uring_setup) TF_SYSCALL(io_setup) TF_SYSCALL(timer_create) TF_SYSCALL(getitimer)
      TF_SYSCALL(setitimer) TF_SYSCALL(times) TF_SYSCALL(getsid) TF_SYSCALL(setsid)
      TF_SYSCALL(getpgid) TF_SYSCALL(setpgid) TF_SYSCALL(clone3) TF_SYSCALL(close_range)
#undef TF_SYSCALL
  };
  for (const auto& n : kNames) {
    if (n.nr == nr) return n.name;
  }
  return "";
}

}  // namespace tunefarm::runtime
