// What the measurement sandbox (sandbox.cc) and its runner process
// (runner_main.cc) exchange. Both come from the same build and run on the
// same machine, so the structs go over as raw bytes; the magic catches a
// runner from another build. The runner runs code it was sent, so nothing
// it writes is taken on trust: the agent compares the output itself, takes
// the outcome of a refused system call from the wait status, and holds the
// timings to its own clock (sandbox.h).
//
// Parent -> runner, in a memfd passed as fd 3, read-only and sealed:
//   RunRequestHeader, the kernel (a shared object, or for device kCuda a
//   GpuPlan in EncodeGpuPlan's form), then either
//   - inputs given (signature_bytes 0): per argument an int64 count and
//     that many floats, or
//   - inputs made by the runner (n_args 0): signature_bytes of a serialized
//     KernelSignature, whose RandomInputs(input_seed), packed as it says,
//     the runner makes after it is confined.
//   No reference: the runner never sees what its output is checked against.
// Runner -> parent, through a pipe on fd 4, then:
//   - after the checking run: Checked, then n_out floats of its output;
//     the runner then waits for one byte on fd 5 (kGo: time it) before the
//     warm-up and the timed repeats, and the parent kills it instead when
//     the output is wrong;
//   - at the end, or instead of Checked when it fails before (the request,
//     the sandbox, the load, the inputs, an error code of the checking
//     run): a RunReport.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace tunefarm::runtime::wire {

// Writes all n bytes (short writes continued); false on an error.
inline bool WriteAll(int fd, const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w <= 0) return false;
    p += w;
    n -= size_t(w);
  }
  return true;
}

// The buffer a runner writes before each timed run of a flushed timing:
// twice the last-level cache, at least 64 MiB.
inline size_t CacheFlushBytes() {
  const long llc = sysconf(_SC_LEVEL3_CACHE_SIZE);
  return size_t(std::max<long>(llc > 0 ? 2 * llc : 0, 64L << 20));
}

constexpr uint32_t kMagic = 0x37524654;  // "TFR7"
constexpr int kMaxRepeats = 64;
constexpr int kRequestFd = 3;
constexpr int kReportFd = 4;
constexpr int kGoFd = 5;
constexpr char kGo = 'g';

enum class Device : int32_t { kCpu = 0, kCuda = 1 };

struct RunRequestHeader {
  uint32_t magic;
  Device device;
  int32_t threads;
  int32_t repeats;
  int32_t number;       // runs per repeat; 0: from min_repeat_ms
  int32_t flush_cache;  // flush the last-level cache before every timed run
  double min_repeat_ms;
  double warmup_ms;  // untimed runs until this much has run (at least one)
  double max_timing_s;
  int64_t memory_limit_bytes;  // address space the runner may add after start-up
  int64_t n_out;
  int64_t n_args;
  int64_t so_bytes;
  double cpu_limit_s;  // RLIMIT_CPU of the confined runner; 0: none
  int64_t signature_bytes;  // > 0: the inputs are made by the runner
  uint64_t input_seed;
  int32_t filter_optional;  // ConfineOptions::filter_optional
  int32_t reserved;
};

enum class MessageKind : uint32_t { kChecked = 1, kReport = 2 };

// How the runner was confined (Confined), as it says: informational only.
struct Confinement {
  int32_t namespaces;     // its own empty root, without network
  int32_t pid_namespace;  // its own PID namespace
  int32_t filtered;       // under the seccomp filter
  int32_t reserved;
};

// The checking run returned 0; its n_out output floats follow.
struct Checked {
  uint32_t magic;
  MessageKind kind;  // kChecked
  Confinement confinement;
};

enum class RunStatus : int32_t { kOk = 0, kRuntimeError = 2 };

struct RunReport {
  uint32_t magic;
  MessageKind kind;  // kReport
  RunStatus status;  // kOk: timed (after a Checked the parent accepted)
  int32_t rc;        // the kernel's return code (of the run that failed)
  int32_t repeats;   // costs given
  int32_t load_failed;   // the shared object did not load
  int32_t bad_request;   // the request could not be read
  int32_t not_confined;  // the sandbox could not be set up (message says why)
  Confinement confinement;
  int64_t inner;  // runs per repeat
  double costs[kMaxRepeats];  // seconds per run, per repeat
  char message[160];  // why it did not load / the request was bad / the GPU failed
};

}  // namespace tunefarm::runtime::wire
