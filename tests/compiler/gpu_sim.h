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

#include <array>
#include <cstdint>
#include <utility>
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

// The interpreter's tensor-core tables, as it uses them (each a (row,
// column) pair; tests/compiler/ptx_isa_test.cc holds them against the PTX
// ISA's).
//
// mma.sync m16n8k16 (tf32: m16n8k8): lane l's fragment of A (16x16; tf32
// 16x8) or, where `b`, of B (16x8; tf32 8x8), element e (a_e, b_e) at
// [e] of the operand.
std::vector<std::pair<int, int>> MmaFragmentPlaces(bool b, bool tf32, int lane);
// mma.sync's accumulator element i (c_i, d_i; 0..3) of lane l in D (16x8).
std::pair<int, int> MmaAccumulatorPlace(int lane, int i);
// ldmatrix .m8n8 .b16: the lane whose address names row `row` of matrix
// `matrix` (0..3).
int LdmatrixRowLane(int matrix, int row);
// ldmatrix: what lane l receives in its register for a matrix, its 16-bit
// half h (0 the low one): that element (row, column) of the matrix as its
// rows are stored (with `trans`, .trans).
std::pair<int, int> LdmatrixPlace(bool trans, int lane, int h);
// wgmma m64nNk16: thread t's (0..127 of the warpgroup) float32
// accumulator register q (d_q, q < N/2) in D (64 x N).
std::pair<int64_t, int64_t> WgmmaAccumulatorPlace(int thread, int64_t q);
// wgmma's no-swizzle canonical shared-memory layouts: the element offset
// from the descriptor's start of element (i, k) of a factor, i along M
// (A) or N (B), K-major or MN-major, with `lbo_sbo` {lbo, sbo} in elements.
int64_t WgmmaCanonicalOffset(int64_t i, int64_t k, bool mn_major,
                             const std::array<int64_t, 2>& lbo_sbo);

}  // namespace tunefarm::testing
