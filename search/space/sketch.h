// The search space of a task: a sketch (a family of schedules with typed
// decisions) bound to the task's DAG and target. The search draws, mutates
// and moves decisions through this interface; a schedule (the wire form,
// schedule::Trace with the encoded decisions) exists only once Build makes one.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "compiler/ir/compute.h"
#include "compiler/ir/target.h"
#include "compiler/schedule/gpu_tensor_core.h"
#include "compiler/schedule/gpu_tiling.h"
#include "compiler/schedule/tiling.h"
#include "compiler/schedule/trace.h"

namespace tunefarm::search::space {

// The decisions of one sketch; each sketch takes only its own alternative.
using Decisions = std::variant<schedule::CpuTiling, schedule::GpuTiling, schedule::TensorCoreTiling>;

class Sketch {
 public:
  virtual ~Sketch() = default;

  // Schedule.sketch_id of what Build makes.
  virtual int id() const = 0;
  // Classes each batch keeps (CPU: tile shape x packed); 1: no such classes.
  virtual int strata() const { return 1; }

  // Decisions read from a schedule's wire form; nullopt when they do not
  // fit this task (another layout or length).
  virtual std::optional<Decisions> Decode(absl::Span<const int64_t> wire) const = 0;
  // A random point of the sketch.
  virtual Decisions Sample(std::mt19937_64& rng) const = 0;
  // A neighbour: one decision changed (the same decisions when no change fits).
  virtual Decisions Mutate(const Decisions& d, std::mt19937_64& rng) const = 0;
  // `d` moved into `stratum` (see strata()); `d` itself where there are none.
  virtual Decisions Move(const Decisions& d, int stratum, std::mt19937_64& rng) const;
  // The stratum of `d`, in [0, strata()).
  virtual int Stratum(const Decisions& d) const;
  // `d` with the decisions that only change how the same tiles are unrolled
  // or padded cleared, in wire form: two candidates with equal structures
  // compute the same tiles in the same order. Empty where the sketch does
  // not tell.
  virtual std::vector<int64_t> Structure(const Decisions& d) const;
  // The schedule of `d`, or why it does not build.
  virtual absl::StatusOr<schedule::Trace> Build(const Decisions& d) const = 0;
};

// The tiling sketch of the target (CPU "SSRSRS" or GPU "SSSRRSRS"; the
// tensor-core sketch for a float16 product on sm_80 and newer) for `dag`,
// or null when the DAG has no reduction to tile. `dag` must outlive the
// sketch.
std::unique_ptr<Sketch> TilingSketchFor(const ir::ComputeDAG& dag, const ir::Target& target);

}  // namespace tunefarm::search::space
