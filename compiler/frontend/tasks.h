// Task extraction: the tunable workloads of an imported model (convolutions,
// dense/matmul layers) with what fuses into them (bias, BatchNormalization
// folded into the weights, activation, residual add), deduplicated, with
// their weights (occurrences in the model) and FLOPs.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "compiler/frontend/onnx_import.h"
#include "tunefarm/v1/workload.pb.h"

namespace tunefarm::frontend {

struct ModelTask {
  v1::Workload workload;
  std::string key;  // canonical workload key
  std::string
      description;   // one line, e.g. "conv2d 1x64x56x56 * 64x64x3x3 s1,1 p1,1,1,1 +bias+relu"
  double flops = 0;  // one occurrence
  int weight = 0;    // occurrences in the model
  std::vector<std::string> nodes;  // the nodes of its first occurrence (anchor first)
};

// One place in the model where a task's kernel computes its nodes.
struct TaskOccurrence {
  int task = -1;           // index into TaskExtraction::tasks
  std::vector<int> nodes;  // indices into Model::nodes, anchor first, in fusion order
  // nodes[0, chain) are the anchor and its named epilogues; the rest are the
  // steps of its elementwise program (EPILOGUE_KIND_MAP), in model order,
  // whose extra inputs are the values `map_inputs`.
  size_t chain = 0;
  std::vector<std::string> map_inputs;
};

struct TaskExtraction {
  std::vector<ModelTask> tasks;             // in order of first appearance
  std::vector<TaskOccurrence> occurrences;  // in model order
  double model_flops = 0;                   // every node of the model
  double task_flops = 0;                    // the tasks' share of it, weights counted
};

absl::StatusOr<TaskExtraction> ExtractTasks(const Model& model);

}  // namespace tunefarm::frontend
