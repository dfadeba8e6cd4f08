#include "search/space/cpu_sketch.h"

#include <algorithm>

#include "search/space/draw.h"

namespace tunefarm::search::space {
namespace {

using schedule::CpuTiling;
using schedule::kComputeAtS0;
using schedule::kComputeAtS2;
using schedule::TilingNest;

// A factor for a tile level: a divisor of `extent` up to `limit` mostly.
int64_t TileFactor(std::mt19937_64& rng, int64_t extent, int64_t limit) {
  limit = std::max<int64_t>(1, std::min(limit, extent));
  std::vector<int64_t> divisors = Divisors(extent, 1, limit);
  if (Pick(rng, 0, 5) == 0) return Pick(rng, 1, limit);
  return PickOf(rng, divisors);
}

// A divisor of `extent` in [lo, hi], uniformly; TileFactor(extent, hi) when there is none.
int64_t DivisorBetween(std::mt19937_64& rng, int64_t extent, int64_t lo, int64_t hi) {
  std::vector<int64_t> divisors = Divisors(extent, lo, hi);
  if (divisors.empty()) return TileFactor(rng, extent, hi);
  return PickOf(rng, divisors);
}

// Three shapes of tiling, sampled equally often:
// - register: the register tile alone (S1 = S2 = 1), short or long reduction steps;
// - narrow: a few register tiles in S1 and S2, short reduction steps;
// - blocked: tens of register tiles in S2 (off the vector axis) per long
//   reduction step, so the operand tiles of a step stay in L1 while the
//   accumulators go through memory once per step. A GEMM needs this: on
//   Sapphire Rapids a 256x64 tile of 4x64 register tiles with 128-long
//   steps reaches oneDNN, the other two shapes 0.4-0.8x of it.
// The register tile is bounded by the accumulators it takes, the local
// (accumulator) tile by L2.
enum class Mode { kRegister, kNarrow, kBlocked };
constexpr int64_t kNarrowS2 = 4, kWideS2 = 64;
constexpr int64_t kNarrowReduce = 8, kMinBlockedReduce = 16, kWideReduce = 256;
constexpr int64_t kMaxLocalElements = 16384;

// The S2 tile (s2, up to `s2_limit`) and then the S1 tile (s1) of an axis
// with `rest` register tiles.
void DrawOuterTiles(std::mt19937_64& rng, int64_t rest, int64_t s2_limit, CpuTiling::Axis* x) {
  x->s2 = TileFactor(rng, rest, s2_limit);
  x->s1 = TileFactor(rng, (rest + x->s2 - 1) / x->s2, 4);
}

// A reduction step: long (a divisor between kMinBlockedReduce and
// kWideReduce) or short (up to kNarrowReduce).
int64_t DrawReduceStep(std::mt19937_64& rng, int64_t extent, bool long_steps) {
  return long_steps ? DivisorBetween(rng, extent, kMinBlockedReduce, kWideReduce)
                    : TileFactor(rng, extent, kNarrowReduce);
}

// Tile sizes of axis `a`: s3 (the register tile; near the vector width on
// the vector axis), then s2 and s1 (1 when `register_only`).
void SampleAxis(const TilingNest& sh, int a, int v, int64_t lanes, bool register_only,
                int64_t s2_limit, std::mt19937_64& rng, CpuTiling* d) {
  int64_t ext = sh.spatial[size_t(a)];
  int64_t t3;
  if (a == v) {
    static const int kMul[] = {1, 1, 2, 4};
    int64_t want =
        std::max<int64_t>(1, lanes * kMul[Pick(rng, 0, 3)] / (Pick(rng, 0, 3) == 0 ? 2 : 1));
    t3 = std::min(ext, want);
  } else {
    t3 = TileFactor(rng, ext, 16);
  }
  CpuTiling::Axis& x = d->spatial[size_t(a)];
  x.s1 = 1, x.s2 = 1, x.s3 = t3;
  if (!register_only) DrawOuterTiles(rng, (ext + t3 - 1) / t3, s2_limit, &x);
}

// Brings the local tile within kMaxLocalElements by dropping the largest
// S2 tiles, then the largest S1 tiles, to 1.
void FitLocalTile(CpuTiling* d) {
  for (int level = 1; level >= 0 && d->LocalElements() > kMaxLocalElements; --level) {
    while (d->LocalElements() > kMaxLocalElements) {
      CpuTiling::Axis* widest = nullptr;
      for (CpuTiling::Axis& x : d->spatial) {
        if (widest == nullptr || x.tile(level) > widest->tile(level)) widest = &x;
      }
      if (widest->tile(level) == 1) break;
      widest->tile(level) = 1;
    }
  }
}

// The tile shape of `d`: of the local tile, so of the S1 and S2 tiles
// inside the compute location.
Mode ModeOf(const TilingNest& sh, const CpuTiling& d) {
  const int64_t level = d.PlacementValid(sh) ? d.EffectivePlacement(sh).level : kComputeAtS0;
  bool tiled = false, wide = false;
  for (int a = 0; a < sh.ns(); ++a) {
    const CpuTiling::Axis& x = d.spatial[size_t(a)];
    const int64_t m = level < 1 ? x.s1 : 1, t2 = level < 2 ? x.s2 : 1;
    tiled |= m > 1 || t2 > 1;
    wide |= a != d.vector_axis && t2 > kNarrowS2;
  }
  return wide ? Mode::kBlocked : tiled ? Mode::kNarrow : Mode::kRegister;
}

// The compute locations other than the effective one of `d` that build
// another program (a level whose loops are not all one iteration long).
std::vector<int64_t> OtherLevels(const TilingNest& sh, const CpuTiling& d) {
  const int64_t now = d.EffectivePlacement(sh).level;
  std::vector<int64_t> out;
  for (int64_t level = kComputeAtS0; level <= kComputeAtS2; ++level) {
    if (level != now && (level == kComputeAtS0 || !d.LevelTrivial(int(level))))
      out.push_back(level);
  }
  return out;
}

// The parallel loop counts other than the effective one of `d` that build
// another program with its compute location, and leave the fused parallel
// loop at least `cores` iterations: fewer idle a core, which a search
// timing on one thread cannot see (a ResNet C128 kernel with only the batch
// loop parallel re-timed at 0.50x oneDNN on 2 threads, 0.88x on 1).
std::vector<int64_t> OtherParallel(const TilingNest& sh, const CpuTiling& d, int cores) {
  const CpuTiling::Placement now = d.EffectivePlacement(sh);
  std::vector<int64_t> out;
  CpuTiling e = d;
  for (int64_t p = 1; p <= CpuTiling::MaxParallel(sh, d.compute_at); ++p) {
    e.parallel = p;
    const CpuTiling::Placement pl = e.EffectivePlacement(sh);
    int64_t extent = 1;
    for (int j = 0; j < p; ++j) extent *= e.OuterExtent(sh, j);
    if (pl.parallel == p && pl.parallel != now.parallel && extent >= cores) out.push_back(p);
  }
  return out;
}

// Draws the placement of `d` (tiles of shape `mode` set): the default (the
// tile at the S0 loop, every S0 loop parallel) is the most likely, since it
// is known good. Half the time a deeper location that keeps the shape and
// builds another program: for narrow and blocked tiles the S1 loop (the S1
// tiles move to the consumer); for a register tile the S2 loop, with S1 and
// S2 tiles drawn as a narrow shape's, which then only order the consumer's
// register tiles. A quarter of the time another parallel loop count that
// builds another program.
void DrawPlacement(const TilingNest& sh, Mode mode, int cores, std::mt19937_64& rng, CpuTiling* d) {
  d->compute_at = kComputeAtS0;
  d->parallel = CpuTiling::DefaultParallel(sh);
  if (Pick(rng, 0, 1) == 1) {
    CpuTiling e = *d;
    if (mode == Mode::kRegister) {
      for (int a = 0; a < sh.ns(); ++a) {
        CpuTiling::Axis& x = e.spatial[size_t(a)];
        int64_t rest = (sh.spatial[size_t(a)] + x.s3 - 1) / std::max<int64_t>(1, x.s3);
        DrawOuterTiles(rng, rest, kNarrowS2, &x);
      }
      FitLocalTile(&e);
      e.compute_at = kComputeAtS2;
    } else {
      e.compute_at = schedule::kComputeAtS1;
    }
    if (e.EffectivePlacement(sh).level > kComputeAtS0 && ModeOf(sh, e) == mode) *d = e;
  }
  std::vector<int64_t> counts = OtherParallel(sh, *d, cores);
  if (Pick(rng, 0, 3) == 0 && !counts.empty())
    d->parallel = PickOf(rng, counts);
}

// The largest divisor of `extent` at most `t` (clamped to [1, extent]) when
// one is at least half of it, else `t` clamped: a tile that divided its
// axis in another workload divides this one's where a near size does.
int64_t NearDivisor(int64_t extent, int64_t t) {
  t = std::clamp<int64_t>(t, 1, std::max<int64_t>(1, extent));
  for (int64_t f = t; 2 * f >= t; --f) {
    if (extent % f == 0) return f;
  }
  return t;
}

}  // namespace

CpuSketch::CpuSketch(const ir::ComputeDAG& dag, const ir::Target& target)
    : dag_(dag), target_(target), nest_(TilingNest::Of(dag)) {}

CpuTiling CpuSketch::SampleTiling(std::mt19937_64& rng, bool any_placement) const {
  const TilingNest& sh = nest_;
  CpuTiling d;
  d.spatial.resize(size_t(sh.ns()));
  d.reduce_steps.assign(size_t(sh.nr()), 1);
  const int64_t lanes = target_.float_lanes();
  d.pad_pass = Pick(rng, 0, 3) != 0;
  std::vector<int> candidates;
  for (int a = 0; a < sh.ns(); ++a) {
    if (sh.spatial[size_t(a)] >= 2) candidates.push_back(a);
  }
  int v =
      candidates.empty() ? sh.ns() - 1 : candidates[Pick(rng, 0, int64_t(candidates.size()) - 1)];
  d.vector_axis = v;
  d.unroll_tile = Pick(rng, 0, 3) != 0;
  d.pragma = Pick(rng, 0, 1) == 0 ? Pick(rng, 0, 3) : -1;
  d.pack = Pick(rng, 0, 3) != 0;
  const Mode mode = Mode(Pick(rng, 0, 2));
  const bool register_only = mode == Mode::kRegister;
  for (int tries = 0; tries < 20; ++tries) {
    for (int a = 0; a < sh.ns(); ++a) {
      const int64_t s2_limit = mode == Mode::kBlocked && a != v ? kWideS2 : kNarrowS2;
      SampleAxis(sh, a, v, lanes, register_only, s2_limit, rng, &d);
    }
    if (d.Accumulators(lanes) <= 28) break;
    for (int a = 0; a < sh.ns(); ++a) {
      if (a != v) d.spatial[size_t(a)].s3 = 1;
    }
  }
  FitLocalTile(&d);
  for (CpuTiling::Axis& x : d.spatial) x.unroll = Pick(rng, 0, 3) != 0;
  const bool long_steps =
      mode == Mode::kBlocked || (mode == Mode::kRegister && Pick(rng, 0, 1) == 0);
  for (int r = 0; r < sh.nr(); ++r)
    d.reduce_steps[size_t(r)] = DrawReduceStep(rng, sh.reduce[size_t(r)], long_steps);
  if (any_placement) {
    DrawPlacement(sh, mode, std::max(1, target_.num_cores), rng, &d);
  } else {
    d.compute_at = kComputeAtS0;
    d.parallel = CpuTiling::DefaultParallel(sh);
  }
  return d;
}

int CpuSketch::TileShape(const CpuTiling& t) const { return int(ModeOf(nest_, t)); }

int CpuSketch::TilingStratum(const CpuTiling& t) const {
  const int64_t v = t.vector_axis;
  // Packing applies only to a vector tile wider than one element.
  const bool packed = t.pack && v >= 0 && v < nest_.ns() && t.spatial[size_t(v)].s3 > 1;
  return int(ModeOf(nest_, t)) + (packed ? kTilingShapes : 0);
}

CpuTiling CpuSketch::TilingStructure(const CpuTiling& t) const {
  CpuTiling d = t;
  d.pad_pass = d.unroll_tile = false;
  d.pragma = 0;
  for (CpuTiling::Axis& x : d.spatial) x.unroll = false;
  if (d.PlacementValid(nest_)) {
    const CpuTiling::Placement pl = d.EffectivePlacement(nest_);
    d.compute_at = pl.level;
    d.parallel = pl.parallel;
  }
  return d;
}

CpuTiling CpuSketch::KeepCoresBusy(CpuTiling d) const {
  if (!d.PlacementValid(nest_)) return d;
  const int64_t p = d.parallel;
  if (p >= CpuTiling::DefaultParallel(nest_)) return d;  // the S0 loops at least: as the default
  int64_t extent = 1;
  for (int j = 0; j < p; ++j) extent *= d.OuterExtent(nest_, j);
  if (extent < std::max(1, target_.num_cores)) d.parallel = CpuTiling::DefaultParallel(nest_);
  return d;
}

std::optional<CpuTiling> CpuSketch::Fit(absl::Span<const int64_t> other) const {
  const TilingNest& sh = nest_;
  std::optional<CpuTiling> decoded = CpuTiling::Decode(sh, other);
  if (!decoded) return std::nullopt;
  CpuTiling d = *std::move(decoded);
  const int64_t v = d.vector_axis;
  if (v < 0 || v >= sh.ns()) return std::nullopt;
  for (int a = 0; a < sh.ns(); ++a) {
    CpuTiling::Axis& x = d.spatial[size_t(a)];
    const int64_t ext = sh.spatial[size_t(a)];
    // The vector tile keeps its lanes (only clamped to the axis).
    const int64_t t3 = a == v ? std::clamp<int64_t>(x.s3, 1, ext) : NearDivisor(ext, x.s3);
    const int64_t rest = (ext + t3 - 1) / t3;
    const int64_t t2 = NearDivisor(rest, x.s2);
    x.s1 = NearDivisor((rest + t2 - 1) / t2, x.s1);
    x.s2 = t2;
    x.s3 = t3;
  }
  FitLocalTile(&d);
  for (int r = 0; r < sh.nr(); ++r) {
    int64_t& step = d.reduce_steps[size_t(r)];
    step = NearDivisor(sh.reduce[size_t(r)], step);
  }
  if (!d.PlacementValid(sh)) {
    d.compute_at = kComputeAtS0;
    d.parallel = CpuTiling::DefaultParallel(sh);
  }
  return KeepCoresBusy(d);
}

CpuTiling CpuSketch::MoveTiling(const CpuTiling& t, int stratum, std::mt19937_64& rng) const {
  const TilingNest& sh = nest_;
  if (stratum < 0 || stratum >= kTilingStrata) return KeepCoresBusy(t);
  // The placement (compute location, parallel loops) is kept, or moved
  // out as far as the new shape needs to show in the local tile.
  CpuTiling d = t;
  d.pack = stratum >= kTilingShapes;
  const Mode mode = Mode(stratum % kTilingShapes);
  if (mode == ModeOf(sh, d)) return KeepCoresBusy(d);
  const int64_t v = d.vector_axis;
  for (CpuTiling::Axis& x : d.spatial) x.s1 = x.s2 = 1;
  // Register: the register tile alone. Narrow: a few of them in S1 and S2.
  // Blocked: as many in S2 off the vector axis as the local tile holds.
  for (int a = 0; mode != Mode::kRegister && a < sh.ns(); ++a) {
    CpuTiling::Axis& x = d.spatial[size_t(a)];
    int64_t rest = (sh.spatial[size_t(a)] + x.s3 - 1) / std::max<int64_t>(1, x.s3);
    if (mode == Mode::kNarrow) {
      DrawOuterTiles(rng, rest, kNarrowS2, &x);
    } else if (a != v) {
      int64_t room = kMaxLocalElements / std::max<int64_t>(1, d.LocalElements());
      x.s2 = DivisorBetween(rng, rest, kNarrowS2 + 1, std::min(kWideS2, room));
    }
  }
  FitLocalTile(&d);
  // Register tiles keep their steps, short or long.
  for (int r = 0; mode != Mode::kRegister && r < sh.nr(); ++r)
    d.reduce_steps[size_t(r)] = DrawReduceStep(rng, sh.reduce[size_t(r)], mode == Mode::kBlocked);
  if (d.PlacementValid(sh)) {
    while (d.compute_at > kComputeAtS0 && ModeOf(sh, d) != mode) --d.compute_at;
    d.parallel = std::min(d.parallel, CpuTiling::MaxParallel(sh, d.compute_at));
  }
  return KeepCoresBusy(d);
}

CpuTiling CpuSketch::MutateTiling(const CpuTiling& parent, std::mt19937_64& rng) const {
  const TilingNest& sh = nest_;
  const int64_t lanes = target_.float_lanes();
  CpuTiling d = parent;
  for (int tries = 0; tries < 8; ++tries) {
    d = parent;
    switch (Pick(rng, 0, 11)) {
      case 0:
      case 1:
      case 2:
      case 3: {  // tile sizes of one axis, one level
        int a = int(Pick(rng, 0, sh.ns() - 1));
        int level = int(Pick(rng, 0, 2));
        CpuTiling::Axis& x = d.spatial[size_t(a)];
        int64_t ext = sh.spatial[size_t(a)];
        if (level == 2) {
          CpuTiling tmp = d;
          SampleAxis(sh, a, int(d.vector_axis), lanes, false, kNarrowS2, rng, &tmp);
          x.s3 = tmp.spatial[size_t(a)].s3;
        } else {
          int64_t inner = x.s3 * (level == 0 ? x.s2 : 1);
          int64_t rest = std::max<int64_t>(1, (ext + inner - 1) / inner);
          x.tile(level) = TileFactor(rng, rest, level == 1 && Pick(rng, 0, 1) ? kWideS2 : 8);
        }
        break;
      }
      case 4: {  // a reduction split
        if (sh.nr() == 0) break;
        int r = int(Pick(rng, 0, sh.nr() - 1));
        d.reduce_steps[size_t(r)] = TileFactor(rng, sh.reduce[size_t(r)],
                                               Pick(rng, 0, 1) ? kWideReduce : 2 * kNarrowReduce);
        break;
      }
      case 5: {  // the vector axis (and its tile)
        int v = int(Pick(rng, 0, sh.ns() - 1));
        d.vector_axis = v;
        SampleAxis(sh, v, v, lanes, d.spatial[size_t(v)].s1 == 1, kNarrowS2, rng, &d);
        break;
      }
      case 6:
        d.unroll_tile = !d.unroll_tile;
        break;
      case 7:
        d.pragma = Pick(rng, -1, 3);
        break;
      case 8:
        d.pack = !d.pack;
        break;
      case 9: {
        if (Pick(rng, 0, 1) == 0) {
          d.pad_pass = !d.pad_pass;
        } else {
          CpuTiling::Axis& x = d.spatial[size_t(Pick(rng, 0, sh.ns() - 1))];
          x.unroll = !x.unroll;
        }
        break;
      }
      case 10: {  // the compute location (parallel loops past it dropped)
        if (!d.PlacementValid(sh)) break;
        std::vector<int64_t> levels = OtherLevels(sh, d);
        if (levels.empty()) break;
        const int64_t level = PickOf(rng, levels);
        d.compute_at = level;
        d.parallel = std::min(d.parallel, CpuTiling::MaxParallel(sh, level));
        break;
      }
      default: {  // the parallel loops
        if (!d.PlacementValid(sh)) break;
        std::vector<int64_t> counts = OtherParallel(sh, d, std::max(1, target_.num_cores));
        if (!counts.empty()) d.parallel = PickOf(rng, counts);
      }
    }
    if (d != parent && d.Accumulators(lanes) <= 32 && d.LocalElements() <= kMaxLocalElements)
      return KeepCoresBusy(d);
  }
  return KeepCoresBusy(d);
}

std::optional<Decisions> CpuSketch::Decode(absl::Span<const int64_t> wire) const {
  std::optional<CpuTiling> t = CpuTiling::Decode(nest_, wire);
  if (!t) return std::nullopt;
  return Decisions(*std::move(t));
}

Decisions CpuSketch::Mutate(const Decisions& d, std::mt19937_64& rng) const {
  return MutateTiling(std::get<CpuTiling>(d), rng);
}

Decisions CpuSketch::Move(const Decisions& d, int stratum, std::mt19937_64& rng) const {
  return MoveTiling(std::get<CpuTiling>(d), stratum, rng);
}

int CpuSketch::Stratum(const Decisions& d) const { return TilingStratum(std::get<CpuTiling>(d)); }

std::vector<int64_t> CpuSketch::Structure(const Decisions& d) const {
  return TilingStructure(std::get<CpuTiling>(d)).Encode();
}

absl::StatusOr<schedule::Trace> CpuSketch::Build(const Decisions& d) const {
  return schedule::BuildTiledSchedule(dag_, target_, std::get<CpuTiling>(d));
}

}  // namespace tunefarm::search::space
