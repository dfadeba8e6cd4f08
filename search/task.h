// A tuning task (one unique workload of a job on one target) and what a
// measurement of a candidate schedule for it returns. The search, the task
// scheduler and the tuner work on these; measurers (local here, remote
// builders and agents with the farm) fill in the results.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "compiler/ir/compute.h"
#include "compiler/ir/target.h"
#include "compiler/schedule/trace.h"
#include "tunefarm/v1/records.pb.h"
#include "tunefarm/v1/workload.pb.h"

namespace tunefarm::search {

struct Task {
  std::string name;                   // for logs ("resnet_c64_h56_3x3")
  ::tunefarm::v1::Workload workload;  // canonical
  std::string key;                    // workload key
  ir::ComputeDAG dag;
  ir::Target target;
  double flops = 0;
  double weight = 1;  // occurrences in the model

  static absl::StatusOr<Task> Make(const ::tunefarm::v1::Workload& workload,
                                   const ir::Target& target, std::string name = "",
                                   double weight = 1);
};

struct MeasureResult {
  enum class Status { kOk, kBuildError, kWrongResult, kRuntimeError, kTimeout };
  Status status = Status::kOk;
  double seconds = 0;  // median run time (kOk)
  double compile_ms = 0;
  std::string error;  // one line (not kOk)
};
const char* StatusName(MeasureResult::Status s);
// A measurement's outcome as the farm reports it (records, agents), in the
// search's terms: lost and upload errors are runtime errors.
MeasureResult::Status StatusFromProto(::tunefarm::v1::MeasureStatus s);
::tunefarm::v1::MeasureStatus StatusToProto(MeasureResult::Status s);

// Builds and times candidates of a task. Implementations: LocalMeasurer
// (this machine), and the farm's remote builders and agents.
class Measurer {
 public:
  virtual ~Measurer() = default;
  virtual std::vector<MeasureResult> Measure(const Task& task,
                                             const std::vector<schedule::Trace>& schedules) = 0;
};

}  // namespace tunefarm::search
