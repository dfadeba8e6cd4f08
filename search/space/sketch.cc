#include "search/space/sketch.h"

#include "search/space/cpu_sketch.h"
#include "search/space/gpu_sketch.h"
#include "search/space/tensor_core_sketch.h"

namespace tunefarm::search::space {

Decisions Sketch::Move(const Decisions& d, int, std::mt19937_64&) const { return d; }

int Sketch::Stratum(const Decisions&) const { return 0; }

std::vector<int64_t> Sketch::Structure(const Decisions&) const { return {}; }

std::unique_ptr<Sketch> TilingSketchFor(const ir::ComputeDAG& dag, const ir::Target& target) {
  if (!schedule::HasTilingSketch(dag)) return nullptr;
  if (schedule::HasTensorCoreSketch(dag, target)) return std::make_unique<TensorCoreSketch>(dag, target);
  if (target.is_gpu()) return std::make_unique<GpuSketch>(dag, target);
  return std::make_unique<CpuSketch>(dag, target);
}

}  // namespace tunefarm::search::space
