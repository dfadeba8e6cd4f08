// Confinement of a runner process before it loads code it was sent (a
// kernel's or a package's shared objects): after Confine() the process
// cannot open files outside an empty file system of its own, connect
// anywhere, start processes, signal or name any other process, or gain
// privileges. What it may still do: compute, allocate memory, start
// threads, read the clock, read and write the descriptors it already holds
// (its request and its report).
//
// The layers, each where the machine allows it:
// - Namespaces: a user namespace (or, run as root, none needed), then its
//   own mount, network, IPC and PID namespaces; the root becomes a fresh
//   tmpfs holding only the files given (the old root is detached), so /etc,
//   /proc and the agent's files are not there to read. Root without a user
//   namespace also drops to uid/gid 65534.
// - The PID namespace: Confine forks twice. The calling process stays
//   outside as the reaper: it closes every descriptor, waits, and ends as
//   the confined process ends (the same exit code, or killed by the same
//   signal, SIGSYS included); it never returns from Confine. Its child is
//   the namespace's init (pid 1), which only waits and tells the reaper
//   how the confined process ended, and dies with the reaper, taking the
//   namespace with it. The init's child, pid 2, in a session of its own,
//   is the process confined, to which Confine returns: no pid names a
//   process outside its namespace (kill, an F_SETOWN owner), and its
//   parent is that init.
// - A seccomp filter (raw BPF; no library needed on the board) on every
//   thread: an allow list of system calls; any other call is not made and
//   kills the process (SECCOMP_RET_KILL_PROCESS: no handler of the loaded
//   code's can catch it; the parent sees it killed by SIGSYS, which the
//   sandbox reports as `sandbox_violation`). Files open read-only only;
//   signals only to itself; fcntl only for descriptor and status flags and
//   duplicates (no F_SETOWN, F_SETOWN_EX, F_SETSIG, F_SETLEASE, F_NOTIFY,
//   nor O_ASYNC: none of the kernel's signals to a named process); no clone
//   (the runner's thread pool is started before the filter, by
//   start_threads), socket, execve, ptrace, mount, unshare, ioctl.
// - GPU runs (`gpu`): the code loaded is a CUDA module the driver runs on
//   the GPU, not host code, and the driver needs more of the system: the
//   new root also holds the GPU's device files, the process's own /proc
//   directory as /proc/self, and, read-only, /sys, /proc/driver/nvidia and
//   the few /proc files the driver reads at cuInit; the filter also allows
//   ioctl (not a terminal's), opening files read-write (in the new root;
//   without it, never creating or truncating), polling, record locks, new
//   threads (CLONE_THREAD only; NPROC is not 0) and the driver's queries
//   (uname, getdents64, readlink, NUMA policy). start_threads is where the
//   driver is initialized and its context made.
// - PR_SET_NO_NEW_PRIVS, and rlimits: no core files, no file writes
//   (FSIZE 0), few descriptors, no new processes or threads (NPROC 0), CPU
//   time.
// Where namespaces are refused (no user namespaces for this user), the
// filter and limits still apply and `namespaces` says so; files the user
// can read stay readable to the loaded code then. Where only the PID
// namespace is refused, and for GPU runs (the driver names its threads
// through the outer /proc), `pid_namespace` says so; the filter alone then
// keeps the process from naming others.
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace tunefarm::runtime {

struct ConfineOptions {
  // Files to place in the new root, by name (no '/'), with their bytes.
  std::vector<std::pair<std::string, std::string>> files;
  double cpu_limit_s = 0;  // RLIMIT_CPU, rounded up; 0: none
  // Starts every thread the process will have (its thread pool): called
  // after the namespaces are entered, before the filter forbids clone.
  std::function<void()> start_threads;
  // Where the kernel or an emulator refuses seccomp filters (EINVAL or
  // ENOSYS: qemu-user does), go on without one instead of failing; the
  // namespaces and limits still apply. For emulated boards only.
  bool filter_optional = false;
  // A CUDA run (see above).
  bool gpu = false;
  // For diagnosing what trusted code (the CUDA driver, gpu_sandbox_probe)
  // needs, never for code that was sent: set, a refused call is not made
  // but trapped (SECCOMP_RET_TRAP), and a SIGSYS handler calls this with
  // its number before the process dies of SIGSYS; only async-signal-safe
  // work (a write to a descriptor it holds). Loaded code could replace
  // that handler and live on. Null: a refused call kills the process.
  void (*on_violation)(long syscall_nr) = nullptr;
};

struct Confined {
  bool namespaces = false;         // the empty root and no network are in place
  bool pid_namespace = false;      // its own PID namespace (this is its pid 2)
  bool filtered = false;           // the seccomp filter is in place
  std::vector<std::string> paths;  // where each of `files` can be opened now
};

// Confines the calling process, which must have a single thread when
// called (start_threads may add more). With a PID namespace, returns in a
// child process only (above). On error the process may be partly confined
// and should exit.
absl::StatusOr<Confined> Confine(const ConfineOptions& options);

// The name of system call `nr` on this architecture ("socket"), for the
// calls a filter refusal is likely to name; "" for others.
const char* SyscallName(long nr);

}  // namespace tunefarm::runtime
