// The tiling sketch's placement decisions (compute location of the local
// tile, parallel loops): every placement builds the program it says and runs
// correctly against the float64 reference, decision vectors stored before
// the placement existed build exactly the schedules they built then, and
// sampling and mutation reach the new values.
#include <map>
#include <optional>
#include <random>
#include <set>

#include "compiler/codegen/llvm_target.h"
#include "compiler/ir/compute.h"
#include "compiler/schedule/schedule.h"
#include "compiler/ir/schedule_hash.h"
#include "compiler/schedule/tiling.h"
#include "search/space/cpu_sketch.h"
#include "compiler/ir/workload_spec.h"
#include "gtest/gtest.h"
#include "tests/testing/tiling.h"
#include "tests/compiler/kernel_check.h"

namespace tunefarm {
namespace {

namespace v1 = ::tunefarm::v1;
using testing::Space;
using testing::Tiling;


// The decision layout (sketch.h): 5 fixed, 4 per spatial axis (S1, S2, S3
// tile, consumer unroll), one step per reduction axis, then the compute
// location and the parallel loops.
constexpr int kFixed = 5, kPerAxis = 4;

ir::ComputeDAG Dag(const std::string& spec) {
  auto w = ir::ParseWorkloadSpec(spec);
  EXPECT_TRUE(w.ok()) << spec << ": " << w.status();
  auto dag = ir::BuildComputeDAG(*w);
  EXPECT_TRUE(dag.ok()) << spec << ": " << dag.status();
  return *std::move(dag);
}

int SpatialAxes(const ir::ComputeDAG& dag) {
  return int(dag.stages[schedule::TilingMainStage(dag)].axes.size());
}

std::vector<int64_t> WithPlacement(std::vector<int64_t> d, int64_t level, int64_t parallel) {
  d.push_back(level);
  d.push_back(parallel);
  return d;
}

// Tile sizes of axis `a` in a vector of either length.
int64_t Tile(const std::vector<int64_t>& d, int a, int level) {
  return d[kFixed + kPerAxis * a + level];
}

// The consumer's outer loop j: S0 of every axis, then S1 of every axis.
int64_t OuterExtent(const ir::ComputeDAG& dag, const std::vector<int64_t>& d, int j) {
  const int ns = SpatialAxes(dag), a = j % ns;
  if (j >= ns) return Tile(d, a, 0);
  const int64_t extent = dag.stages[schedule::TilingMainStage(dag)].axes[a].extent;
  const int64_t tile = Tile(d, a, 0) * Tile(d, a, 1) * Tile(d, a, 2);
  return (extent + tile - 1) / tile;
}

// What the built program does with its local tile and parallel loops.
struct Built {
  int attach_iter = -1;         // the consumer loop the local tile is computed at
  int64_t local_elements = -1;  // its buffer
  int64_t parallel_extent = 0;  // the consumer's parallel loop
  int parallel_loops = 0;       // in the consumer
};

int64_t AllocatedElements(const ir::Stmt& s, int tensor) {
  if (s->kind == ir::StmtKind::kAllocate && s->tensor == tensor) {
    int64_t n = 1;
    for (int64_t e : s->shape) n *= e;
    return n;
  }
  for (const ir::Stmt& b : s->body) {
    int64_t n = AllocatedElements(b, tensor);
    if (n >= 0) return n;
  }
  return -1;
}

Built Inspect(const ir::ComputeDAG& dag, const schedule::Trace& s, const ir::Target& target) {
  Built out;
  auto st = schedule::ScheduleState::Replay(dag, s, target);
  EXPECT_TRUE(st.ok()) << st.status();
  if (!st.ok()) return out;
  const ir::ComputeDAG& sdag = st->dag();
  int consumer = -1, local = -1;
  for (size_t i = 0; i < sdag.stages.size(); ++i) {
    if (sdag.stages[i].output == sdag.output) consumer = int(i);
  }
  for (size_t i = 0; i < sdag.stages.size(); ++i) {
    const schedule::StageState& ss = st->stages()[i];
    if (ss.location == schedule::StageState::Location::kAt && ss.attach_stage == consumer &&
        !sdag.tensors[sdag.stages[i].output].cache_copy)
      local = int(i);
  }
  EXPECT_GE(local, 0) << "no local tile computed at the consumer";
  if (consumer < 0 || local < 0) return out;
  const auto& iters = st->stages()[consumer].iters;
  for (size_t k = 0; k < iters.size(); ++k) {
    if (iters[k].var.same_as(st->stages()[local].attach_var)) out.attach_iter = int(k);
    if (iters[k].kind == ir::ForKind::kParallel) {
      ++out.parallel_loops;
      out.parallel_extent = iters[k].extent;
    }
  }
  out.local_elements = AllocatedElements(schedule::Lower(*st), sdag.stages[local].output);
  return out;
}

// (a) Every compute location and every parallel loop count on a small
// convolution (epilogue as the write-back, packed weights) and a small
// matmul (cache_write, b copied per reduction step inside the local tile),
// tails on every axis: the program has its local tile where the decisions
// say, the loops they say parallel, and matches the reference.
TEST(TilingSketch, EveryPlacementBuildsWhatItSaysAndMatchesTheReference) {
  const ir::Target target = codegen::HostTarget();
  struct Case {
    std::string spec;
    std::vector<int64_t> legacy;  // tiles with S0, S1 and S2 loops above one iteration
    bool packs, copies;           // the weights packed (layout_pack), b copied (cache_read)
  };
  const std::vector<Case> cases = {
      // axes N, K, H, W; reductions C, R, S. K vectorized and packed.
      {"conv2d_nchw(N=1,C=6,H=11,W=13,K=12,R=3,S=3,pad=1)+bias+relu",
       {1, 1, 1, -1, 1, 1, 1, 1, 1, 2, 1, 4, 1, 2, 2, 1, 1, 1, 2, 3, 0, 4, 2, 3},
       true,
       false},
      // W vectorized, nothing packed, padding inlined.
      {"conv2d_nchw(N=1,C=6,H=11,W=13,K=12,R=3,S=3,pad=1)+bias+relu",
       {0, 3, 0, 2, 0, 1, 1, 1, 0, 3, 2, 2, 1, 1, 3, 2, 1, 2, 1, 4, 1, 6, 3, 1},
       false,
       false},
      // axes M, N; reduction K. N vectorized, b copied per step of 5.
      {"matmul(M=37,N=45,K=29)", {1, 1, 1, -1, 1, 2, 2, 3, 1, 2, 1, 8, 1, 5}, false, true},
      {"matmul(M=37,N=45,K=29)", {0, 1, 0, 1, 0, 3, 1, 2, 0, 1, 3, 4, 1, 7}, false, false},
  };
  int checked = 0;
  for (size_t c = 0; c < cases.size(); ++c) {
    const Case& k = cases[c];
    ir::ComputeDAG dag = Dag(k.spec);
    auto w = ir::ParseWorkloadSpec(k.spec);
    const int ns = SpatialAxes(dag);
    std::set<std::string> hashes;
    std::set<std::pair<int64_t, int64_t>> placements;
    for (int64_t level = 0; level <= 2; ++level) {
      for (int64_t p = 1; p <= (level == 0 ? ns : 2 * ns); ++p) {
        const std::vector<int64_t> d = WithPlacement(k.legacy, level, p);
        auto s = schedule::BuildTiledSchedule(dag, target, d);
        ASSERT_TRUE(s.ok()) << k.spec << " level " << level << " parallel " << p << ": "
                            << s.status();
        // The placement the build uses (the same program with needless
        // one-iteration loops taken out of the fused loop).
        const std::vector<int64_t> structure = Space(dag).TilingStructure(Tiling(dag, d)).Encode();
        ASSERT_EQ(structure.size(), d.size());
        const int64_t eff_level = structure[d.size() - 2], eff_p = structure[d.size() - 1];
        EXPECT_EQ(eff_level, level) << "every tile level here has loops above one iteration";
        if (!placements.insert({eff_level, eff_p}).second) continue;
        EXPECT_TRUE(hashes.insert(schedule::TraceHash(*s)).second)
            << k.spec << ": placement (" << eff_level << ", " << eff_p
            << ") builds the schedule of another";
        bool packs = false, copies = false;
        for (const schedule::Step& step : s->steps) {
          packs |= std::holds_alternative<schedule::LayoutPackStep>(step);
          copies |= std::holds_alternative<schedule::CacheReadStep>(step);
        }
        EXPECT_EQ(packs, k.packs) << k.spec;
        EXPECT_EQ(copies, k.copies) << k.spec;
        Built got = Inspect(dag, *s, target);
        // Computed at the innermost loop of its level, counted after the fuse.
        EXPECT_EQ(got.attach_iter, std::max<int64_t>(0, (eff_level + 1) * ns - eff_p))
            << k.spec << " level " << level << " parallel " << p;
        int64_t elements = 1, fused = 1;
        for (int a = 0; a < ns; ++a) {
          for (int t = int(eff_level); t < 3; ++t) elements *= Tile(d, a, t);
        }
        for (int j = 0; j < eff_p; ++j) fused *= OuterExtent(dag, d, j);
        EXPECT_EQ(got.local_elements, elements)
            << k.spec << " level " << level << " parallel " << p;
        EXPECT_EQ(got.parallel_loops, 1) << k.spec;
        EXPECT_EQ(got.parallel_extent, fused) << k.spec << " level " << level << " parallel " << p;
        auto check = testing::CheckKernel(*w, &*s, target, 40 + checked, 1e-4, 1 + checked % 3);
        ASSERT_TRUE(check.ok()) << k.spec << " level " << level << " parallel " << p << ": "
                                << check.status() << "\n"
                                << schedule::ToProto(*s).ShortDebugString();
        ++checked;
      }
    }
    // Each deeper level, and both fewer and more parallel loops than the S0 ones.
    std::set<int64_t> levels;
    bool fewer = false, more = false;
    for (const auto& [level, p] : placements) {
      levels.insert(level);
      fewer |= p < ns;
      more |= p > ns;
    }
    EXPECT_EQ(levels.size(), 3u) << k.spec;
    EXPECT_TRUE(fewer && more) << k.spec;
  }
  std::printf("%d placements built, inspected and checked\n", checked);
  EXPECT_GE(checked, 30);
}

// Placements that build the program of another build its steps: a compute
// location whose loops are all one iteration long, parallel S1 loops of one
// iteration, S0 loops of one iteration left out of the parallel loop.
TEST(TilingSketch, EquivalentPlacementsBuildOneSchedule) {
  const ir::Target target = codegen::HostTarget();
  ir::ComputeDAG dag = Dag("matmul(M=37,N=45,K=29)");
  // Register tiles only (S1 = S2 = 1): every location is the S0 one.
  const std::vector<int64_t> reg = {1, 1, 1, -1, 1, 1, 1, 3, 1, 1, 1, 16, 1, 5};
  auto base = schedule::BuildTiledSchedule(dag, target, reg);
  ASSERT_TRUE(base.ok()) << base.status();
  for (auto [level, p] : std::vector<std::pair<int64_t, int64_t>>{{1, 2}, {2, 2}, {1, 3}, {2, 4}}) {
    auto s = schedule::BuildTiledSchedule(dag, target, WithPlacement(reg, level, p));
    ASSERT_TRUE(s.ok()) << s.status();
    EXPECT_EQ(schedule::TraceHash(*s), schedule::TraceHash(*base)) << level << " " << p;
    EXPECT_EQ(Space(dag).TilingStructure(Tiling(dag, WithPlacement(reg, level, p))).Encode(),
              Space(dag).TilingStructure(Tiling(dag, reg)).Encode());
  }
  // N in one S0 tile (3*3*16 >= 45): parallel over M's S0 alone is the default.
  const std::vector<int64_t> wide = {1, 1, 1, -1, 1, 2, 1, 3, 1, 3, 1, 16, 1, 5};
  EXPECT_EQ(schedule::TraceHash(*schedule::BuildTiledSchedule(dag, target, WithPlacement(wide, 0, 1))),
            schedule::TraceHash(*schedule::BuildTiledSchedule(dag, target, wide)));
  // But a real choice is another schedule.
  EXPECT_NE(schedule::TraceHash(*schedule::BuildTiledSchedule(dag, target, WithPlacement(wide, 1, 2))),
            schedule::TraceHash(*schedule::BuildTiledSchedule(dag, target, wide)));
  EXPECT_NE(schedule::TraceHash(*schedule::BuildTiledSchedule(dag, target, WithPlacement(wide, 1, 3))),
            schedule::TraceHash(*schedule::BuildTiledSchedule(dag, target, WithPlacement(wide, 1, 2))));
}

// The tile shape (and so the stratum) is the local tile's: narrow or
// blocked tiles computed at their S2 loop leave a register tile; a move
// into a narrow or blocked stratum computes the tile far enough out for the
// shape to show.
TEST(TilingSketch, TheShapeIsTheLocalTiles) {
  const ir::Target target = codegen::HostTarget();
  ir::ComputeDAG dag = Dag("matmul(M=64,N=64,K=64)");
  // N vectorized, packed (b copied); S1 and S2 tiles of 2 (narrow) or an S2
  // tile of 16 rows (blocked).
  const std::vector<int64_t> narrow = {1, 1, 1, -1, 1, 2, 2, 4, 1, 1, 2, 16, 1, 8};
  const std::vector<int64_t> blocked = {1, 1, 1, -1, 1, 2, 16, 2, 1, 1, 1, 16, 1, 32};
  EXPECT_EQ(Space(dag).TileShape(Tiling(dag, narrow)), 1);
  EXPECT_EQ(Space(dag).TileShape(Tiling(dag, WithPlacement(narrow, 1, 2))), 1);
  EXPECT_EQ(Space(dag).TileShape(Tiling(dag, WithPlacement(narrow, 2, 2))), 0);
  EXPECT_EQ(Space(dag).TileShape(Tiling(dag, blocked)), 2);
  EXPECT_EQ(Space(dag).TileShape(Tiling(dag, WithPlacement(blocked, 1, 3))), 2);
  EXPECT_EQ(Space(dag).TilingStratum(Tiling(dag, WithPlacement(blocked, 2, 3))),
            search::space::kTilingShapes);
  for (uint64_t seed = 0; seed < 5; ++seed) {
    std::mt19937_64 rng(seed);
    for (int k = 0; k < search::space::kTilingStrata; ++k) {
      const std::vector<int64_t> d = WithPlacement(narrow, 2, 3);
      std::vector<int64_t> m = Space(dag, target).MoveTiling(Tiling(dag, d), k, rng).Encode();
      EXPECT_EQ(Space(dag).TilingStratum(Tiling(dag, m)), k) << "seed " << seed;
      EXPECT_TRUE(schedule::BuildTiledSchedule(dag, target, m).ok());
      // Kept where the shape allows it: a register tile stays at S2.
      if (k % search::space::kTilingShapes == 0) EXPECT_EQ(m[m.size() - 2], 2);
    }
  }
}

// (b) Decision vectors of the length records stored before the placement
// existed build the schedules they built then: the hashes below come from
// the sketch before the change (same target). Their length with the default
// placement builds the same steps, so the search never measures again a
// schedule an old record holds (the schedule hash covers the steps only).
// The three entries whose weight is packed (vectorized along K) were regenerated when
// packing moved the reduction dimensions inside the vector block: those
// decisions now build a different kernel on purpose, while a stored record
// still rebuilds its own from its steps.
TEST(TilingSketch, LegacyDecisionsBuildTheScheduleTheyBuiltBefore) {
  const ir::Target target =
      *ir::Target::Parse("llvm -mtriple=x86_64-linux-gnu -mcpu=skylake-avx512");
  struct Golden {
    std::string spec;
    std::vector<int64_t> legacy;
    std::string hash;
  };
  const std::vector<Golden> golden = {
      {"conv2d_nchw(N=1,C=6,H=11,W=13,K=12,R=3,S=3,pad=1)",
       {1, 2, 1, 2, 1, 1, 1, 1, 1, 1, 1, 6, 1, 1, 1, 11, 1, 1, 1, 1, 1, 1, 1, 3},
       "9c9688e1853c248dc9d970215be0bfc9d437b2cd36f16a90bb2ae538044d902f"},
      {"conv2d_nchw(N=1,C=6,H=11,W=13,K=12,R=3,S=3,pad=1)",
       {1, 2, 0, 3, 1, 1, 1, 1, 1, 1, 6, 1, 1, 1, 1, 11, 1, 1, 1, 13, 1, 3, 3, 3},
       "be04504d9c1e4d898fe6a2cad10d2ad24e07c1cdf94981bceb9f22223339ac63"},
      {"conv2d_nchw(N=1,C=6,H=11,W=13,K=12,R=3,S=3,pad=1)",
       {1, 1, 1, -1, 1, 1, 1, 1, 1, 2, 1, 4, 1, 2, 2, 1, 1, 1, 2, 3, 0, 4, 2, 3},
       "58c9531f915de2b9c2ead4f80e6a70761cc32f4ab06fa6befdc67a769df373e6"},
      {"conv2d_nchw(N=1,C=6,H=11,W=13,K=12,R=3,S=3,pad=1)+bias+relu",
       {1, 1, 1, 2, 1, 1, 1, 1, 0, 1, 1, 8, 1, 1, 1, 11, 1, 1, 1, 1, 1, 3, 3, 1},
       "534b13a87b164f4ea68b98fa047fc9891448104f116197197aa354d4f357e622"},
      {"conv2d_nchw(N=1,C=6,H=11,W=13,K=12,R=3,S=3,pad=1)+bias+relu",
       {1, 1, 1, -1, 1, 1, 1, 1, 1, 2, 1, 4, 1, 2, 2, 1, 1, 1, 2, 3, 0, 4, 2, 3},
       "dcba0ea439cfc7a2c3cd292068ff86501dbc5a1a0be6b265674e2c9b25333e75"},
      {"conv2d_nchw(N=1,C=6,H=11,W=13,K=12,R=3,S=3,pad=1)+bias+relu",
       {0, 3, 0, 2, 0, 1, 1, 1, 0, 3, 2, 2, 1, 1, 3, 2, 1, 2, 1, 4, 1, 6, 3, 1},
       "7bc1aa965e531208f2be4642578d264e488a071e9dfe22b1ed949275ace21edb"},
      {"matmul(M=37,N=45,K=29)",
       {1, 1, 1, 2, 1, 1, 1, 1, 1, 1, 1, 32, 0, 1},
       "dd63b13a746719ac5b42727acdf88f05a9acffe945849c7b814efec9cd53ba53"},
      {"matmul(M=37,N=45,K=29)",
       {1, 1, 1, 1, 0, 1, 1, 11, 1, 1, 1, 16, 0, 1},
       "3f23e543eb296b1812603d517b72eef3d46dbc537f9598b451a0cc95f32de0eb"},
      {"matmul(M=37,N=45,K=29)",
       {1, 1, 1, -1, 1, 2, 2, 3, 1, 2, 1, 8, 1, 5},
       "06a35e392c6dfe0764fc5075406ac0c2a236abe506a479485c5fc42c62d09361"},
      {"matmul(M=37,N=45,K=29)",
       {0, 1, 0, 1, 0, 3, 1, 2, 0, 1, 3, 4, 1, 7},
       "a957dbe0d0ad3878573e73efb9357d1bf24496187ebf284e36a724eac1f9ef35"},
      {"matmul(M=37,N=45,K=29)",
       {1, 0, 1, 3, 1, 2, 2, 4, 1, 1, 2, 3, 1, 8},
       "c9f69c8ddc5f4c04c4e5407fd1fcad0066850ece7c9d59c2741e37393ebad7b5"},
      {"dense(M=5,N=32,K=17)+bias",
       {1, 1, 1, 1, 0, 1, 1, 5, 0, 1, 1, 32, 1, 17},
       "5b6046200d40d674fd3cfb3f5c503f65e3c00ca634b6bbebd240db2988f2c8fe"},
      {"dense(M=5,N=32,K=17)+bias",
       {1, 0, 1, -1, 0, 1, 1, 5, 0, 1, 1, 4, 1, 1},
       "e3f8d330b56203384b5f5baa169f48ac95b340d17e3fd7416427ee5be7b4eaf5"},
  };
  std::mt19937_64 rng(7);
  for (const Golden& g : golden) {
    ir::ComputeDAG dag = Dag(g.spec);
    const int ns = SpatialAxes(dag);
    const std::vector<int64_t> full = WithPlacement(g.legacy, 0, ns);
    auto old_s = schedule::BuildTiledSchedule(dag, target, g.legacy);
    auto new_s = schedule::BuildTiledSchedule(dag, target, full);
    ASSERT_TRUE(old_s.ok()) << g.spec << ": " << old_s.status();
    ASSERT_TRUE(new_s.ok()) << g.spec << ": " << new_s.status();
    EXPECT_EQ(schedule::TraceHash(*old_s), g.hash) << g.spec << ": an old record's schedule changed";
    EXPECT_EQ(schedule::TraceHash(*new_s), g.hash) << g.spec;
    // The same steps; the decisions are stored with the placement.
    EXPECT_EQ(int(old_s->steps.size()), int(new_s->steps.size()));
    EXPECT_EQ(std::vector<int64_t>(old_s->decisions.begin(), old_s->decisions.end()), full);
    // Every reader of the layout takes the old length as the new one.
    EXPECT_EQ(Space(dag).TileShape(Tiling(dag, g.legacy)), Space(dag).TileShape(Tiling(dag, full)))
        << g.spec;
    EXPECT_EQ(Space(dag).TilingStratum(Tiling(dag, g.legacy)),
              Space(dag).TilingStratum(Tiling(dag, full)))
        << g.spec;
    EXPECT_EQ(Space(dag).TilingStructure(Tiling(dag, g.legacy)).Encode(),
              Space(dag).TilingStructure(Tiling(dag, full)).Encode())
        << g.spec;
    for (int k = 0; k < search::space::kTilingStrata; ++k) {
      std::mt19937_64 r1(k), r2(k);
      std::vector<int64_t> m1 =
          Space(dag, target).MoveTiling(Tiling(dag, g.legacy), k, r1).Encode();
      std::vector<int64_t> m2 = Space(dag, target).MoveTiling(Tiling(dag, full), k, r2).Encode();
      EXPECT_EQ(m1, m2) << g.spec << " stratum " << k;
      EXPECT_TRUE(schedule::BuildTiledSchedule(dag, target, m1).ok()) << g.spec;
    }
    for (int i = 0; i < 10; ++i) {
      std::vector<int64_t> m = Space(dag, target).MutateTiling(Tiling(dag, g.legacy), rng).Encode();
      ASSERT_EQ(m.size(), full.size()) << g.spec;
      int diff = 0;
      for (size_t j = 0; j < m.size(); ++j) diff += m[j] != full[j];
      EXPECT_GE(diff, 1) << g.spec;
      EXPECT_TRUE(schedule::BuildTiledSchedule(dag, target, m).ok()) << g.spec;
    }
    // Neither length, or a placement out of range: refused.
    std::vector<int64_t> odd = g.legacy;
    odd.push_back(0);
    EXPECT_FALSE(schedule::BuildTiledSchedule(dag, target, odd).ok());
    for (auto [level, p] : std::vector<std::pair<int64_t, int64_t>>{
             {3, 1}, {-1, 1}, {0, 0}, {0, ns + 1}, {1, 2 * ns + 1}, {2, 2 * ns + 1}}) {
      EXPECT_FALSE(schedule::BuildTiledSchedule(dag, target, WithPlacement(g.legacy, level, p)).ok())
          << g.spec << " level " << level << " parallel " << p;
    }
  }
}

// (c) Mutations change the compute location and the parallel loops about a
// twelfth of the time each, to values that build another program; sampling
// keeps the default placement the most likely; what they make builds and runs.
// A placement never leaves the parallel loop fewer iterations than the
// target's cores where the default placement has enough: on one thread the
// search cannot see an idle core.
TEST(TilingSketch, ParallelLoopKeepsEveryCoreBusy) {
  const ir::Target target =
      *ir::Target::Parse("llvm -mtriple=x86_64-linux-gnu -mcpu=skylake-avx512 -num-cores=2");
  const std::string spec = "conv2d_nchw(N=1,C=16,H=14,W=14,K=32,R=3,S=3,pad=1)";
  ir::ComputeDAG dag = Dag(spec);
  const int ns = SpatialAxes(dag);
  std::mt19937_64 rng(23);
  int checked = 0, fewer = 0;
  for (int i = 0; i < 300; ++i) {
    std::vector<int64_t> d = Space(dag, target).SampleTiling(rng, true).Encode();
    for (const std::vector<int64_t>& c :
         {d, Space(dag, target).MutateTiling(Tiling(dag, d), rng).Encode()}) {
      auto s = schedule::BuildTiledSchedule(dag, target, c);
      auto def = schedule::BuildTiledSchedule(
          dag, target, WithPlacement(std::vector<int64_t>(c.begin(), c.end() - 2), 0, ns));
      ASSERT_TRUE(s.ok() && def.ok()) << s.status() << def.status();
      if (Inspect(dag, *def, target).parallel_extent < 2) continue;
      ++checked;
      fewer += c[c.size() - 1] < ns;
      EXPECT_GE(Inspect(dag, *s, target).parallel_extent, 2) << "sample " << i;
    }
  }
  EXPECT_GT(checked, 400);
  EXPECT_GT(fewer, 10);  // fewer parallel loops are still drawn where they keep both cores
}

TEST(TilingSketch, SamplingAndMutationReachThePlacements) {
  const ir::Target target = codegen::HostTarget();
  for (const std::string spec :
       {"conv2d_nchw(N=1,C=8,H=10,W=10,K=16,R=3,S=3,pad=1)+bias+relu", "matmul(M=64,N=48,K=32)"}) {
    ir::ComputeDAG dag = Dag(spec);
    auto w = ir::ParseWorkloadSpec(spec);
    const int ns = SpatialAxes(dag);
    std::mt19937_64 rng(17);
    const int n = 600;
    int level_changed = 0, parallel_changed = 0, tiles_changed = 0, ran = 0;
    int default_level = 0, default_parallel = 0;
    std::map<int64_t, int> levels;
    int fewer = 0, more = 0;
    int shapes[3] = {0, 0, 0}, shape_moved = 0;
    for (int i = 0; i < n; ++i) {
      // The search's own samples keep the default placement.
      const std::vector<int64_t> plain = Space(dag, target).SampleTiling(rng).Encode();
      ASSERT_EQ(plain.size(), size_t(kFixed + kPerAxis * ns +
                                     dag.stages[schedule::TilingMainStage(dag)].reduce_axes.size() + 2));
      EXPECT_EQ(plain[plain.size() - 2], 0) << spec;
      EXPECT_EQ(plain.back(), ns) << spec;
      std::vector<int64_t> d = Space(dag, target).SampleTiling(rng, true).Encode();
      ASSERT_EQ(d.size(), size_t(kFixed + kPerAxis * ns +
                                 dag.stages[schedule::TilingMainStage(dag)].reduce_axes.size() + 2));
      const size_t at = d.size() - 2;
      default_level += d[at] == 0;
      default_parallel += d[at + 1] == ns;
      ++levels[d[at]];
      ++shapes[Space(dag).TileShape(Tiling(dag, d))];
      // A register tile computed deeper gets S1 and S2 tiles drawn around it.
      std::vector<int64_t> drawn(d.begin(), d.begin() + at);
      if (d[at] == 2) {
        for (int a = 0; a < ns; ++a)
          drawn[kFixed + kPerAxis * a] = drawn[kFixed + kPerAxis * a + 1] = 1;
      }
      shape_moved +=
          Space(dag).TileShape(Tiling(dag, d)) != Space(dag).TileShape(Tiling(dag, drawn));
      fewer += d[at + 1] < ns;
      more += d[at + 1] > ns;
      std::vector<int64_t> m = Space(dag, target).MutateTiling(Tiling(dag, d), rng).Encode();
      ASSERT_EQ(m.size(), d.size());
      auto s = schedule::BuildTiledSchedule(dag, target, m);
      ASSERT_TRUE(s.ok()) << spec << ": " << s.status();
      ASSERT_TRUE(schedule::ScheduleState::Replay(dag, *s, target).ok());
      const std::vector<int64_t> before = Space(dag).TilingStructure(Tiling(dag, d)).Encode();
      const std::vector<int64_t> after = Space(dag).TilingStructure(Tiling(dag, m)).Encode();
      const bool lc = m[at] != d[at], pc = m[at + 1] != d[at + 1];
      level_changed += lc;
      parallel_changed += pc && !lc;
      tiles_changed += !std::equal(before.begin(), before.begin() + at, after.begin());
      if (lc || pc) {
        // Another program: the placement the build uses changed.
        EXPECT_NE(std::vector<int64_t>(before.begin() + at, before.end()),
                  std::vector<int64_t>(after.begin() + at, after.end()))
            << spec << " sample " << i;
        if (ran < 4) {
          auto check = testing::CheckKernel(*w, &*s, target, 70 + i);
          ASSERT_TRUE(check.ok()) << spec << ": " << check.status() << "\n"
                                  << schedule::ToProto(*s).ShortDebugString();
          ++ran;
        }
      }
    }
    std::printf(
        "%s: of %d samples, shapes %d/%d/%d, location S0/S1/S2 %d/%d/%d, parallel "
        "default %d fewer %d more %d; mutations: location %d, parallel %d, tiles %d\n",
        spec.c_str(), n, shapes[0], shapes[1], shapes[2], levels[0], levels[1], levels[2],
        default_parallel, fewer, more, level_changed, parallel_changed, tiles_changed);
    // The placement keeps the drawn shape (the shares of shapes stay).
    EXPECT_EQ(shape_moved, 0) << spec;
    for (int k = 0; k < 3; ++k) EXPECT_GT(shapes[k], 0) << spec << " shape " << k;
    // Sampling: the default most often (half the draws plus those with no
    // deeper level, a quarter of the parallel draws may move), each other value sometimes.
    EXPECT_GE(default_level, n / 2) << spec;
    EXPECT_LE(default_level, n * 9 / 10) << spec;
    EXPECT_GE(default_parallel, n * 6 / 10) << spec;
    EXPECT_LE(default_parallel, n * 95 / 100) << spec;
    EXPECT_GT(levels[1], n / 20) << spec;
    EXPECT_GT(levels[2], n / 20) << spec;
    EXPECT_GT(fewer, 0) << spec;
    EXPECT_GT(more, 0) << spec;
    // Mutation: each placement case a twelfth of the draws (more after
    // retries of draws that changed nothing, less where nothing else builds
    // another program); the tile cases keep most of theirs.
    EXPECT_GE(level_changed, n / 30) << spec;
    EXPECT_LE(level_changed, n / 6) << spec;
    EXPECT_GE(parallel_changed, n / 30) << spec;
    EXPECT_LE(parallel_changed, n / 6) << spec;
    EXPECT_GE(tiles_changed, n / 4) << spec;
    EXPECT_EQ(ran, 4) << spec;
  }
}

}  // namespace
}  // namespace tunefarm
