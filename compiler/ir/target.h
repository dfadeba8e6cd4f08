// Code generation targets, parsed from their string form.
//
//   llvm -mtriple=aarch64-linux-gnu -mcpu=cortex-a78 -mattr=+neon -num-cores=6
//   cuda -arch=sm_87 -max-threads-per-block=1024 -max-shared-memory-per-block=49152
//
// Parse() fills defaults (llvm: -mtriple=x86_64-linux-gnu -mcpu=generic;
// cuda: the arch's limits) and ToString() prints the canonical form, options
// in a fixed order, so equal targets have equal strings. A bad string is an
// InvalidArgument naming the bad field. Whether LLVM knows the CPU is checked
// by the code generator, not here.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace tunefarm::ir {

// The most static shared memory a kernel may declare, on every arch: a
// cuda target's shared memory per block unless it says more.
constexpr int64_t kStaticSharedBytes = 48 * 1024;

struct Target {
  enum class Kind { kLLVM, kCUDA };
  Kind kind = Kind::kLLVM;

  // llvm
  std::string triple;
  std::string cpu;
  std::vector<std::string> attrs;  // "+avx512f", "-sse4a", sorted, no repeats
  int num_cores = 0;               // 0: all cores of the device

  // cuda
  int sm = 0;  // 87 for sm_87
  int max_threads_per_block = 0;
  int max_shared_memory_per_block = 0;
  int max_registers_per_thread = 0;

  static absl::StatusOr<Target> Parse(const std::string& spec);
  std::string ToString() const;

  bool is_gpu() const { return kind == Kind::kCUDA; }
  // "x86_64", "aarch64" (llvm) or "sm_87" (cuda).
  std::string arch() const;
  // x86 cores with AVX-512 that kernels should use at full 512-bit width
  // (LLVM's own tuning prefers 256-bit vectors on them).
  bool wide_vectors() const;
  // float32 lanes of one vector register: 16 (AVX-512), 8 (AVX2), 4 (NEON).
  int float_lanes() const;
  // CPU features a board must have to run this (llvm) target's code, named
  // as Linux's /proc/cpuinfo and hwcaps name them ("avx512f", "asimddp"):
  // those its -mcpu implies (for the CPUs where it matters: AVX2/AVX-512
  // x86 cores, dot-product, fp16 and SVE Arm cores) and its -mattr adds.
  std::vector<std::string> required_cpu_features() const;
};

}  // namespace tunefarm::ir
