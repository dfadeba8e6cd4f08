// GPU code generation: loop IR -> CUDA C (one __global__ function per nest
// at the program's root) -> NVRTC -> cubin for the target's sm_XX, or PTX.
// Needs no GPU: NVRTC compiles on any machine with the toolkit's library.
//
//   TF_ASSIGN_OR_RETURN(GpuProgram p, EmitCuda(state.dag(), Lower(state), target));
//   TF_ASSIGN_OR_RETURN(GpuArtifact a, CompileCuda(p, target));
//
// The launch of a program: for each kernel in order, grid x block threads,
// parameters = the tensors of `args` (kernel inputs and output as ComputeDAG
// args, then workspace buffers the caller allocates), all float32, row-major.
// Thread safe: no shared state.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "compiler/ir/compute.h"
#include "compiler/ir/stmt.h"
#include "compiler/ir/target.h"
#include "compiler/schedule/gpu_launch.h"

namespace tunefarm::codegen {

// The most static shared memory a kernel may declare, on every arch.
constexpr int64_t kStaticSharedLimit = ir::kStaticSharedBytes;

struct GpuKernel {
  std::string name;  // tf_kernel_0, tf_kernel_1, ...
  std::array<int64_t, 3> grid = {1, 1, 1};
  std::array<int64_t, 3> block = {1, 1, 1};
  // Shared memory: static __shared__ arrays, or, where dynamic_shared (past
  // kStaticSharedLimit), the bytes each launch passes, opted in to by the
  // loader (CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES).
  int64_t shared_bytes = 0;
  bool dynamic_shared = false;
  std::vector<int> params;  // tensor ids, in parameter order
  // From the build (NVRTC's ptxas report and the cubin); -1 where unknown.
  int registers = -1;
  int64_t stack_bytes = -1;
  int64_t spill_store_bytes = -1;
  int64_t spill_load_bytes = -1;

  int64_t threads() const { return block[0] * block[1] * block[2]; }
  int64_t blocks() const { return grid[0] * grid[1] * grid[2]; }
};

struct GpuProgram {
  std::string source;  // CUDA C
  // Uses sm_90a's own instructions (wgmma): built for sm_90a and
  // compute_90a, which run on sm_90 devices only.
  bool arch_specific = false;
  std::vector<GpuKernel> kernels;
  // Root intermediate tensors the kernels pass between them: (tensor, bytes).
  std::vector<std::pair<int, int64_t>> workspace;
};

// CUDA C for `program` (a GPU-lowered program of `dag`). Refuses, naming the
// kernel and the limit, a program the target cannot launch: more threads per
// block than -max-threads-per-block, block or grid dimensions past CUDA's
// limits, more shared memory than -max-shared-memory-per-block, or two
// loops of one kernel bound to the same thread index with different extents.
absl::StatusOr<GpuProgram> EmitCuda(const ir::ComputeDAG& dag, const ir::Stmt& program,
                                    const ir::Target& target);

struct CudaCompileOptions {
  bool cubin = true;  // SASS for the target's sm_XX
  bool ptx = false;   // PTX for compute_XX (also kept when cubin is on)
};

struct GpuArtifact {
  GpuProgram program;  // kernels carry the build's registers and spills
  std::string cubin;
  std::string ptx;
  std::string log;  // NVRTC's log (ptxas report)
  double compile_ms = 0;
};

// Compiles with NVRTC for the target's arch. A source NVRTC rejects is an
// Internal error carrying its log; an arch this NVRTC cannot build is
// FailedPrecondition naming the archs it can; more registers per thread than
// the target's -max-registers-per-thread is InvalidArgument. Unavailable in a
// build without the CUDA toolkit.
absl::StatusOr<GpuArtifact> CompileCuda(const GpuProgram& program, const ir::Target& target,
                                        const CudaCompileOptions& options = {});

// What a cubin (an ELF file) says of one kernel.
struct CubinKernelInfo {
  std::string name;
  int registers = 0;       // .text.NAME's sh_info, or EIATTR_REGCOUNT in .nv.info
  int64_t code_bytes = 0;  // size of .text.NAME
  // Size of .nv.shared.NAME (0 if absent): the kernel's static shared
  // memory, aligned, plus on sm_90 and newer 1 KiB the system reserves.
  int64_t shared_bytes = 0;
};

// The kernels of a cubin, from its ELF section table; an error if it is not
// a 64-bit little-endian ELF or its tables run past the end.
absl::StatusOr<std::vector<CubinKernelInfo>> ReadCubin(const std::string& cubin);

}  // namespace tunefarm::codegen
