// How a GPU-lowered program launches: its kernels (one per nest at the root,
// below the root allocations, which are the workspace the kernels share),
// each kernel's grid, block and shared memory, checked against the
// target's limits. The CUDA back end and the GPU sketches both use this.
#pragma once

#include <array>
#include <cstdint>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "compiler/ir/compute.h"
#include "compiler/ir/stmt.h"
#include "compiler/ir/target.h"

namespace tunefarm::schedule {

struct GpuLaunch {
  ir::Stmt nest;
  std::array<int64_t, 3> grid = {1, 1, 1};
  std::array<int64_t, 3> block = {1, 1, 1};
  int64_t shared_bytes = 0;  // the buffers' sizes summed
  // Shared buffers (tensor, elements) and bound loop variables, in order met.
  std::vector<std::pair<int, int64_t>> shared;
  std::vector<std::pair<const ir::ExprNode*, ir::ForKind>> bound;
  // The shared buffers laid out in order, each 16-byte aligned: byte offset
  // of each (as `shared`), and where the last ends (what the kernel takes).
  std::vector<int64_t> shared_offsets;
  int64_t shared_end = 0;
  // Past the static limit the layout is carved from dynamic shared memory.
  bool DynamicShared() const { return shared_end > ir::kStaticSharedBytes; }
};

struct GpuLaunchPlan {
  std::vector<std::pair<int, std::vector<int64_t>>> workspace;  // tensor, shape
  std::vector<GpuLaunch> kernels;
};

// The launches of `program`, lowered from `dag` (whose tensors give each
// buffer's element size). InvalidArgument, naming the kernel (tf_kernel_N)
// and the limit, for more threads per block than -max-threads-per-block,
// block dimensions past 1024/1024/64 or grid y/z past 65535, a shared
// layout (shared_end) past -max-shared-memory-per-block, or one index bound
// twice with two extents in a kernel.
absl::StatusOr<GpuLaunchPlan> PlanGpuLaunches(const ir::ComputeDAG& dag, const ir::Stmt& program,
                                              const ir::Target& target);

}  // namespace tunefarm::schedule
