#include "search/space/gpu_sketch.h"

#include <algorithm>

#include "common/status_macros.h"
#include "search/space/draw.h"
#include "search/space/tensor_core_sketch.h"

namespace tunefarm::search::space {
namespace {

namespace v1 = ::tunefarm::v1;
using schedule::GpuTiling;
using schedule::TilingNest;

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Thread, vthread and register tiles of spatial axis `a` for a thread budget.
void SampleAxis(const TilingNest& sh, int a, int64_t* budget, std::mt19937_64& rng, GpuTiling* d) {
  const int64_t ext = sh.spatial[size_t(a)];
  GpuTiling::Axis& x = d->spatial[size_t(a)];
  x.thread = RandomDivisor(rng, ext, std::min<int64_t>(*budget, 32));
  *budget /= x.thread;
  int64_t rest = CeilDiv(ext, x.thread);
  x.vthread = Pick(rng, 0, 3) == 0 ? RandomDivisor(rng, rest, 2) : 1;
  rest = CeilDiv(rest, x.vthread);
  x.s4 = RandomDivisor(rng, rest, 8);
  rest = CeilDiv(rest, x.s4);
  x.s3 = Pick(rng, 0, 1) == 0 ? RandomDivisor(rng, rest, 4) : 1;
}

void SampleReduce(const TilingNest& sh, int r, std::mt19937_64& rng, GpuTiling* d) {
  GpuTiling::Reduce& x = d->reduce[size_t(r)];
  x.r2 = RandomDivisor(rng, sh.reduce[size_t(r)], 8);
  x.r1 = Pick(rng, 0, 1) == 0 ? RandomDivisor(rng, sh.reduce[size_t(r)] / x.r2, 8) : 1;
}

// Whether double buffering changes the program: some R0 loop runs twice or
// more (the copies then sit at the innermost such one).
bool Pipelined(const TilingNest& sh, const GpuTiling& d) { return d.PipelinedReduce(sh) >= 0; }

}  // namespace

GpuSketch::GpuSketch(const ir::ComputeDAG& dag, const ir::Target& target)
    : dag_(dag), target_(target), nest_(TilingNest::Of(dag)) {}

std::vector<GpuTiling> GpuSketch::KnownTilings() const {
  const TilingNest& sh = nest_;
  std::vector<GpuTiling> out;
  const int ns = sh.ns();
  if (ns < 2 || sh.nr() != 1 || sh.spatial[size_t(ns - 2)] < 64 || sh.spatial[size_t(ns - 1)] < 64)
    return out;
  // (threads along M, along N, S3 on both, vthreads on both, K tile r1 x r2)
  static constexpr int64_t kTable[][6] = {{16, 16, 2, 1, 1, 8}, {16, 16, 2, 1, 2, 8},
                                          {8, 16, 2, 1, 1, 8},  {16, 8, 2, 1, 1, 8},
                                          {8, 8, 2, 1, 1, 8},   {16, 16, 1, 2, 1, 8}};
  for (const auto& row : kTable) {
    GpuTiling d = GpuTiling::Shaped(sh);
    d.spatial[size_t(ns - 2)] = {row[3], row[0], row[2], 4};
    d.spatial[size_t(ns - 1)] = {row[3], row[1], row[2], 4};
    d.reduce[0] = {row[4], row[5]};
    d.unroll = 3;
    d.double_buffer = Pipelined(sh, d);
    if (d.Fits(sh, target_)) out.push_back(d);
  }
  return out;
}

GpuTiling GpuSketch::SampleTiling(std::mt19937_64& rng) const {
  const TilingNest& sh = nest_;
  if (Pick(rng, 0, 3) == 0) {
    std::vector<GpuTiling> known = KnownTilings();
    if (!known.empty()) return known[size_t(Pick(rng, 0, int64_t(known.size()) - 1))];
  }
  GpuTiling d = GpuTiling::Shaped(sh);
  for (int tries = 0; tries < 32; ++tries) {
    static const int64_t kBudgets[] = {32, 64, 128, 256, 512, 1024};
    int64_t budget = std::min<int64_t>(kBudgets[Pick(rng, 0, 5)], target_.max_threads_per_block);
    // Innermost axes first: consecutive threads along the contiguous axis.
    for (int a = sh.ns() - 1; a >= 0; --a) SampleAxis(sh, a, &budget, rng, &d);
    if (d.Accumulators() <= schedule::kMaxGpuAccumulators) break;
  }
  for (int r = 0; r < sh.nr(); ++r) SampleReduce(sh, r, rng, &d);
  d.unroll = Pick(rng, 0, 3);
  d.storage_align = Pick(rng, 0, 1) != 0;
  d.double_buffer = Pipelined(sh, d) && Pick(rng, 0, 1) != 0;
  if (!d.Fits(sh, target_)) {  // fall back to one register per thread
    for (GpuTiling::Axis& x : d.spatial) x.vthread = x.s3 = 1;
  }
  return d;
}

GpuTiling GpuSketch::MutateTiling(const GpuTiling& parent, std::mt19937_64& rng) const {
  const TilingNest& sh = nest_;
  for (int tries = 0; tries < 16; ++tries) {
    GpuTiling d = parent;
    switch (Pick(rng, 0, 6)) {
      case 0:
      case 1:
      case 2: {  // one tile level of one spatial axis
        int a = int(Pick(rng, 0, sh.ns() - 1));
        int level = int(Pick(rng, 0, 3));
        GpuTiling::Axis& x = d.spatial[size_t(a)];
        int64_t others = 1;
        for (int l = 0; l < 4; ++l) others *= l == level ? 1 : x.tile(l);
        int64_t limit = level == 1 ? 32 : level == 3 ? 8 : 4;
        x.tile(level) =
            RandomDivisor(rng, std::max<int64_t>(1, sh.spatial[size_t(a)] / others), limit);
        break;
      }
      case 3:
        if (sh.nr() > 0) SampleReduce(sh, int(Pick(rng, 0, sh.nr() - 1)), rng, &d);
        d.double_buffer = d.double_buffer && Pipelined(sh, d);
        break;
      case 4:
        d.unroll = Pick(rng, 0, 3);
        break;
      case 5:
        d.double_buffer = !d.double_buffer && Pipelined(sh, d);
        break;
      default:
        d.storage_align = !d.storage_align;
    }
    if (d != parent && d.Fits(sh, target_)) return d;
  }
  return parent;
}

std::optional<Decisions> GpuSketch::Decode(absl::Span<const int64_t> wire) const {
  std::optional<GpuTiling> t = GpuTiling::Decode(nest_, wire);
  if (!t) return std::nullopt;
  return Decisions(*std::move(t));
}

Decisions GpuSketch::Mutate(const Decisions& d, std::mt19937_64& rng) const {
  return MutateTiling(std::get<GpuTiling>(d), rng);
}

absl::StatusOr<schedule::Trace> GpuSketch::Build(const Decisions& d) const {
  return schedule::BuildGpuTiledSchedule(dag_, target_, std::get<GpuTiling>(d));
}

schedule::Trace RandomGpuSchedule(const ir::ComputeDAG& dag, const ir::Target& target,
                            std::mt19937_64& rng) {
  if (schedule::HasTensorCoreSketch(dag, target) && Pick(rng, 0, 1) == 0) {
    const TensorCoreSketch sketch(dag, target);
    absl::StatusOr<schedule::Trace> tc = sketch.Build(sketch.Sample(rng));
    if (tc.ok()) return *std::move(tc);
  }
  if (schedule::HasTilingSketch(dag) && Pick(rng, 0, 3) != 0) {
    const GpuSketch sketch(dag, target);
    for (int tries = 0; tries < 8; ++tries) {
      GpuTiling d = sketch.SampleTiling(rng);
      if (Pick(rng, 0, 2) == 0) d = sketch.MutateTiling(d, rng);
      absl::StatusOr<schedule::Trace> tiled = schedule::BuildGpuTiledSchedule(dag, target, d);
      if (tiled.ok() && schedule::CheckGpuLaunch(dag, target, *tiled).ok()) return *std::move(tiled);
    }
  }
  static const int64_t kThreads[] = {32, 64, 128, 256, 512, 1024};
  int64_t threads = std::min<int64_t>(kThreads[Pick(rng, 0, 5)], target.max_threads_per_block);
  absl::StatusOr<schedule::Trace> fused = schedule::GpuFusedSchedule(dag, target, threads);
  TF_CHECK(fused.ok());
  return *std::move(fused);
}

}  // namespace tunefarm::search::space
