// A SIMT interpreter for GPU-lowered programs, so that the lowering of GPU
// schedules (bindings, register tiles, shared-memory staging, barriers) is
// checked against the float64 reference on machines without a GPU.
//
// Kernels run in order; each block runs on its own with its threads in
// lockstep, statement by statement, masked by guards. It is strict where a
// GPU is forgiving: a read or write outside a buffer, a barrier some thread
// of the block does not reach, or a shared-memory element that one thread
// writes and another reads (or writes) with no barrier between them, or one
// read or written while a cp.async copy into it has not been waited for, is
// an error, not a wrong number. 16-bit tensors hold values of their format: the
// arguments are rounded on entry, every store rounds. It checks our IR, not
// NVRTC's code: the cubin itself is only checked on a GPU.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "compiler/ir/compute.h"
#include "compiler/ir/stmt.h"
#include "compiler/ir/target.h"

namespace tunefarm::testing {

struct GpuSimStats {
  int64_t kernels = 0;
  int64_t blocks = 0;
  int64_t threads_per_block = 0;  // of the largest kernel
  int64_t barriers = 0;           // barrier crossings of block 0, all kernels
};

// `args`: one buffer per kernel argument of `dag` (dag.args order, packed
// where the schedule packs, the output last, any contents). Returns the
// output buffer.
absl::StatusOr<std::vector<float>> SimulateGpu(const ir::ComputeDAG& dag, const ir::Stmt& program,
                                               const ir::Target& target,
                                               std::vector<std::vector<float>> args,
                                               GpuSimStats* stats = nullptr);

}  // namespace tunefarm::testing
