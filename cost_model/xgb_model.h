// The cost model: gradient-boosted trees (libxgboost's C API) over the
// per-store features of features.h, predicting a candidate's throughput
// normalised within its task (1.0 = the best measured for that workload).
//
//   CostModel m(Objective::kPackSum);
//   TF_RETURN_IF_ERROR(m.Train(samples));
//   TF_ASSIGN_OR_RETURN(std::vector<float> scores, m.Predict(programs));
//
// Objectives (docs/cost_model.md says which one is the default, and why):
//   kPackSum       one tree input per store; a program's score is the sum of
//                  its stores' outputs, trained with a custom squared-error
//                  gradient on that sum, weighted by the label (Ansor's);
//   kPairwiseRank  one row per program (the column sums of its stores),
//                  XGBoost's rank:pairwise within each task;
//   kRegression    one row per program, reg:squarederror.
// Not thread safe: one model per thread, or a lock around it.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "cost_model/features.h"

namespace tunefarm::cost_model {

enum class Objective { kPackSum, kPairwiseRank, kRegression };
const char* ObjectiveName(Objective o);
absl::StatusOr<Objective> ParseObjective(absl::string_view name);

struct Sample {
  const ProgramFeatures* features;
  float label;  // throughput / best throughput of its task, in [0, 1]
  int group;    // task
  // Instance weight (ranking: the weight of its group, taken from the
  // group's first sample).
  float weight = 1;
};

struct TrainOptions {
  int rounds = 80;
  int max_depth = 8;
  double eta = 0.2;
  int threads = 2;
  int seed = 0;
};

class CostModel {
 public:
  explicit CostModel(Objective objective);
  ~CostModel();
  CostModel(const CostModel&) = delete;
  CostModel& operator=(const CostModel&) = delete;

  // Trains a fresh model on `samples` (replacing any previous one).
  absl::Status Train(const std::vector<Sample>& samples, const TrainOptions& options = {});
  // One score per program; higher is predicted faster. An untrained model
  // scores everything 0.
  absl::StatusOr<std::vector<float>> Predict(
      const std::vector<const ProgramFeatures*>& programs) const;

  // The objective and the booster, as bytes (for the database or a file).
  absl::StatusOr<std::string> Serialize() const;
  static absl::StatusOr<std::unique_ptr<CostModel>> Deserialize(const std::string& bytes);

  Objective objective() const { return objective_; }
  bool trained() const { return booster_ != nullptr; }

 private:
  Objective objective_;
  void* booster_ = nullptr;  // BoosterHandle
};

// Quality of predictions on held-out samples: the fraction of same-task pairs
// (with different labels) that the scores order correctly, and the mean over
// tasks of |true top-k ∩ predicted top-k| / k.
struct ModelQuality {
  double pairwise_accuracy = 0;
  double recall_at_k = 0;
  int64_t pairs = 0;
  int k = 0;
};
ModelQuality EvaluateModel(const std::vector<float>& scores, const std::vector<Sample>& samples,
                           int k);

}  // namespace tunefarm::cost_model
