// The canonical forms the log database files things under: workloads by
// their key, targets by their canonical spec, schedules by their hash. The
// store holds no compiler code; whoever opens it supplies these functions
// (search::CompilerCanon() gives the compiler's). A function that fails
// makes the record, job or query it was asked for invalid.
#pragma once

#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "tunefarm/v1/schedule.pb.h"
#include "tunefarm/v1/workload.pb.h"

namespace tunefarm::store {

struct Canon {
  struct Workload {
    ::tunefarm::v1::Workload workload;  // canonical
    std::string key;                    // the workload key
    std::string op;                     // "conv2d", "dense", ...
    std::string canonical_json;
    double flops = 0;
  };
  struct Target {
    std::string spec;  // canonical
    std::string kind;  // "llvm" or "cuda"
    std::string arch;  // the CPU (-mcpu) or sm_XX
  };
  std::function<absl::StatusOr<Workload>(const ::tunefarm::v1::Workload&)> workload;
  std::function<absl::StatusOr<Target>(const std::string& spec)> target;
  std::function<std::string(const ::tunefarm::v1::Schedule&)> schedule_hash;

  bool complete() const { return workload && target && schedule_hash; }
};

}  // namespace tunefarm::store
