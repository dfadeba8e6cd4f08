// What the measurement sandbox (sandbox.cc) and its runner process
// (runner_main.cc) exchange. Both come from the same build and run on the
// same machine, so the structs go over as raw bytes; the magic catches a
// runner from another build.
//
// Parent -> runner, in a memfd passed as fd 3:
//   RunRequestHeader, the kernel (a shared object, or for device kCuda a
//   GpuPlan in EncodeGpuPlan's form), then either
//   - inputs given (signature_bytes 0): per argument an int64 count and
//     that many floats, or
//   - inputs made by the runner (n_args 0): signature_bytes of a serialized
//     KernelSignature, whose RandomInputs(input_seed), packed as it says,
//     the runner makes after it is confined;
//   then reference_count floats.
// Runner -> parent, through a pipe on fd 4:
//   RunReport, then (when want_output) n_out floats of the kernel's output;
//   or, when the filter refused a system call, a RunReport saying which,
//   written by the SIGSYS handler before the runner dies of SIGSYS.
#pragma once

#include <unistd.h>

#include <cstddef>
#include <cstdint>

namespace tunefarm::runner::wire {

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

constexpr uint32_t kMagic = 0x36524654;  // "TFR6"
constexpr int kMaxRepeats = 64;
constexpr int kRequestFd = 3;
constexpr int kReportFd = 4;

enum class Device : int32_t { kCpu = 0, kCuda = 1 };

struct RunRequestHeader {
  uint32_t magic;
  Device device;
  int32_t threads;
  int32_t repeats;
  int32_t want_output;
  int32_t number;       // runs per repeat; 0: from min_repeat_ms
  int32_t flush_cache;  // flush the last-level cache before every timed run
  double min_repeat_ms;
  double warmup_ms;  // untimed runs until this much has run (at least one)
  double max_timing_s;
  double tolerance;
  int64_t memory_limit_bytes;  // address space the runner may add after start-up
  int64_t n_out;
  int64_t n_args;
  int64_t so_bytes;
  int64_t reference_count;
  double cpu_limit_s;  // RLIMIT_CPU of the confined runner; 0: none
  int64_t signature_bytes;  // > 0: the inputs are made by the runner
  uint64_t input_seed;
  int32_t filter_optional;  // ConfineOptions::filter_optional
  int32_t reserved;
};

enum class RunStatus : int32_t { kOk = 0, kWrongResult = 1, kRuntimeError = 2 };

struct RunReport {
  uint32_t magic;
  RunStatus status;
  int32_t rc;
  int32_t repeats;
  int32_t load_failed;  // the shared object did not load
  int32_t bad_request;  // the request could not be read
  int32_t not_confined;  // the sandbox could not be set up (message says why)
  int32_t namespaces;    // the runner ran in its own empty root, without network
  int32_t filtered;      // the runner ran under the seccomp filter
  int32_t refused;       // the filter refused a call (the SIGSYS handler's report)
  int32_t refused_syscall;  // which: its number on this architecture
  int32_t reserved;
  double worst_error;
  int64_t bad_index;
  double costs[kMaxRepeats];
  char message[160];  // why it did not load / the request was bad / the GPU failed
};

}  // namespace tunefarm::runner::wire
