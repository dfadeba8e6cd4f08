// Schedules written by hand in the schedule space: what the space can
// express, and the floor the search has to beat.
//
// HandwrittenConv2dSchedule is the classic direct convolution for CPUs with
// wide vectors, as a Trace (every step is an ordinary
// primitive, so the search can reach it too):
//   - layout_pack: weights OIHW -> [O/v][I][H][W][v], v = vector lanes, so
//     the v output channels of one (i, h, w) are one contiguous vector;
//   - cache_write (or, with an epilogue, the epilogue stage itself): the
//     output tile is accumulated in a local buffer of
//     rows x cols x (channels / v) vectors that LLVM keeps in registers;
//   - the local stage is computed at the output tile loop (compute_at), with
//     the reduction (input channel, kernel row, kernel column) outside the
//     register tile and the tile unrolled, vectorized over output channels:
//     each step is one weight vector load per channel block, one broadcast
//     input element per output pixel and rows*cols*(channels/v) FMAs;
//   - the write-back (and the fused epilogue) runs once per tile;
//   - tiles over (batch, channel block, row block, column block) are fused
//     into one parallel loop.
#pragma once

#include <cstdint>

#include "absl/status/statusor.h"
#include "compiler/ir/compute.h"
#include "compiler/ir/target.h"
#include "compiler/schedule/tiling.h"
#include "compiler/schedule/trace.h"

namespace tunefarm::schedule {

struct ConvTile {
  int64_t channels = 32;  // output channels per tile (a multiple of the vector lanes)
  int64_t rows = 1;       // output rows per tile
  int64_t cols = 14;      // output columns per tile
};

// A register tile for the convolution of `dag`: as wide a row segment as
// divides the output width (up to 14), and as many channel vectors as keep
// the accumulators within the register file.
ConvTile PickConvTile(const ir::ComputeDAG& dag, const ir::Target& target);

// The schedule above for a conv2d_nchw DAG (padding, convolution, optional
// epilogue); an error if the DAG is not one, or if its input depends on the
// output channel (grouped, depthwise).
absl::StatusOr<Trace> HandwrittenConv2dSchedule(const ir::ComputeDAG& dag, const ir::Target& target,
                                                const ConvTile& tile);

// The same loops as decisions of the tiling sketch (so a search can start
// from them): the register tile of `tile` at S3, the whole reduction
// outside it, padding as a pass of its own, the weight packed by the
// channel tile, every tile loop in the parallel loop.
absl::StatusOr<Trace> ChannelVectorConv2dSchedule(const ir::ComputeDAG& dag,
                                                  const ir::Target& target, const ConvTile& tile);

// Dense (data [M,K] x weight [N,K]^T) on CPUs: the weight would be read
// across its rows by a loop vectorized over N (a gather per element), so it
// is packed [N/v][K][v] and the output is computed in register tiles of
// rows x (blocks * v), the reduction outside the tile: each step loads
// `blocks` contiguous weight vectors and broadcasts `rows` data elements.
// Tiles are fused into one parallel loop. v is the widest of the target's
// lanes, 8 or 4 that divides N; an error if none does, or if the DAG is not
// a dense with a constant weight.
absl::StatusOr<Trace> HandwrittenDenseSchedule(const ir::ComputeDAG& dag, const ir::Target& target);

// Matrix products on CPUs (matmul, batch_matmul, dense; B's rows
// contiguous along the columns, or B constant) as decisions of the tiling
// sketch, BLIS's blocking: register tiles of 4-8 rows x 2 column vectors
// (6 x 2 with AVX2) or x 1 where that holds more accumulators, B packed per
// reduction block of 128 for 2 such tiles, blocks of up to 128 rows
// streaming past it, and (batch, row block, column block) as the parallel
// loop, with row blocks made smaller until there are 2 blocks per core. M
// of 2 or more without a divisor of 4-8 (a ViT's 197 tokens) takes rows of
// 1-3 x up to 8 vectors, every row in one block over a 64-deep packed
// block of B. An error for any other DAG, where the columns are not whole
// vectors of 4 or more lanes, or where the tile holds fewer than 8
// accumulators.
absl::StatusOr<CpuTiling> MatmulTiling(const ir::ComputeDAG& dag, const ir::Target& target);
absl::StatusOr<Trace> MatmulTiledSchedule(const ir::ComputeDAG& dag, const ir::Target& target);

// Grouped and depthwise NCHW convolutions on CPUs (the input depends on the
// output channel, so HandwrittenConv2dSchedule does not apply), as decisions
// of the tiling sketch: padding read inline, register tiles of whole output
// rows (or as long a multiple of the lanes dividing the row as the
// accumulators hold; several rows where they are short), vectorized along
// the row, the reduction inside the tile, and (batch, channel) as the
// parallel loop. An error for any other DAG.
absl::StatusOr<Trace> GroupedConv2dSchedule(const ir::ComputeDAG& dag, const ir::Target& target);

// Dense NCHW convolutions vectorized along the output row instead (the
// tiling sketch's decisions, as for grouped ones, with a tile of output
// channels sharing each input vector): the default where
// PrefersRowConv(dag, target), i.e. the output channels are not whole
// vectors, or the reduction is shallow and the rows unstrided. An error for
// any other DAG.
absl::StatusOr<Trace> RowConv2dSchedule(const ir::ComputeDAG& dag, const ir::Target& target);
bool PrefersRowConv(const ir::ComputeDAG& dag, const ir::Target& target);

// Dense NHWC convolutions on CPUs whose output channels are whole
// vectors, as decisions of the tiling sketch: padding as a pass of its
// own, the weight packed by the channel tile, register tiles of rows x 2
// columns x 2 channel vectors, the reduction outside the tile with the
// input channels innermost, and (batch, row, column, channel) blocks as
// the parallel loop. An error for any other DAG (grouped and depthwise NHWC
// ones take GroupedConv2dSchedule).
absl::StatusOr<Trace> NhwcConv2dSchedule(const ir::ComputeDAG& dag, const ir::Target& target);

// NHWC transposed convolutions whose kernel is the stride (upsampling) on
// CPUs, as decisions of the tiling sketch: register tiles of two rows x
// columns x output-channel vectors (even rows and columns, so every tile
// holds whole kernel phases and each input element is one broadcast per
// two columns), the weight packed by the channel tile, the input channels
// outside the tile, and the tile loops fused into the parallel loop. An
// error for any other DAG, or where the output channels are not whole
// vectors of 4 or more lanes.
absl::StatusOr<Trace> NhwcConvTransposeSchedule(const ir::ComputeDAG& dag, const ir::Target& target);

// Winograd F(2x2, 3x3) convolutions (conv2d with winograd = 2) on CPUs, per
// row of output tiles (the parallel loop): the input tiles of that row
// transformed into a local buffer, vectorized over input channels; the 16
// GEMMs with the transformed weight (packed by channel block) into a second
// local buffer, in register tiles of output tiles x channel vectors, the
// input channels innermost in the reduction; then the output transform and
// the epilogue, vectorized over output channels. Images of at most 64 tiles
// instead transform the whole input in one pass and run parallel over
// channel blocks, so the weight is read once. An error for any other DAG,
// or where the channels are not whole vectors of 4 or more lanes.
absl::StatusOr<Trace> WinogradConv2dSchedule(const ir::ComputeDAG& dag, const ir::Target& target);

}  // namespace tunefarm::schedule
