#include "compiler/schedule/sketch.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "compiler/schedule/schedule.h"
#include "compiler/schedule/schedule_builder.h"

namespace tunefarm::ir {
namespace {

namespace v1 = ::tunefarm::v1;

int64_t Pick(std::mt19937_64& rng, int64_t lo, int64_t hi) {
  return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
}

// The divisors of `extent` in [lo, hi], ascending.
std::vector<int64_t> Divisors(int64_t extent, int64_t lo, int64_t hi) {
  std::vector<int64_t> divisors;
  for (int64_t d = lo; d <= std::min(hi, extent); ++d) {
    if (extent % d == 0) divisors.push_back(d);
  }
  return divisors;
}

// A factor for a tile level: a divisor of `extent` up to `limit` mostly.
int64_t TileFactor(std::mt19937_64& rng, int64_t extent, int64_t limit) {
  limit = std::max<int64_t>(1, std::min(limit, extent));
  std::vector<int64_t> divisors = Divisors(extent, 1, limit);
  if (Pick(rng, 0, 5) == 0) return Pick(rng, 1, limit);
  return divisors[Pick(rng, 0, int64_t(divisors.size()) - 1)];
}

// A divisor of `extent` in [lo, hi], uniformly; TileFactor(extent, hi) when there is none.
int64_t DivisorBetween(std::mt19937_64& rng, int64_t extent, int64_t lo, int64_t hi) {
  std::vector<int64_t> divisors = Divisors(extent, lo, hi);
  if (divisors.empty()) return TileFactor(rng, extent, hi);
  return divisors[Pick(rng, 0, int64_t(divisors.size()) - 1)];
}

int MainStage(const ComputeDAG& dag) {
  int main = -1;
  for (size_t i = 0; i < dag.stages.size(); ++i) {
    if (dag.stages[i].reduce == ReduceKind::kSum && !dag.stages[i].reduce_axes.empty())
      main = int(i);
  }
  return main;
}

// Layout of the decision vector: the fixed decisions, kPerAxis per spatial
// axis, one reduction step per reduction axis, then the placement (compute
// location, parallel loops). The placement came later: a vector without it
// (the legacy length, as older records store it) builds with the defaults,
// which are the schedule those records measured.
enum Fixed { kPadPass, kVecAxis, kUnrollTile, kPragma, kPack, kFixed };
constexpr int kPerAxis = 4;  // m, t2, t3, consumer unroll
enum Placement { kComputeAt, kParallel, kPlacement };
constexpr int64_t kPragmaSteps[] = {0, 16, 64, 512};

// The consumer loop the local tile is computed at: the innermost of its S0,
// S1 or S2 loops (the local tile then holds m*t2*t3, t2*t3 or t3 per axis).
constexpr int64_t kComputeAtS0 = 0, kComputeAtS2 = 2;

struct Shape {
  int ns = 0, nr = 0;
  std::vector<int64_t> spatial, reduce;
  size_t legacy_size() const { return kFixed + kPerAxis * ns + nr; }
  size_t size() const { return legacy_size() + kPlacement; }
  size_t compute_at() const { return legacy_size() + kComputeAt; }
  size_t parallel() const { return legacy_size() + kParallel; }
  // Default parallel loops: every S0 loop, fused.
  int64_t default_parallel() const { return ns; }
};

// Whether `d` has a length of the layout (with or without the placement).
bool Fits(const Shape& sh, const std::vector<int64_t>& d) {
  return d.size() == sh.size() || d.size() == sh.legacy_size();
}

// `d` in the current layout: a legacy vector gets the default placement.
std::vector<int64_t> Normalized(const Shape& sh, std::vector<int64_t> d) {
  if (d.size() == sh.legacy_size()) {
    d.push_back(kComputeAtS0);
    d.push_back(sh.default_parallel());
  }
  return d;
}

Shape ShapeOf(const ComputeDAG& dag) {
  Shape s;
  const Stage& m = dag.stages[MainStage(dag)];
  for (const IterVar& a : m.axes) s.spatial.push_back(a.extent);
  for (const IterVar& a : m.reduce_axes) s.reduce.push_back(a.extent);
  s.ns = int(s.spatial.size()), s.nr = int(s.reduce.size());
  return s;
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

// The S2 tile (t2, up to `s2_limit`) and then the S1 tile (m) of an axis
// with `rest` register tiles.
void DrawOuterTiles(std::mt19937_64& rng, int64_t rest, int64_t s2_limit, int64_t* m, int64_t* t2) {
  *t2 = TileFactor(rng, rest, s2_limit);
  *m = TileFactor(rng, (rest + *t2 - 1) / *t2, 4);
}

// A reduction step: long (a divisor between kMinBlockedReduce and
// kWideReduce) or short (up to kNarrowReduce).
int64_t DrawReduceStep(std::mt19937_64& rng, int64_t extent, bool long_steps) {
  return long_steps ? DivisorBetween(rng, extent, kMinBlockedReduce, kWideReduce)
                    : TileFactor(rng, extent, kNarrowReduce);
}

// Tile sizes of axis `a`: t3 (the register tile; near the vector width on
// the vector axis), then t2 and m (S2 and S1; 1 when `register_only`).
void SampleAxis(const Shape& sh, int a, int v, int64_t lanes, bool register_only, int64_t s2_limit,
                std::mt19937_64& rng, std::vector<int64_t>* d) {
  int64_t ext = sh.spatial[a];
  int64_t t3;
  if (a == v) {
    static const int kMul[] = {1, 1, 2, 4};
    int64_t want =
        std::max<int64_t>(1, lanes * kMul[Pick(rng, 0, 3)] / (Pick(rng, 0, 3) == 0 ? 2 : 1));
    t3 = std::min(ext, want);
  } else {
    t3 = TileFactor(rng, ext, 16);
  }
  int64_t m = 1, t2 = 1;
  if (!register_only) DrawOuterTiles(rng, (ext + t3 - 1) / t3, s2_limit, &m, &t2);
  size_t at = kFixed + kPerAxis * a;
  (*d)[at] = m, (*d)[at + 1] = t2, (*d)[at + 2] = t3;
}

// Vector registers the accumulator tile takes.
int64_t Accumulators(const Shape& sh, const std::vector<int64_t>& d, int64_t lanes) {
  int v = int(d[kVecAxis]);
  int64_t acc = 1;
  for (int a = 0; a < sh.ns; ++a) {
    int64_t t3 = d[kFixed + kPerAxis * a + 2];
    acc *= a == v ? (t3 + lanes - 1) / lanes : t3;
  }
  return acc;
}

// Elements of the local (accumulator) tile: m*t2*t3 over the spatial axes.
int64_t LocalElements(const Shape& sh, const std::vector<int64_t>& d) {
  int64_t n = 1;
  for (int a = 0; a < sh.ns; ++a) {
    size_t at = kFixed + kPerAxis * a;
    n *= d[at] * d[at + 1] * d[at + 2];
  }
  return n;
}

// Brings the local tile within kMaxLocalElements by dropping the largest
// S2 factors, then the largest S1 factors, to 1.
void FitLocalTile(const Shape& sh, std::vector<int64_t>* d) {
  for (int level = 1; level >= 0 && LocalElements(sh, *d) > kMaxLocalElements; --level) {
    while (LocalElements(sh, *d) > kMaxLocalElements) {
      size_t widest = 0;
      for (int a = 0; a < sh.ns; ++a) {
        size_t at = kFixed + kPerAxis * a + level;
        if (widest == 0 || (*d)[at] > (*d)[widest]) widest = at;
      }
      if ((*d)[widest] == 1) break;
      (*d)[widest] = 1;
    }
  }
}

// The consumer's outer loops, outermost first: S0 of every axis, then S1
// of every axis. The first `parallel` of them are fused and parallel.
int64_t OuterExtent(const Shape& sh, const std::vector<int64_t>& d, int j) {
  const int a = j % sh.ns;
  const size_t at = kFixed + kPerAxis * a;
  if (j >= sh.ns) return d[at];
  const int64_t tile = std::max<int64_t>(1, d[at] * d[at + 1] * d[at + 2]);
  return (sh.spatial[a] + tile - 1) / tile;
}

// Whether every loop of tile level `level` (1: S1, 2: S2) is one iteration
// long: computing at it is computing one level out.
bool LevelTrivial(const Shape& sh, const std::vector<int64_t>& d, int level) {
  for (int a = 0; a < sh.ns; ++a) {
    if (d[kFixed + kPerAxis * a + level - 1] > 1) return false;
  }
  return true;
}

// The most outer loops that may be parallel with the local tile computed at
// `level`: the S0 loops, and the S1 loops too once the tile is computed
// inside them.
int64_t MaxParallel(const Shape& sh, int64_t level) {
  return level == kComputeAtS0 ? sh.ns : 2 * sh.ns;
}

struct Place {
  int64_t level;
  int64_t parallel;
};

// Whether the placement of `d` (current layout) is in range.
bool PlacementValid(const Shape& sh, const std::vector<int64_t>& d) {
  const int64_t level = d[sh.compute_at()], p = d[sh.parallel()];
  return level >= kComputeAtS0 && level <= kComputeAtS2 && p >= 1 && p <= MaxParallel(sh, level);
}

// The placement `d` (current layout, valid) builds: the same program with
// no needless difference from the default. A compute location whose loops
// out to the next level are all one iteration long is that level; parallel
// loops fused with outer loops of one iteration are fewer loops, or all the
// S0 loops (the default) when the S0 loops they leave out are all one
// iteration long. So equal programs build equal steps (one schedule hash).
Place EffectivePlacement(const Shape& sh, const std::vector<int64_t>& d) {
  Place pl{d[sh.compute_at()], d[sh.parallel()]};
  while (pl.level > kComputeAtS0 && LevelTrivial(sh, d, int(pl.level))) --pl.level;
  // Parallel S1 loops left past a location moved out are one iteration long.
  pl.parallel = std::min(pl.parallel, MaxParallel(sh, pl.level));
  const int64_t ns = sh.default_parallel();
  if (pl.parallel < ns) {
    bool rest_trivial = true;
    for (int j = int(pl.parallel); j < ns; ++j) rest_trivial &= OuterExtent(sh, d, j) == 1;
    if (rest_trivial) pl.parallel = ns;
  }
  while (pl.parallel > 1 && pl.parallel != ns && OuterExtent(sh, d, int(pl.parallel) - 1) == 1)
    --pl.parallel;
  return pl;
}

// The tile shape of `d` (current layout; see TilingShape): of the local
// tile, so of the S1 and S2 tiles inside the compute location.
Mode ModeOf(const Shape& sh, const std::vector<int64_t>& d) {
  const int64_t level = PlacementValid(sh, d) ? EffectivePlacement(sh, d).level : kComputeAtS0;
  bool tiled = false, wide = false;
  for (int a = 0; a < sh.ns; ++a) {
    size_t at = kFixed + kPerAxis * a;
    const int64_t m = level < 1 ? d[at] : 1, t2 = level < 2 ? d[at + 1] : 1;
    tiled |= m > 1 || t2 > 1;
    wide |= a != d[kVecAxis] && t2 > kNarrowS2;
  }
  return wide ? Mode::kBlocked : tiled ? Mode::kNarrow : Mode::kRegister;
}

// The compute locations other than the effective one of `d` that build
// another program (a level whose loops are not all one iteration long).
std::vector<int64_t> OtherLevels(const Shape& sh, const std::vector<int64_t>& d) {
  const int64_t now = EffectivePlacement(sh, d).level;
  std::vector<int64_t> out;
  for (int64_t level = kComputeAtS0; level <= kComputeAtS2; ++level) {
    if (level != now && (level == kComputeAtS0 || !LevelTrivial(sh, d, int(level))))
      out.push_back(level);
  }
  return out;
}

// The parallel loop counts other than the effective one of `d` that build
// another program with its compute location, and leave the fused parallel
// loop at least `cores` iterations: fewer idle a core, which a search
// timing on one thread cannot see (a ResNet C128 kernel with only the batch
// loop parallel re-timed at 0.50x oneDNN on 2 threads, 0.88x on 1).
std::vector<int64_t> OtherParallel(const Shape& sh, const std::vector<int64_t>& d, int cores) {
  const Place now = EffectivePlacement(sh, d);
  std::vector<int64_t> out;
  std::vector<int64_t> e = d;
  for (int64_t p = 1; p <= MaxParallel(sh, d[sh.compute_at()]); ++p) {
    e[sh.parallel()] = p;
    const Place pl = EffectivePlacement(sh, e);
    int64_t extent = 1;
    for (int j = 0; j < p; ++j) extent *= OuterExtent(sh, e, j);
    if (pl.parallel == p && pl.parallel != now.parallel && extent >= cores) out.push_back(p);
  }
  return out;
}

// Draws the placement of `d` (current layout, tiles of shape `mode` set):
// the default (the tile at the S0 loop, every S0 loop parallel) is the most
// likely, since it is known good. Half the time a deeper location that
// keeps the shape and builds another program: for narrow and blocked tiles
// the S1 loop (the S1 tiles move to the consumer); for a register tile the
// S2 loop, with S1 and S2 tiles drawn as a narrow shape's, which then only
// order the consumer's register tiles. A quarter of the time another
// parallel loop count that builds another program.
void DrawPlacement(const Shape& sh, Mode mode, int cores, std::mt19937_64& rng,
                   std::vector<int64_t>* d) {
  (*d)[sh.compute_at()] = kComputeAtS0;
  (*d)[sh.parallel()] = sh.default_parallel();
  if (Pick(rng, 0, 1) == 1) {
    std::vector<int64_t> e = *d;
    if (mode == Mode::kRegister) {
      for (int a = 0; a < sh.ns; ++a) {
        size_t at = kFixed + kPerAxis * a;
        int64_t rest = (sh.spatial[a] + e[at + 2] - 1) / std::max<int64_t>(1, e[at + 2]);
        DrawOuterTiles(rng, rest, kNarrowS2, &e[at], &e[at + 1]);
      }
      FitLocalTile(sh, &e);
      e[sh.compute_at()] = kComputeAtS2;
    } else {
      e[sh.compute_at()] = 1;
    }
    if (EffectivePlacement(sh, e).level > kComputeAtS0 && ModeOf(sh, e) == mode) *d = e;
  }
  std::vector<int64_t> counts = OtherParallel(sh, *d, cores);
  if (Pick(rng, 0, 3) == 0 && !counts.empty())
    (*d)[sh.parallel()] = counts[Pick(rng, 0, int64_t(counts.size()) - 1)];
}

}  // namespace

bool HasTilingSketch(const ComputeDAG& dag) { return MainStage(dag) >= 0; }

int TilingMainStage(const ComputeDAG& dag) { return MainStage(dag); }

namespace {

std::vector<int64_t> Sample(const ComputeDAG& dag, const Target& target, std::mt19937_64& rng,
                            bool any_placement) {
  if (!HasTilingSketch(dag)) return {};
  Shape sh = ShapeOf(dag);
  std::vector<int64_t> d(sh.size(), 1);
  const int64_t lanes = target.float_lanes();
  d[kPadPass] = Pick(rng, 0, 3) != 0;
  std::vector<int> candidates;
  for (int a = 0; a < sh.ns; ++a) {
    if (sh.spatial[a] >= 2) candidates.push_back(a);
  }
  int v = candidates.empty() ? sh.ns - 1 : candidates[Pick(rng, 0, int64_t(candidates.size()) - 1)];
  d[kVecAxis] = v;
  d[kUnrollTile] = Pick(rng, 0, 3) != 0;
  d[kPragma] = Pick(rng, 0, 1) == 0 ? Pick(rng, 0, 3) : -1;
  d[kPack] = Pick(rng, 0, 3) != 0;
  const Mode mode = Mode(Pick(rng, 0, 2));
  const bool register_only = mode == Mode::kRegister;
  for (int tries = 0; tries < 20; ++tries) {
    for (int a = 0; a < sh.ns; ++a) {
      const int64_t s2_limit = mode == Mode::kBlocked && a != v ? kWideS2 : kNarrowS2;
      SampleAxis(sh, a, v, lanes, register_only, s2_limit, rng, &d);
    }
    if (Accumulators(sh, d, lanes) <= 28) break;
    for (int a = 0; a < sh.ns; ++a) {
      if (a != v) d[kFixed + kPerAxis * a + 2] = 1;
    }
  }
  FitLocalTile(sh, &d);
  for (int a = 0; a < sh.ns; ++a) d[kFixed + kPerAxis * a + 3] = Pick(rng, 0, 3) != 0;
  const bool long_steps =
      mode == Mode::kBlocked || (mode == Mode::kRegister && Pick(rng, 0, 1) == 0);
  for (int r = 0; r < sh.nr; ++r)
    d[kFixed + kPerAxis * sh.ns + r] = DrawReduceStep(rng, sh.reduce[r], long_steps);
  if (any_placement) {
    DrawPlacement(sh, mode, std::max(1, target.num_cores), rng, &d);
  } else {
    d[sh.compute_at()] = kComputeAtS0;
    d[sh.parallel()] = sh.default_parallel();
  }
  return d;
}

}  // namespace

std::vector<int64_t> SampleTilingDecisions(const ComputeDAG& dag, const Target& target,
                                           std::mt19937_64& rng) {
  return Sample(dag, target, rng, false);
}

std::vector<int64_t> SampleTilingDecisionsAnyPlacement(const ComputeDAG& dag, const Target& target,
                                                       std::mt19937_64& rng) {
  return Sample(dag, target, rng, true);
}

int TilingShape(const ComputeDAG& dag, const std::vector<int64_t>& decisions) {
  if (!HasTilingSketch(dag)) return 0;
  Shape sh = ShapeOf(dag);
  if (!Fits(sh, decisions)) return 0;
  return int(ModeOf(sh, Normalized(sh, decisions)));
}

int TilingStratum(const ComputeDAG& dag, const std::vector<int64_t>& decisions) {
  if (!HasTilingSketch(dag)) return 0;
  Shape sh = ShapeOf(dag);
  if (!Fits(sh, decisions)) return 0;
  const int64_t v = decisions[kVecAxis];
  // Packing applies only to a vector tile wider than one element.
  const bool packed =
      decisions[kPack] != 0 && v >= 0 && v < sh.ns && decisions[kFixed + kPerAxis * v + 2] > 1;
  return int(ModeOf(sh, Normalized(sh, decisions))) + (packed ? kTilingShapes : 0);
}

std::vector<int64_t> TilingStructure(const ComputeDAG& dag, const std::vector<int64_t>& decisions) {
  if (!HasTilingSketch(dag)) return {};
  Shape sh = ShapeOf(dag);
  if (!Fits(sh, decisions)) return {};
  std::vector<int64_t> d = Normalized(sh, decisions);
  d[kPadPass] = d[kUnrollTile] = d[kPragma] = 0;
  for (int a = 0; a < sh.ns; ++a) d[kFixed + kPerAxis * a + 3] = 0;
  if (PlacementValid(sh, d)) {
    const Place pl = EffectivePlacement(sh, d);
    d[sh.compute_at()] = pl.level;
    d[sh.parallel()] = pl.parallel;
  }
  return d;
}

namespace {

// A change of tiles can leave a reduced count of parallel loops fewer
// iterations than the target's cores: then every S0 loop is parallel again.
std::vector<int64_t> KeepCoresBusy(const ComputeDAG& dag, const Target& target,
                                   std::vector<int64_t> d) {
  if (!HasTilingSketch(dag)) return d;
  const Shape sh = ShapeOf(dag);
  if (d.size() != sh.size() || !PlacementValid(sh, d)) return d;
  const int64_t p = d[sh.parallel()];
  if (p >= sh.default_parallel()) return d;  // the S0 loops at least: as the default
  int64_t extent = 1;
  for (int j = 0; j < p; ++j) extent *= OuterExtent(sh, d, j);
  if (extent < std::max(1, target.num_cores)) d[sh.parallel()] = sh.default_parallel();
  return d;
}

std::vector<int64_t> MoveTiles(const ComputeDAG& dag, const std::vector<int64_t>& decisions,
                               int stratum, std::mt19937_64& rng);
std::vector<int64_t> MutateTiles(const ComputeDAG& dag, const Target& target,
                                 const std::vector<int64_t>& decisions, std::mt19937_64& rng);

}  // namespace

std::vector<int64_t> MoveTilingDecisions(const ComputeDAG& dag, const Target& target,
                                         const std::vector<int64_t>& decisions, int stratum,
                                         std::mt19937_64& rng) {
  return KeepCoresBusy(dag, target, MoveTiles(dag, decisions, stratum, rng));
}

std::vector<int64_t> MutateTilingDecisions(const ComputeDAG& dag, const Target& target,
                                           const std::vector<int64_t>& decisions,
                                           std::mt19937_64& rng) {
  return KeepCoresBusy(dag, target, MutateTiles(dag, target, decisions, rng));
}

namespace {

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

std::vector<int64_t> FitTilingDecisions(const ComputeDAG& dag, const Target& target,
                                        const std::vector<int64_t>& decisions) {
  if (!HasTilingSketch(dag)) return {};
  const Shape sh = ShapeOf(dag);
  if (!Fits(sh, decisions)) return {};
  std::vector<int64_t> d = Normalized(sh, decisions);
  const int64_t v = d[kVecAxis];
  if (v < 0 || v >= sh.ns) return {};
  for (int a = 0; a < sh.ns; ++a) {
    const size_t at = kFixed + kPerAxis * a;
    const int64_t ext = sh.spatial[a];
    // The vector tile keeps its lanes (only clamped to the axis).
    const int64_t t3 =
        a == v ? std::clamp<int64_t>(d[at + 2], 1, ext) : NearDivisor(ext, d[at + 2]);
    const int64_t rest = (ext + t3 - 1) / t3;
    const int64_t t2 = NearDivisor(rest, d[at + 1]);
    d[at] = NearDivisor((rest + t2 - 1) / t2, d[at]);
    d[at + 1] = t2;
    d[at + 2] = t3;
  }
  FitLocalTile(sh, &d);
  for (int r = 0; r < sh.nr; ++r) {
    int64_t& step = d[kFixed + kPerAxis * sh.ns + r];
    step = NearDivisor(sh.reduce[r], step);
  }
  if (!PlacementValid(sh, d)) {
    d[sh.compute_at()] = kComputeAtS0;
    d[sh.parallel()] = sh.default_parallel();
  }
  return KeepCoresBusy(dag, target, d);
}

namespace {

std::vector<int64_t> MoveTiles(const ComputeDAG& dag, const std::vector<int64_t>& decisions,
                               int stratum, std::mt19937_64& rng) {
  if (!HasTilingSketch(dag) || stratum < 0 || stratum >= kTilingStrata) return decisions;
  Shape sh = ShapeOf(dag);
  if (!Fits(sh, decisions)) return decisions;
  // The placement (compute location, parallel loops) is kept, or moved
  // out as far as the new shape needs to show in the local tile.
  std::vector<int64_t> d = Normalized(sh, decisions);
  d[kPack] = stratum >= kTilingShapes;
  const Mode mode = Mode(stratum % kTilingShapes);
  if (mode == ModeOf(sh, d)) return d;
  const int64_t v = d[kVecAxis];
  for (int a = 0; a < sh.ns; ++a) {
    size_t at = kFixed + kPerAxis * a;
    d[at] = d[at + 1] = 1;
  }
  // Register: the register tile alone. Narrow: a few of them in S1 and S2.
  // Blocked: as many in S2 off the vector axis as the local tile holds.
  for (int a = 0; mode != Mode::kRegister && a < sh.ns; ++a) {
    size_t at = kFixed + kPerAxis * a;
    int64_t rest = (sh.spatial[a] + d[at + 2] - 1) / std::max<int64_t>(1, d[at + 2]);
    if (mode == Mode::kNarrow) {
      DrawOuterTiles(rng, rest, kNarrowS2, &d[at], &d[at + 1]);
    } else if (a != v) {
      int64_t room = kMaxLocalElements / std::max<int64_t>(1, LocalElements(sh, d));
      d[at + 1] = DivisorBetween(rng, rest, kNarrowS2 + 1, std::min(kWideS2, room));
    }
  }
  FitLocalTile(sh, &d);
  // Register tiles keep their steps, short or long.
  for (int r = 0; mode != Mode::kRegister && r < sh.nr; ++r)
    d[kFixed + kPerAxis * sh.ns + r] = DrawReduceStep(rng, sh.reduce[r], mode == Mode::kBlocked);
  if (PlacementValid(sh, d)) {
    while (d[sh.compute_at()] > kComputeAtS0 && ModeOf(sh, d) != mode) --d[sh.compute_at()];
    d[sh.parallel()] = std::min(d[sh.parallel()], MaxParallel(sh, d[sh.compute_at()]));
  }
  return d;
}

std::vector<int64_t> MutateTiles(const ComputeDAG& dag, const Target& target,
                                 const std::vector<int64_t>& decisions, std::mt19937_64& rng) {
  if (!HasTilingSketch(dag)) return decisions;
  Shape sh = ShapeOf(dag);
  if (!Fits(sh, decisions)) return SampleTilingDecisions(dag, target, rng);
  const int64_t lanes = target.float_lanes();
  const std::vector<int64_t> parent = Normalized(sh, decisions);
  std::vector<int64_t> d = parent;
  for (int tries = 0; tries < 8; ++tries) {
    d = parent;
    switch (Pick(rng, 0, 11)) {
      case 0:
      case 1:
      case 2:
      case 3: {  // tile sizes of one axis, one level
        int a = int(Pick(rng, 0, sh.ns - 1));
        int level = int(Pick(rng, 0, 2));
        size_t at = kFixed + kPerAxis * a;
        int64_t ext = sh.spatial[a];
        if (level == 2) {
          std::vector<int64_t> tmp = d;
          SampleAxis(sh, a, int(d[kVecAxis]), lanes, false, kNarrowS2, rng, &tmp);
          d[at + 2] = tmp[at + 2];
        } else {
          int64_t inner = d[at + 2] * (level == 0 ? d[at + 1] : 1);
          int64_t rest = std::max<int64_t>(1, (ext + inner - 1) / inner);
          d[at + level] = TileFactor(rng, rest, level == 1 && Pick(rng, 0, 1) ? kWideS2 : 8);
        }
        break;
      }
      case 4: {  // a reduction split
        if (sh.nr == 0) break;
        int r = int(Pick(rng, 0, sh.nr - 1));
        d[kFixed + kPerAxis * sh.ns + r] =
            TileFactor(rng, sh.reduce[r], Pick(rng, 0, 1) ? kWideReduce : 2 * kNarrowReduce);
        break;
      }
      case 5: {  // the vector axis (and its tile)
        int v = int(Pick(rng, 0, sh.ns - 1));
        d[kVecAxis] = v;
        SampleAxis(sh, v, v, lanes, d[kFixed + kPerAxis * v] == 1, kNarrowS2, rng, &d);
        break;
      }
      case 6:
        d[kUnrollTile] = !d[kUnrollTile];
        break;
      case 7:
        d[kPragma] = Pick(rng, -1, 3);
        break;
      case 8:
        d[kPack] = !d[kPack];
        break;
      case 9: {
        if (Pick(rng, 0, 1) == 0) {
          d[kPadPass] = !d[kPadPass];
        } else {
          int a = int(Pick(rng, 0, sh.ns - 1));
          d[kFixed + kPerAxis * a + 3] = !d[kFixed + kPerAxis * a + 3];
        }
        break;
      }
      case 10: {  // the compute location (parallel loops past it dropped)
        if (!PlacementValid(sh, d)) break;
        std::vector<int64_t> levels = OtherLevels(sh, d);
        if (levels.empty()) break;
        const int64_t level = levels[Pick(rng, 0, int64_t(levels.size()) - 1)];
        d[sh.compute_at()] = level;
        d[sh.parallel()] = std::min(d[sh.parallel()], MaxParallel(sh, level));
        break;
      }
      default: {  // the parallel loops
        if (!PlacementValid(sh, d)) break;
        std::vector<int64_t> counts = OtherParallel(sh, d, std::max(1, target.num_cores));
        if (!counts.empty()) d[sh.parallel()] = counts[Pick(rng, 0, int64_t(counts.size()) - 1)];
      }
    }
    if (d != parent && Accumulators(sh, d, lanes) <= 32 &&
        LocalElements(sh, d) <= kMaxLocalElements)
      return d;
  }
  return d;
}

}  // namespace

absl::StatusOr<v1::Schedule> BuildTiledSchedule(const ComputeDAG& dag, const Target& target,
                                                const std::vector<int64_t>& decisions) {
  int main = MainStage(dag);
  if (main < 0) return absl::InvalidArgumentError("no reduction to tile");
  Shape sh = ShapeOf(dag);
  if (!Fits(sh, decisions)) {
    return absl::InvalidArgumentError("decisions do not match the workload");
  }
  const std::vector<int64_t> d = Normalized(sh, decisions);
  const int ns = sh.ns;
  const int v = int(d[kVecAxis]);
  if (v < 0 || v >= ns) return absl::InvalidArgumentError("bad vector axis");
  if (!PlacementValid(sh, d)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "bad placement: compute location ", d[sh.compute_at()], " (0-2), parallel loops ",
        d[sh.parallel()], " (1-", ns, " at location 0, 1-", 2 * ns, " deeper)"));
  }
  std::vector<int64_t> m(ns), t2(ns), t3(ns);
  for (int a = 0; a < ns; ++a) {
    m[a] = d[kFixed + kPerAxis * a], t2[a] = d[kFixed + kPerAxis * a + 1],
    t3[a] = d[kFixed + kPerAxis * a + 2];
    if (m[a] < 1 || t2[a] < 1 || t3[a] < 1) return absl::InvalidArgumentError("tile size below 1");
  }
  ScheduleBuilder b(dag, target);
  // Cheap stages: inlined, except padding read by the reduction, which stays
  // a pass of its own when the decision says so.
  std::vector<int> passes;
  for (int i = 0; i < int(dag.stages.size()); ++i) {
    const Stage& s = dag.stages[i];
    if (!s.inlinable || s.output == dag.output) continue;
    bool feeds_main = false;
    VisitLoads(dag.stages[main].body,
               [&](const ExprNode& n) { feeds_main |= n.tensor == s.output; });
    if (feeds_main && d[kPadPass]) {
      passes.push_back(i);
      continue;
    }
    v1::Step step;
    step.mutable_compute_inline()->set_stage(i);
    b.Add(step);
  }
  int local = main, consumer = -1;
  if (dag.stages[main].output == dag.output) {
    v1::Step step;
    step.mutable_cache_write()->set_stage(main);
    step.mutable_cache_write()->set_scope(v1::MEMORY_SCOPE_LOCAL);
    b.Add(step);
    consumer = main + 1;
  } else {
    for (int j = main + 1; j < int(dag.stages.size()); ++j) {
      if (b.state().stages()[j].location == StageState::Location::kRoot) consumer = j;
    }
    if (consumer < 0 || dag.stages[consumer].output != dag.output) {
      return absl::InvalidArgumentError("the reduction's consumer is not the output");
    }
  }
  if (!b.ok()) return absl::InvalidArgumentError("sketch does not apply");
  const ComputeDAG& sdag = b.state().dag();
  const Stage& L = sdag.stages[local];
  const Stage& C = sdag.stages[consumer];
  if (C.axes.size() != L.axes.size()) return absl::InvalidArgumentError("consumer shape differs");
  for (size_t a = 0; a < L.axes.size(); ++a) {
    if (C.axes[a].extent != L.axes[a].extent)
      return absl::InvalidArgumentError("consumer shape differs");
  }
  for (int p : passes) {
    const auto& iters = b.state().stages()[p].iters;
    if (iters.size() < 2) continue;
    if (iters.size() > 2) {
      v1::Step step;
      step.mutable_fuse()->set_stage(p);
      for (size_t k = 0; k + 1 < iters.size(); ++k) step.mutable_fuse()->add_iters(int(k));
      b.Add(step);
    }
    b.AnnotateLoop(p, b.state().stages()[p].iters[0].var.get(), v1::ANNOTATION_PARALLEL);
    b.AnnotateLoop(p, b.state().stages()[p].iters.back().var.get(), v1::ANNOTATION_VECTORIZE);
  }
  // The consumer: tiles of m*t2*t3 per axis, split like the local stage so
  // its reads of the tile are plain; its first `parallel` outer loops (S0
  // of every axis, then S1) fused and parallel.
  const Place place = EffectivePlacement(sh, d);
  std::vector<std::vector<const ExprNode*>> cl(ns), ll(ns);
  for (int a = 0; a < ns; ++a)
    cl[a] = b.SplitLoop(consumer, C.axes[a].var.get(), {m[a], t2[a], t3[a]});
  if (!b.ok()) return absl::InvalidArgumentError("tile sizes do not apply");
  std::vector<const ExprNode*> order;
  for (int level = 0; level < 4; ++level) {
    for (int a = 0; a < ns; ++a) {
      if (level == 3 && a == v) continue;
      order.push_back(cl[a][level]);
    }
  }
  order.push_back(cl[v][3]);
  b.ReorderLoops(consumer, order);
  if (place.parallel >= 2) {
    v1::Step step;
    step.mutable_fuse()->set_stage(consumer);
    for (int j = 0; j < place.parallel; ++j) step.mutable_fuse()->add_iters(j);
    b.Add(step);
  }
  if (!b.ok()) return absl::InvalidArgumentError("consumer tiling does not apply");
  b.AnnotateLoop(consumer, b.state().stages()[consumer].iters[0].var.get(),
                 v1::ANNOTATION_PARALLEL);
  if (t3[v] > 1) b.AnnotateLoop(consumer, cl[v][3], v1::ANNOTATION_VECTORIZE);
  for (int a = 0; a < ns; ++a) {
    if (a != v && t3[a] > 1 && d[kFixed + kPerAxis * a + 3])
      b.AnnotateLoop(consumer, cl[a][3], v1::ANNOTATION_UNROLL);
  }
  // The local stage: S0 S1 R0 S2 R1 S3.
  for (int a = 0; a < ns; ++a)
    ll[a] = b.SplitLoop(local, L.axes[a].var.get(), {m[a], t2[a], t3[a]});
  std::vector<std::vector<const ExprNode*>> rl;
  for (int r = 0; r < sh.nr; ++r) {
    int64_t inner = std::clamp<int64_t>(d[kFixed + kPerAxis * ns + r], 1, L.reduce_axes[r].extent);
    rl.push_back(b.SplitLoop(local, L.reduce_axes[r].var.get(), {inner}));
  }
  if (!b.ok()) return absl::InvalidArgumentError("local tiling does not apply");
  order.clear();
  for (int a = 0; a < ns; ++a) order.push_back(ll[a][0]);
  for (int a = 0; a < ns; ++a) order.push_back(ll[a][1]);
  for (auto& r : rl) order.push_back(r[0]);
  for (int a = 0; a < ns; ++a) order.push_back(ll[a][2]);
  for (auto& r : rl) order.push_back(r[1]);
  for (int a = 0; a < ns; ++a) {
    if (a != v) order.push_back(ll[a][3]);
  }
  order.push_back(ll[v][3]);
  b.ReorderLoops(local, order);
  if (t3[v] > 1) b.AnnotateLoop(local, ll[v][3], v1::ANNOTATION_VECTORIZE);
  for (int a = 0; a < ns; ++a) {
    if (a != v && t3[a] > 1 && d[kUnrollTile])
      b.AnnotateLoop(local, ll[a][3], v1::ANNOTATION_UNROLL);
  }
  if (d[kPragma] >= 0 && d[kPragma] < 4) {
    v1::Step step;
    step.mutable_pragma()->set_stage(local);
    step.mutable_pragma()->set_kind(v1::PRAGMA_KIND_AUTO_UNROLL_MAX_STEP);
    step.mutable_pragma()->set_value(kPragmaSteps[d[kPragma]]);
    b.Add(step);
  }
  // Operands indexed by the vector axis get a blocked layout: a constant
  // (weight) is repacked by the vector tile once, ahead of time; any other
  // input is copied per reduction step into a buffer of its tile (the
  // cache_read below), so the register tile streams contiguous rows instead
  // of rows a whole tensor row apart.
  std::vector<std::pair<int, std::string>> copied;  // operand, copy's name
  const std::string local_name = L.name, consumer_name = C.name;
  if (t3[v] > 1 && d[kPack]) {
    std::vector<int> inputs = StageInputs(L);
    for (size_t op = 0; op < inputs.size(); ++op) {
      const TensorDecl& t = sdag.tensors[inputs[op]];
      int dim = -1;
      VisitLoads(L.body, [&](const ExprNode& n) {
        if (n.tensor != inputs[op]) return;
        for (size_t k = 0; k < n.args.size(); ++k) {
          if (n.args[k].same_as(L.axes[v].var)) dim = int(k);
        }
      });
      if (dim < 0 || t.shape[dim] < t3[v]) continue;
      if (!t.is_constant) {
        if (t.role == TensorDecl::Role::kInput && dim + 1 == int(t.shape.size()) && sh.nr > 0)
          copied.emplace_back(int(op), t.name + ".local");
        continue;
      }
      v1::Step step;
      auto* lp = step.mutable_layout_pack();
      lp->set_stage(local);
      lp->set_input(int(op));
      for (size_t k = 0; k < t.shape.size(); ++k) lp->add_block(int(k) == dim ? t3[v] : 0);
      b.Add(step);
    }
  }
  for (const auto& copy : copied)
    b.CacheRead(FindStage(b.state(), local_name), copy.first, v1::MEMORY_SCOPE_LOCAL);
  if (!b.ok()) return absl::InvalidArgumentError("sketch step does not apply");
  local = FindStage(b.state(), local_name);
  consumer = FindStage(b.state(), consumer_name);
  for (const auto& copy : copied) {
    const int cs = FindStage(b.state(), copy.second);
    if (cs < 0) return absl::InvalidArgumentError("the operand copy is missing");
    b.AnnotateLoop(cs, b.state().stages()[cs].iters.back().var.get(), v1::ANNOTATION_VECTORIZE);
    b.ComputeAt(cs, local, b.IndexOf(local, rl.back()[0]));
  }
  // The local tile at the innermost consumer loop of its level: the fused
  // parallel loop when that loop is in it (the default: all S0 loops fused).
  const int attach =
      place.parallel >= (place.level + 1) * ns ? 0 : b.IndexOf(consumer, cl[ns - 1][place.level]);
  if (attach < 0) return absl::InvalidArgumentError("the compute location is gone");
  b.ComputeAt(local, consumer, attach);
  if (!b.ok()) return absl::InvalidArgumentError("sketch step does not apply");
  v1::Schedule out = b.Take();
  out.set_sketch_id(kTilingSketchId);
  for (int64_t x : d) out.add_decisions(x);
  return out;
}

}  // namespace tunefarm::ir
