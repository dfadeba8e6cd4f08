#include "device_agent/runtime/confine.h"

#include <fcntl.h>
#include <grp.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstddef>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "device_agent/runtime/sandbox_wire.h"

namespace tunefarm::runner {
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
    SYS_fcntl,
    SYS_dup,
};

class Program {
 public:
  void Stmt(uint16_t code, uint32_t k) { p_.push_back(BPF_STMT(code, k)); }
  void Jump(uint16_t code, uint32_t k, uint8_t jt, uint8_t jf) {
    p_.push_back(BPF_JUMP(code, k, jt, jf));
  }
  void LoadNr() { Stmt(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)); }
  // Allows `nr` when (low word of argument `arg` & mask) == value and
  // kills the process when not; other calls fall through (the accumulator
  // must hold the call number, and still does after).
  void AllowIf(int nr, int arg, uint32_t mask, uint32_t value) {
    Jump(BPF_JMP | BPF_JEQ | BPF_K, uint32_t(nr), 0, 5);
    Stmt(BPF_LD | BPF_W | BPF_ABS, uint32_t(offsetof(seccomp_data, args) + 8 * arg));
    Stmt(BPF_ALU | BPF_AND | BPF_K, mask);
    Jump(BPF_JMP | BPF_JEQ | BPF_K, value, 0, 1);
    Stmt(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
    Stmt(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS);
  }
  std::vector<sock_filter>& code() { return p_; }

 private:
  std::vector<sock_filter> p_;
};

std::vector<sock_filter> Filter() {
  Program p;
  p.Stmt(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, arch));
  p.Jump(BPF_JMP | BPF_JEQ | BPF_K, kAuditArch, 1, 0);
  p.Stmt(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS);
  p.LoadNr();
#if defined(__x86_64__)
  // The x32 ABI's numbers would slip past the checks below.
  p.Jump(BPF_JMP | BPF_JGE | BPF_K, 0x40000000u, 0, 1);
  p.Stmt(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS);
#endif
  for (int nr : kAllowed) {
    p.Jump(BPF_JMP | BPF_JEQ | BPF_K, uint32_t(nr), 0, 1);
    p.Stmt(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
  }
  // clone3's flags sit in memory the filter cannot read: ENOSYS makes the C
  // library fall back to clone, whose flags it can.
#ifdef SYS_clone3
  p.Jump(BPF_JMP | BPF_JEQ | BPF_K, SYS_clone3, 0, 1);
  p.Stmt(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ENOSYS);
#endif
  // No clone at all: the runner's threads exist before the filter does
  // (ConfineOptions::start_threads), and a new process or thread after it
  // is the loaded code's.
  // Files: read-only.
  p.AllowIf(SYS_openat, 2, O_ACCMODE | O_CREAT | O_TRUNC | O_APPEND, O_RDONLY);
  // Signals to its own threads only (abort, pthread_kill).
  p.AllowIf(SYS_tgkill, 0, 0xffffffffu, uint32_t(getpid()));
  // getrlimit, not setrlimit: no new limit (a null third argument).
  p.Jump(BPF_JMP | BPF_JEQ | BPF_K, SYS_prlimit64, 0, 6);
  p.Stmt(BPF_LD | BPF_W | BPF_ABS, uint32_t(offsetof(seccomp_data, args) + 8 * 2));
  p.Jump(BPF_JMP | BPF_JEQ | BPF_K, 0, 0, 2);
  p.Stmt(BPF_LD | BPF_W | BPF_ABS, uint32_t(offsetof(seccomp_data, args) + 8 * 2 + 4));
  p.Jump(BPF_JMP | BPF_JEQ | BPF_K, 0, 1, 0);
  p.Stmt(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS);
  p.Stmt(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
  p.Stmt(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS);  // everything else
  return std::move(p.code());
}

// Its own user (where needed), mount, network and IPC namespaces, with a
// fresh tmpfs as the root holding `files`. False when the kernel refuses
// (no user namespaces for this user); an error when it half-happened.
absl::StatusOr<bool> EnterNamespaces(const ConfineOptions& o, std::vector<std::string>* paths) {
  const uid_t uid = getuid();
  const gid_t gid = getgid();
  bool user_ns = true;
  if (unshare(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC) != 0) {
    user_ns = false;
    if (unshare(CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC) != 0) return false;
  }
  if (user_ns) {
    // Root inside, the caller's own ids outside.
    if (!WriteWhole("/proc/self/setgroups", "deny") ||
        !WriteWhole("/proc/self/uid_map", absl::StrCat("0 ", uid, " 1")) ||
        !WriteWhole("/proc/self/gid_map", absl::StrCat("0 ", gid, " 1"))) {
      return Errno("writing the user namespace's id maps");
    }
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
    paths->push_back("/" + name);
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
  return true;
}

}  // namespace

absl::StatusOr<Confined> Confine(const ConfineOptions& options) {
  Confined c;
  absl::StatusOr<bool> ns = EnterNamespaces(options, &c.paths);
  if (!ns.ok()) return ns.status();
  c.namespaces = *ns;
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
  if (!limit(RLIMIT_CORE, 0) || !limit(RLIMIT_FSIZE, 0) || !limit(RLIMIT_NOFILE, 64)) {
    return Errno("setrlimit");
  }
  // The last threads this process makes; then no more processes or threads
  // for it (NPROC 0 refuses them wherever seccomp would not).
  if (options.start_threads) options.start_threads();
  if (!limit(RLIMIT_NPROC, 0)) return Errno("setrlimit NPROC");
  if (options.cpu_limit_s > 0) {
    rlimit rl{rlim_t(std::ceil(options.cpu_limit_s)), rlim_t(std::ceil(options.cpu_limit_s)) + 1};
    if (setrlimit(RLIMIT_CPU, &rl) != 0) return Errno("setrlimit CPU");
  }
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return Errno("PR_SET_NO_NEW_PRIVS");
  std::vector<sock_filter> code = Filter();
  sock_fprog prog{static_cast<unsigned short>(code.size()), code.data()};
  // TSYNC: the filter (and NO_NEW_PRIVS) on every thread of the process.
  if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC, &prog) != 0) {
    if (options.filter_optional && (errno == EINVAL || errno == ENOSYS)) return c;
    return Errno("installing seccomp");
  }
  c.filtered = true;
  return c;
}

}  // namespace tunefarm::runner
