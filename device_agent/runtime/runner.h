// The CPU kernel runner: loads a kernel shared object, gives it the runtime
// of common/kernel_abi.h (a thread pool for parallel loops, aligned
// temporaries) and runs or times it. Used by tests and benchmarks now, and by
// the agent's sandboxed measurement process. Links no compiler code.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/kernel_abi.h"

namespace tunefarm::runtime {

// Denormal floats read and written as zero on the calling thread while the
// guard lives (x86 MXCSR FTZ and DAZ, AArch64 FPCR.FZ), the previous mode
// restored after. Kernels and native steps run so (as TensorFlow's CPU
// threads do): an operand or result below 1.2e-38 otherwise costs a
// microcode assist of some hundred cycles, and saturated gates (sigmoid
// of -88) make them.
class FlushDenormals {
 public:
  FlushDenormals();
  ~FlushDenormals();
  FlushDenormals(const FlushDenormals&) = delete;
  FlushDenormals& operator=(const FlushDenormals&) = delete;

 private:
  uint64_t saved_ = 0;
};

// A fixed pool of threads serving TFRuntime::parallel_for (its workers
// flush denormals, as FlushDenormals). Thread safe for
// one parallel_for at a time (kernels call it from one thread).
class ThreadPool {
 public:
  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  int num_threads() const { return num_threads_; }
  // The runtime table handed to kernels; valid while the pool lives.
  const TFRuntime* runtime() const { return &runtime_; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  int num_threads_;
  TFRuntime runtime_;
};

class KernelLibrary {
 public:
  // Loads an ELF shared object given as bytes (written to a private file,
  // dlopen'ed, and unlinked).
  static absl::StatusOr<std::unique_ptr<KernelLibrary>> Load(const std::string& shared_object);
  // Loads the ELF shared object at `path`.
  static absl::StatusOr<std::unique_ptr<KernelLibrary>> Open(const std::string& path);
  ~KernelLibrary();

  TFKernelFn entry() const { return entry_; }
  int32_t Run(void* const* buffers, const ThreadPool& pool) const {
    return entry_(buffers, pool.runtime());
  }

 private:
  KernelLibrary() = default;
  void* handle_ = nullptr;
  TFKernelFn entry_ = nullptr;
};

// A 64-byte aligned float buffer. kTailBytes more lie past its end (and
// past every scratch block a pool hands out), never part of a result: a
// masked vector that straddles a buffer's end (up to 4 strided vectors of
// 16 floats) keeps its masked-off lanes on mapped memory, where an
// unmapped page would cost an assist on every access.
class AlignedBuffer {
 public:
  static constexpr size_t kTailBytes = 256;
  explicit AlignedBuffer(int64_t count);
  ~AlignedBuffer();
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  float* data() { return data_; }
  int64_t size() const { return count_; }

 private:
  float* data_;
  int64_t count_;
};

}  // namespace tunefarm::runtime
