#include "search/task.h"

#include "common/status_macros.h"
#include "compiler/ir/workload.h"

namespace tunefarm::search {

absl::StatusOr<Task> Task::Make(const ::tunefarm::v1::Workload& workload, const ir::Target& target,
                                std::string name, double weight) {
  TF_ASSIGN_OR_RETURN(ir::CanonicalWorkload cw, ir::Canonicalize(workload));
  Task t;
  t.workload = cw.workload;
  t.key = cw.key;
  t.flops = cw.flops;
  t.target = target;
  t.weight = weight;
  t.name = name.empty() ? cw.key : std::move(name);
  TF_ASSIGN_OR_RETURN(t.dag, ir::BuildComputeDAG(cw.workload));
  return t;
}

const char* StatusName(MeasureResult::Status s) {
  switch (s) {
    case MeasureResult::Status::kOk:
      return "ok";
    case MeasureResult::Status::kBuildError:
      return "build_error";
    case MeasureResult::Status::kWrongResult:
      return "wrong_result";
    case MeasureResult::Status::kRuntimeError:
      return "runtime_error";
    case MeasureResult::Status::kTimeout:
      return "timeout";
  }
  return "?";
}

MeasureResult::Status StatusFromProto(::tunefarm::v1::MeasureStatus s) {
  namespace v1 = ::tunefarm::v1;
  switch (s) {
    case v1::MEASURE_STATUS_OK:
      return MeasureResult::Status::kOk;
    case v1::MEASURE_STATUS_COMPILE_ERROR:
      return MeasureResult::Status::kBuildError;
    case v1::MEASURE_STATUS_WRONG_RESULT:
      return MeasureResult::Status::kWrongResult;
    case v1::MEASURE_STATUS_TIMEOUT:
      return MeasureResult::Status::kTimeout;
    default:
      return MeasureResult::Status::kRuntimeError;
  }
}

::tunefarm::v1::MeasureStatus StatusToProto(MeasureResult::Status s) {
  namespace v1 = ::tunefarm::v1;
  switch (s) {
    case MeasureResult::Status::kOk:
      return v1::MEASURE_STATUS_OK;
    case MeasureResult::Status::kBuildError:
      return v1::MEASURE_STATUS_COMPILE_ERROR;
    case MeasureResult::Status::kWrongResult:
      return v1::MEASURE_STATUS_WRONG_RESULT;
    case MeasureResult::Status::kRuntimeError:
      return v1::MEASURE_STATUS_RUNTIME_ERROR;
    case MeasureResult::Status::kTimeout:
      return v1::MEASURE_STATUS_TIMEOUT;
  }
  return v1::MEASURE_STATUS_UNSPECIFIED;
}

}  // namespace tunefarm::search
