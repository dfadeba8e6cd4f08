#include "search/space/tensor_core_sketch.h"

#include <algorithm>

#include "search/space/draw.h"

namespace tunefarm::search::space {

using schedule::TensorCoreTiling;

TensorCoreSketch::TensorCoreSketch(const ir::ComputeDAG& dag, const ir::Target& target)
    : dag_(dag), target_(target) {
  const std::array<int64_t, 3> mnk = schedule::TensorCoreProductShape(dag);
  m_ = mnk[0];
  n_ = mnk[1];
  k_ = mnk[2];
}

bool TensorCoreSketch::Fits(const TensorCoreTiling& t) const {
  auto round_up = [](int64_t v, int64_t to) { return (v + to - 1) / to * to; };
  return schedule::TensorCoreSchedule(dag_, target_, t).ok() && t.BlockM() <= 2 * round_up(m_, 16) &&
         t.BlockN() <= 2 * round_up(n_, 8) && t.BlockK() <= 2 * round_up(k_, t.KDepth());
}

namespace {

// sm_90's warpgroup products: one warpgroup along M, 64 x 8 frags_n each,
// from core-matrix tiles moved by cp.async.
void MakeWgmma(TensorCoreTiling* t, std::mt19937_64& rng) {
  t->warps_m = 4;
  t->warps_n = PickOf(rng, {1, 2});
  t->frags_m = PickOf(rng, {1, 2});
  t->frags_n = PickOf(rng, {4, 8, 16, 32});
  t->pad = 0;
  t->ldmatrix = 0;
  t->swizzle = 0;
  t->async_copy = 1;
  if (t->stages < 2) t->stages = PickOf(rng, {2, 3, 4});
  t->wgmma = t->stages >= 3 ? PickOf(rng, {1, 2}) : 1;
}

}  // namespace

std::vector<TensorCoreTiling> TensorCoreSketch::KnownTilings() const {
  // (warps_m, warps_n, frags_m, frags_n, k_steps, stages, wgmma)
  static constexpr int64_t kTable[][7] = {
      {2, 2, 4, 8, 2, 3, 0},  {2, 2, 4, 8, 2, 4, 0},  {2, 4, 4, 8, 2, 3, 0},
      {4, 2, 4, 8, 2, 3, 0},  {2, 2, 2, 4, 2, 4, 0},  {2, 2, 4, 8, 4, 3, 0},
      {4, 2, 2, 16, 4, 3, 1}, {4, 2, 2, 16, 4, 4, 2}, {4, 1, 2, 16, 4, 4, 1},
      {4, 1, 2, 16, 4, 4, 2}, {4, 1, 1, 32, 4, 4, 2}, {4, 2, 2, 8, 4, 4, 1}};
  std::vector<TensorCoreTiling> out;
  for (const auto& row : kTable) {
    TensorCoreTiling t;
    t.tf32 = dag_.tf32;
    t.warps_m = row[0];
    t.warps_n = row[1];
    t.frags_m = row[2];
    t.frags_n = row[3];
    t.k_steps = t.tf32 ? 2 * row[4] : row[4];  // the same depth in bytes
    t.stages = row[5];
    t.async_copy = 1;
    t.wgmma = row[6];
    t.ldmatrix = t.tf32 || t.wgmma ? 0 : 1;
    t.pad = t.wgmma ? 0 : t.tf32 ? 4 : 8;
    if (t.k_steps <= 4 && Fits(t)) out.push_back(t);
    // 16-bit mma.sync tiles also swizzled (CUTLASS's way) instead of padded.
    t.pad = 0;
    t.swizzle = 1;
    if (t.ldmatrix == 1 && t.k_steps <= 4 && Fits(t)) out.push_back(t);
  }
  return out;
}

TensorCoreTiling TensorCoreSketch::SampleTiling(std::mt19937_64& rng) const {
  if (Pick(rng, 0, 3) == 0) {
    std::vector<TensorCoreTiling> known = KnownTilings();
    if (!known.empty()) return known[size_t(Pick(rng, 0, int64_t(known.size()) - 1))];
  }
  for (int tries = 0; tries < 64; ++tries) {
    TensorCoreTiling t;
    t.tf32 = dag_.tf32;
    t.warps_m = PickOf(rng, {1, 2, 4});
    t.warps_n = PickOf(rng, {1, 2, 4});
    t.frags_m = PickOf(rng, {1, 2, 4, 8});
    t.frags_n = PickOf(rng, {1, 2, 4, 8});
    t.k_steps = PickOf(rng, {1, 2, 4});
    t.pad = t.tf32 ? PickOf(rng, {0, 4, 8}) : PickOf(rng, {0, 8});
    t.stages = PickOf(rng, {1, 2, 3, 4});
    t.ldmatrix = t.tf32 ? 0 : PickOf(rng, {0, 1});  // ldmatrix moves 16-bit rows
    if (t.ldmatrix == 1 && PickOf(rng, {0, 1}) == 1) {  // swizzled rather than padded
      t.pad = 0;
      t.swizzle = 1;
    }
    // Past 2 stages only cp.async keeps tiles in flight.
    t.async_copy = t.stages == 2 ? PickOf(rng, {0, 1}) : t.stages > 2 ? 1 : 0;
    // On sm_90, half of the 16-bit samples are warpgroup products.
    if (target_.sm == 90 && !t.tf32 && PickOf(rng, {0, 1}) == 1) MakeWgmma(&t, rng);
    if (Fits(t)) return t;
  }
  return schedule::DefaultTensorCoreTiling(dag_, target_);
}

TensorCoreTiling TensorCoreSketch::MutateTiling(const TensorCoreTiling& parent,
                                                std::mt19937_64& rng) const {
  for (int tries = 0; tries < 16; ++tries) {
    TensorCoreTiling t = parent;
    if (t.wgmma != 0) {  // within wgmma's space, or back to mma.sync
      switch (Pick(rng, 0, 6)) {
        case 0:
          t.warps_n = PickOf(rng, {1, 2});
          break;
        case 1:
          t.frags_m = PickOf(rng, {1, 2});
          break;
        case 2:
          t.frags_n = PickOf(rng, {4, 8, 16, 32});
          break;
        case 3:
          t.k_steps = PickOf(rng, {1, 2, 4});
          break;
        case 4:
          t.stages = PickOf(rng, {2, 3, 4});
          if (t.stages < 3) t.wgmma = 1;
          break;
        case 5:
          t.wgmma = 3 - t.wgmma;  // products waited for, or left in flight
          break;
        default:
          t = schedule::DefaultTensorCoreTiling(dag_, target_);
      }
      if (!(t == parent) && Fits(t)) return t;
      continue;
    }
    switch (Pick(rng, 0, 9)) {
      case 0:
        t.warps_m = PickOf(rng, {1, 2, 4});
        break;
      case 1:
        t.warps_n = PickOf(rng, {1, 2, 4});
        break;
      case 2:
        t.frags_m = PickOf(rng, {1, 2, 4, 8});
        break;
      case 3:
        t.frags_n = PickOf(rng, {1, 2, 4, 8});
        break;
      case 9:
        if (target_.sm != 90 || t.tf32) continue;
        MakeWgmma(&t, rng);
        break;
      case 4:
        t.k_steps = PickOf(rng, {1, 2, 4});
        break;
      case 5:
        t.stages = PickOf(rng, {1, 2, 3, 4});
        if (t.stages == 1) t.async_copy = 0;
        if (t.stages > 2) t.async_copy = 1;
        break;
      case 7:
        t.async_copy = 1 - t.async_copy;
        break;
      case 6:
        if (t.tf32) continue;  // ldmatrix moves 16-bit rows
        t.ldmatrix = 1 - t.ldmatrix;
        t.swizzle = 0;
        break;
      default:
        if (t.ldmatrix == 1) {  // padded -> swizzled -> neither -> padded
          t.swizzle = t.pad == 8 ? 1 : 0;
          t.pad = t.pad == 0 && t.swizzle == 0 && parent.swizzle == 0 ? 8 : 0;
        } else {  // 0 -> 8 -> 0, or for tf32 0 -> 4 -> 8 -> 0
          t.pad = t.pad == 0 ? (t.tf32 ? 4 : 8) : t.pad == 4 ? 8 : 0;
        }
    }
    if (!(t == parent) && Fits(t)) return t;
  }
  return parent;
}

std::optional<Decisions> TensorCoreSketch::Decode(absl::Span<const int64_t> wire) const {
  std::optional<TensorCoreTiling> t = TensorCoreTiling::Decode(wire, dag_.tf32);
  if (!t || !schedule::CheckTensorCoreTiling(*t, target_).ok()) return std::nullopt;
  return Decisions(*t);
}

Decisions TensorCoreSketch::Mutate(const Decisions& d, std::mt19937_64& rng) const {
  return MutateTiling(std::get<TensorCoreTiling>(d), rng);
}

std::vector<int64_t> TensorCoreSketch::Structure(const Decisions& d) const {
  TensorCoreTiling t = std::get<TensorCoreTiling>(d);
  t.pad = 0;
  t.swizzle = 0;
  return t.Encode();
}

absl::StatusOr<schedule::Trace> TensorCoreSketch::Build(const Decisions& d) const {
  return schedule::TensorCoreSchedule(dag_, target_, std::get<TensorCoreTiling>(d));
}

}  // namespace tunefarm::search::space
