#include "cost_model/xgb_model.h"

#include <xgboost/c_api.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/sha256.h"
#include "common/status_macros.h"

namespace tunefarm::cost_model {
namespace {

absl::Status XgbError(const char* what) {
  return absl::InternalError(absl::StrCat("xgboost ", what, ": ", XGBGetLastError()));
}

#define TF_XGB(call, what)                  \
  do {                                      \
    if ((call) != 0) return XgbError(what); \
  } while (0)

// A DMatrix that frees itself.
class Matrix {
 public:
  ~Matrix() {
    if (h_) XGDMatrixFree(h_);
  }
  absl::Status Create(const std::vector<float>& data, size_t rows) {
    TF_XGB(XGDMatrixCreateFromMat(data.data(), rows, kStoreFeatures, NAN, &h_), "DMatrix");
    return absl::OkStatus();
  }
  DMatrixHandle get() const { return h_; }

 private:
  DMatrixHandle h_ = nullptr;
};

bool PerStore(Objective o) { return o == Objective::kPackSum; }

// Rows for `programs`: every store row (pack-sum) or one column-sum row per
// program. `owner[r]` is the program of row r.
void Rows(Objective o, const std::vector<const ProgramFeatures*>& programs,
          std::vector<float>* data, std::vector<size_t>* owner) {
  for (size_t p = 0; p < programs.size(); ++p) {
    if (PerStore(o)) {
      for (const FeatureRow& r : programs[p]->rows) {
        data->insert(data->end(), r.begin(), r.end());
        owner->push_back(p);
      }
    } else {
      FeatureRow sum{};
      for (const FeatureRow& r : programs[p]->rows) {
        for (int c = 0; c < kStoreFeatures; ++c) sum[c] += r[c];
      }
      data->insert(data->end(), sum.begin(), sum.end());
      owner->push_back(p);
    }
  }
}

// "tunefarm-cost-model-v2 OBJECTIVE [BYTES SHA256]\n" and XGBoost's UBJSON:
// libxgboost 1.7 reads a truncated UBJSON buffer past its end (a test's
// half model crashed it), so the size and checksum are checked first.
constexpr const char* kMagic = "tunefarm-cost-model-v2 ";
constexpr const char* kOldMagic = "tunefarm-cost-model-v1 ";

}  // namespace

const char* ObjectiveName(Objective o) {
  switch (o) {
    case Objective::kPackSum:
      return "pack-sum";
    case Objective::kPairwiseRank:
      return "rank";
    case Objective::kRegression:
      return "regression";
  }
  return "?";
}

absl::StatusOr<Objective> ParseObjective(absl::string_view name) {
  for (Objective o : {Objective::kPackSum, Objective::kPairwiseRank, Objective::kRegression}) {
    if (name == ObjectiveName(o)) return o;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown cost model objective '", std::string(name), "' (pack-sum, rank, regression)"));
}

CostModel::CostModel(Objective objective) : objective_(objective) {}

CostModel::~CostModel() {
  if (booster_) XGBoosterFree(booster_);
}

absl::Status CostModel::Train(const std::vector<Sample>& samples, const TrainOptions& options) {
  if (samples.empty()) return absl::InvalidArgumentError("no training samples");
  // Ranking needs each task's samples together.
  std::vector<size_t> order(samples.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return samples[a].group < samples[b].group; });
  std::vector<const ProgramFeatures*> programs;
  std::vector<float> labels, weights, group_weights;
  std::vector<unsigned> groups;
  int prev_group = 0;
  for (size_t i : order) {
    if (samples[i].features->rows.empty()) continue;
    programs.push_back(samples[i].features);
    labels.push_back(samples[i].label);
    weights.push_back(samples[i].weight);
    if (groups.empty() || samples[i].group != prev_group) {
      groups.push_back(0);
      group_weights.push_back(samples[i].weight);
    }
    ++groups.back();
    prev_group = samples[i].group;
  }
  if (programs.empty()) return absl::InvalidArgumentError("no training sample has a store");
  std::vector<float> data;
  std::vector<size_t> owner;
  Rows(objective_, programs, &data, &owner);
  Matrix m;
  TF_RETURN_IF_ERROR(m.Create(data, owner.size()));
  const bool weighted =
      std::any_of(weights.begin(), weights.end(), [](float w) { return w != 1.0f; });
  if (!PerStore(objective_)) {
    TF_XGB(XGDMatrixSetFloatInfo(m.get(), "label", labels.data(), labels.size()), "labels");
  }
  if (objective_ == Objective::kRegression && weighted) {
    TF_XGB(XGDMatrixSetFloatInfo(m.get(), "weight", weights.data(), weights.size()), "weights");
  }
  if (objective_ == Objective::kPairwiseRank) {
    TF_XGB(XGDMatrixSetUIntInfo(m.get(), "group", groups.data(), groups.size()), "groups");
    if (weighted) {
      TF_XGB(XGDMatrixSetFloatInfo(m.get(), "weight", group_weights.data(), group_weights.size()),
             "group weights");
    }
  }
  if (booster_) XGBoosterFree(booster_), booster_ = nullptr;
  DMatrixHandle dm = m.get();
  TF_XGB(XGBoosterCreate(&dm, 1, &booster_), "create");
  const char* objective =
      objective_ == Objective::kPairwiseRank ? "rank:pairwise" : "reg:squarederror";
  std::vector<std::pair<std::string, std::string>> params = {
      {"objective", objective},
      {"max_depth", std::to_string(options.max_depth)},
      {"eta", std::to_string(options.eta)},
      {"min_child_weight", "2"},
      {"gamma", "0.0001"},
      {"tree_method", "hist"},
      {"nthread", std::to_string(options.threads)},
      {"seed", std::to_string(options.seed)},
      {"verbosity", "0"},
  };
  if (PerStore(objective_)) params.push_back({"base_score", "0"});
  for (const auto& [k, v] : params)
    TF_XGB(XGBoosterSetParam(booster_, k.c_str(), v.c_str()), "param");
  for (int round = 0; round < options.rounds; ++round) {
    if (!PerStore(objective_)) {
      TF_XGB(XGBoosterUpdateOneIter(booster_, round, m.get()), "update");
      continue;
    }
    // Pack-sum: squared error of the per-program sum, weighted by the label
    // so the fast candidates (the ones the search keeps) are fit best.
    bst_ulong len = 0;
    const float* pred = nullptr;
    TF_XGB(XGBoosterPredict(booster_, m.get(), 1, 0, 1, &len, &pred), "predict");
    std::vector<double> sum(programs.size(), 0.0);
    for (size_t r = 0; r < owner.size(); ++r) sum[owner[r]] += pred[r];
    std::vector<float> grad(owner.size()), hess(owner.size());
    for (size_t r = 0; r < owner.size(); ++r) {
      size_t p = owner[r];
      float w = std::max(0.05f, labels[p]) * weights[p];
      grad[r] = float(w * (sum[p] - labels[p]));
      hess[r] = w;
    }
    TF_XGB(XGBoosterBoostOneIter(booster_, m.get(), grad.data(), hess.data(), grad.size()),
           "boost");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<float>> CostModel::Predict(
    const std::vector<const ProgramFeatures*>& programs) const {
  std::vector<float> scores(programs.size(), 0.0f);
  if (!booster_ || programs.empty()) return scores;
  std::vector<float> data;
  std::vector<size_t> owner;
  Rows(objective_, programs, &data, &owner);
  if (owner.empty()) return scores;
  Matrix m;
  TF_RETURN_IF_ERROR(m.Create(data, owner.size()));
  bst_ulong len = 0;
  const float* pred = nullptr;
  TF_XGB(XGBoosterPredict(booster_, m.get(), PerStore(objective_) ? 1 : 0, 0, 0, &len, &pred),
         "predict");
  for (size_t r = 0; r < owner.size() && r < len; ++r) scores[owner[r]] += pred[r];
  return scores;
}

absl::StatusOr<std::string> CostModel::Serialize() const {
  if (!booster_) return absl::StrCat(kMagic, ObjectiveName(objective_), "\n");
  bst_ulong len = 0;
  const char* buf = nullptr;
  TF_XGB(XGBoosterSaveModelToBuffer(booster_, "{\"format\": \"ubj\"}", &len, &buf), "save");
  const std::string payload(buf, len);
  return absl::StrCat(kMagic, ObjectiveName(objective_), " ", len, " ", Sha256Hex(payload), "\n",
                      payload);
}

absl::StatusOr<std::unique_ptr<CostModel>> CostModel::Deserialize(const std::string& bytes) {
  const size_t magic = std::string(kMagic).size();
  const size_t nl = bytes.find('\n');
  if (bytes.compare(0, magic, kOldMagic) == 0) {
    return absl::FailedPreconditionError(
        "cost model written by an older tunefarm build (no checksum); retrain it from the records");
  }
  if (bytes.compare(0, magic, kMagic) != 0 || nl == std::string::npos) {
    return absl::InvalidArgumentError("not a tunefarm cost model (bad header)");
  }
  std::vector<std::string> fields =
      absl::StrSplit(bytes.substr(magic, nl - magic), ' ', absl::SkipEmpty());
  if (fields.empty()) return absl::InvalidArgumentError("cost model header names no objective");
  TF_ASSIGN_OR_RETURN(Objective o, ParseObjective(fields[0]));
  auto model = std::make_unique<CostModel>(o);
  const std::string_view payload = std::string_view(bytes).substr(nl + 1);
  if (fields.size() == 1 && payload.empty()) return model;  // untrained
  size_t size = 0;
  if (fields.size() != 3 || !absl::SimpleAtoi(fields[1], &size)) {
    return absl::InvalidArgumentError("corrupt cost model: bad header");
  }
  if (payload.size() != size) {
    return absl::InvalidArgumentError(absl::StrCat("corrupt cost model: ", payload.size(), " of ",
                                                   size, " bytes (truncated or padded)"));
  }
  if (Sha256Hex(payload) != fields[2]) {
    return absl::InvalidArgumentError("corrupt cost model: checksum mismatch");
  }
  TF_XGB(XGBoosterCreate(nullptr, 0, &model->booster_), "create");
  if (XGBoosterLoadModelFromBuffer(model->booster_, bytes.data() + nl + 1, bytes.size() - nl - 1) !=
      0) {
    return absl::InvalidArgumentError(absl::StrCat("corrupt cost model: ", XGBGetLastError()));
  }
  // A model from a build with another feature layout would score garbage.
  bst_ulong features = 0;
  TF_XGB(XGBoosterGetNumFeature(model->booster_, &features), "read the feature count of");
  if (features != bst_ulong(kStoreFeatures)) {
    return absl::FailedPreconditionError(absl::StrCat("cost model was trained on ", features,
                                                      " features per store, this build "
                                                      "extracts ",
                                                      kStoreFeatures,
                                                      " (retrain it from the records)"));
  }
  return model;
}

ModelQuality EvaluateModel(const std::vector<float>& scores, const std::vector<Sample>& samples,
                           int k) {
  ModelQuality q;
  q.k = k;
  std::map<int, std::vector<size_t>> groups;
  for (size_t i = 0; i < samples.size(); ++i) groups[samples[i].group].push_back(i);
  int64_t right = 0;
  double recall = 0;
  int recall_groups = 0;
  for (const auto& [g, idx] : groups) {
    for (size_t a = 0; a < idx.size(); ++a) {
      for (size_t b = a + 1; b < idx.size(); ++b) {
        float la = samples[idx[a]].label, lb = samples[idx[b]].label;
        if (la == lb) continue;
        ++q.pairs;
        right += (scores[idx[a]] > scores[idx[b]]) == (la > lb);
      }
    }
    if (int(idx.size()) < k || k <= 0) continue;
    std::vector<size_t> by_label = idx, by_score = idx;
    std::sort(by_label.begin(), by_label.end(),
              [&](size_t x, size_t y) { return samples[x].label > samples[y].label; });
    std::sort(by_score.begin(), by_score.end(),
              [&](size_t x, size_t y) { return scores[x] > scores[y]; });
    int hit = 0;
    for (int i = 0; i < k; ++i) {
      hit += std::find(by_score.begin(), by_score.begin() + k, by_label[i]) != by_score.begin() + k;
    }
    recall += double(hit) / k;
    ++recall_groups;
  }
  q.pairwise_accuracy = q.pairs ? double(right) / double(q.pairs) : 0;
  q.recall_at_k = recall_groups ? recall / recall_groups : 0;
  return q;
}

}  // namespace tunefarm::cost_model
