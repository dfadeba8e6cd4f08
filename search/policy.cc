#include "search/policy.h"

#include <algorithm>
#include <functional>
#include <numeric>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "compiler/ir/schedule_hash.h"
#include "compiler/schedule/gpu_tiling.h"
#include "compiler/schedule/schedule.h"
#include "search/space/random_schedule.h"
#include "search/space/sketch.h"

namespace tunefarm::search {

namespace v1 = ::tunefarm::v1;

namespace {

// A schedule's sketch decisions as stored (the wire form).
absl::Span<const int64_t> Wire(const schedule::Trace& s) {
  return {s.decisions.data(), size_t(s.decisions.size())};
}

}  // namespace

const char* StrategyName(Strategy s) { return s == Strategy::kRandom ? "random" : "evolutionary"; }

absl::StatusOr<Strategy> ParseStrategy(absl::string_view name) {
  if (name == "random") return Strategy::kRandom;
  if (name == "evolutionary") return Strategy::kEvolutionary;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown search strategy '", std::string(name), "' (random, evolutionary)"));
}

void TaskHistory::Add(const schedule::Trace& schedule, const MeasureResult& result) {
  measured.insert(schedule::TraceHash(schedule));
  ++trials;
  if (schedule.decisions.empty()) ++plain_trials;
  if (result.status != MeasureResult::Status::kOk) return;
  Entry e{schedule, result.seconds};
  // A new best by at least 1% restarts the stall count.
  if (ok.empty() || result.seconds < ok.front().seconds * 0.99) last_improvement = trials;
  auto at = std::upper_bound(ok.begin(), ok.end(), e,
                             [](const Entry& a, const Entry& b) { return a.seconds < b.seconds; });
  ok.insert(at, std::move(e));
}

std::vector<std::vector<int64_t>> TaskHistory::BestDecisions(int sketch_id, int n) const {
  std::vector<std::vector<int64_t>> out;
  for (const Entry& e : ok) {
    if (int(out.size()) >= n) break;
    if (e.schedule.sketch_id != sketch_id || e.schedule.decisions.empty()) continue;
    out.emplace_back(e.schedule.decisions.begin(), e.schedule.decisions.end());
  }
  return out;
}

absl::StatusOr<cost_model::ProgramFeatures> FeaturesOf(const Task& task, const schedule::Trace& s) {
  TF_ASSIGN_OR_RETURN(schedule::ScheduleState st, schedule::ScheduleState::Replay(task.dag, s, task.target));
  return cost_model::ExtractFeatures(st.dag(), schedule::Lower(st));
}

std::vector<schedule::Trace> SearchPolicy::Fresh(const TaskHistory& history, int n,
                                           std::set<std::string>* taken,
                                           const std::function<absl::StatusOr<schedule::Trace>()>& draw) {
  std::vector<schedule::Trace> out;
  for (int tries = 0; int(out.size()) < n && tries < n * 20; ++tries) {
    absl::StatusOr<schedule::Trace> s = draw();
    if (!s.ok()) continue;
    std::string h = schedule::TraceHash(*s);
    if (history.measured.count(h) || !taken->insert(h).second) continue;
    out.push_back(*std::move(s));
  }
  return out;
}

std::vector<schedule::Trace> SearchPolicy::Random(const Task& task, const TaskHistory& history, int n,
                                            std::set<std::string>* taken) {
  return Fresh(history, n, taken, [&]() -> absl::StatusOr<schedule::Trace> {
    return space::RandomSchedule(task.dag, task.target, rng_);
  });
}

std::vector<schedule::Trace> SearchPolicy::TransferredSeeds(const Task& task,
                                                         const TaskHistory& history, int n,
                                                         std::set<std::string>* taken) {
  std::vector<schedule::Trace> out;
  auto it = transferred_.find(task.key);
  if (it == transferred_.end() || !schedule::HasTilingSketch(task.dag)) return out;
  const std::unique_ptr<space::Sketch> sketch = space::TilingSketchFor(task.dag, task.target);
  if (!history.BestDecisions(sketch->id(), 1).empty()) return out;
  for (const std::vector<int64_t>& wire : it->second) {
    if (int(out.size()) >= std::min(n, options_.transferred)) break;
    std::optional<space::Decisions> d = sketch->Decode(wire);
    if (!d) continue;
    absl::StatusOr<schedule::Trace> s = sketch->Build(*d);
    if (!s.ok()) continue;
    const std::string h = schedule::TraceHash(*s);
    if (history.measured.count(h) || !taken->insert(h).second) continue;
    out.push_back(*std::move(s));
  }
  return out;
}

std::vector<schedule::Trace> SearchPolicy::SketchSamples(const space::Sketch& sketch,
                                                   const TaskHistory& history, int n,
                                                   std::set<std::string>* taken) {
  return Fresh(history, n, taken, [&] { return sketch.Build(sketch.Sample(rng_)); });
}

// One batch of proposals for a task, in MetaSchedule's stages
// (evolutionary_search.cc): SampleInitPopulation, EvolveWithCostModel,
// PickWithEpsGreedy. The stages draw from the policy's generator in this
// order, so a seeded search proposes the same batches.
class SearchPolicy::Proposal {
 public:
  Proposal(SearchPolicy& policy, const Task& task, const TaskHistory& history,
           const cost_model::CostModel* model)
      : p_(policy),
        task_(task),
        history_(history),
        model_(model),
        sketch_(space::TilingSketchFor(task.dag, task.target)),
        parents_(Decoded(history.BestDecisions(sketch_->id(), policy.options_.parents))) {
    // No parent of its own yet: the best of similar workloads stand in, as
    // mutation parents, and open the batch as they are.
    if (parents_.empty() && p_.options_.transferred > 0) {
      auto it = p_.transferred_.find(task.key);
      if (it != p_.transferred_.end()) seeds_ = Decoded(it->second);
    }
    plain_judged_ = PlainJudged();
  }

  // The candidates: moves of the best measured schedules into the other
  // strata, the transferred seeds, mutations of the parents and fresh
  // samples of the sketch, and a quarter as many from the whole space.
  void SampleInitPopulation();
  // Scores them with the cost model, then for each generation mutates the
  // better-scored half; finally sorted best-scored first.
  void EvolveWithCostModel();
  // Up to `n` unmeasured schedules: paired moves of the best, the seeds,
  // the best-scored candidate of each stratum, then the best-scored rest
  // (near-copies last), and an epsilon share explored at random.
  std::vector<schedule::Trace> PickWithEpsGreedy(int n);

 private:
  struct Cand {
    schedule::Trace schedule;
    std::optional<space::Decisions> decisions;  // none outside the task's tiling sketch
    std::string hash;
    float score = 0;
    std::vector<int64_t> structure;  // Sketch::Structure; empty where the sketch has none
  };

  // The decisions of `wire` that fit the task's sketch, in order.
  std::vector<space::Decisions> Decoded(const std::vector<std::vector<int64_t>>& wire) const;
  // The stratum of a schedule of the sketch (0 when its decisions do not fit).
  int StratumOf(const schedule::Trace& s) const;

  // Schedules outside the tiling sketch (plain primitives) are judged like
  // a stratum: once they have `stratum_trials` trials and none runs within
  // `stratum_keep` of the task's best, the population and the random share
  // of each batch come from the tiling sketch alone. On GEMM 1024 most plain
  // schedules time out or run at 5-15 GFLOP/s: two trials of every batch.
  bool PlainJudged() const;
  // The candidate of `d`, if it builds, is new and (GPU) launches.
  Cand* Add(space::Decisions d);
  void Score(size_t from);
  // Best-scored first, but a candidate one decision away from one already
  // in the batch waits for the last pass: a batch of near-copies measures
  // one corner of the space (the model's favourite) many times over.
  // With `distinct_tiles`, so does one with the same tiles as a picked one.
  bool NearPicked(const Cand& c) const;

  SearchPolicy& p_;
  const Task& task_;
  const TaskHistory& history_;
  const cost_model::CostModel* model_;
  const std::unique_ptr<space::Sketch> sketch_;  // non-null: Propose checks the DAG
  const std::vector<space::Decisions> parents_;   // best measured decisions
  std::vector<space::Decisions> seeds_;
  bool plain_judged_ = false;
  std::vector<Cand> all_;
  std::set<std::string> seen_;
  // moved_best_[k]: the hash of the best schedule's move into stratum k.
  std::vector<std::string> moved_best_;
  std::vector<std::string> seeded_;  // hashes of the seeds, nearest workload first
  std::set<std::string> taken_;
  std::vector<const Cand*> picked_;
};

std::vector<space::Decisions> SearchPolicy::Proposal::Decoded(
    const std::vector<std::vector<int64_t>>& wire) const {
  std::vector<space::Decisions> out;
  for (const std::vector<int64_t>& w : wire) {
    if (std::optional<space::Decisions> d = sketch_->Decode(w)) out.push_back(*std::move(d));
  }
  return out;
}

int SearchPolicy::Proposal::StratumOf(const schedule::Trace& s) const {
  std::optional<space::Decisions> d = sketch_->Decode(Wire(s));
  return d ? sketch_->Stratum(*d) : 0;
}

bool SearchPolicy::Proposal::PlainJudged() const {
  if (sketch_->strata() <= 1 || history_.plain_trials < p_.options_.stratum_trials) return false;
  double plain_best = 0;  // seconds; history.ok is best first
  for (const TaskHistory::Entry& e : history_.ok) {
    if (e.schedule.decisions.empty()) {
      plain_best = e.seconds;
      break;
    }
  }
  return plain_best == 0 || history_.best_seconds() < p_.options_.stratum_keep * plain_best;
}

SearchPolicy::Proposal::Cand* SearchPolicy::Proposal::Add(space::Decisions d) {
  absl::StatusOr<schedule::Trace> s = sketch_->Build(d);
  if (!s.ok()) return nullptr;
  std::string h = schedule::TraceHash(*s);
  if (!seen_.insert(h).second) return nullptr;
  // A GPU candidate past the target's launch limits never reaches a device.
  if (task_.target.is_gpu()) {
    if (absl::Status launch = schedule::CheckGpuLaunch(task_.dag, task_.target, *s); !launch.ok()) {
      ++p_.rejected_;
      p_.last_rejection_ = std::string(launch.message());
      return nullptr;
    }
  }
  std::vector<int64_t> structure = sketch_->Structure(d);
  all_.push_back({*std::move(s), std::move(d), h, 0, std::move(structure)});
  return &all_.back();
}

void SearchPolicy::Proposal::Score(size_t from) {
  if (model_ == nullptr || !model_->trained()) {
    for (size_t i = from; i < all_.size(); ++i)
      all_[i].score = float(std::uniform_real_distribution<>(0, 1)(p_.rng_));
    return;
  }
  std::vector<cost_model::ProgramFeatures> feats;
  std::vector<size_t> idx;
  for (size_t i = from; i < all_.size(); ++i) {
    absl::StatusOr<cost_model::ProgramFeatures> f = FeaturesOf(task_, all_[i].schedule);
    if (!f.ok()) {
      all_[i].score = -1e30f;
      continue;
    }
    feats.push_back(*std::move(f));
    idx.push_back(i);
  }
  std::vector<const cost_model::ProgramFeatures*> ptrs;
  for (const auto& f : feats) ptrs.push_back(&f);
  absl::StatusOr<std::vector<float>> s = model_->Predict(ptrs);
  for (size_t k = 0; k < idx.size(); ++k) all_[idx[k]].score = s.ok() ? (*s)[k] : 0;
}

void SearchPolicy::Proposal::SampleInitPopulation() {
  const EvolutionOptions& o = p_.options_;
  std::mt19937_64& rng = p_.rng_;
  // The best measured schedules moved into every other stratum: the
  // stratum's pick in the first pass is then most likely the best schedule
  // with the packing or tile shape changed, a paired trial of that choice,
  // rather than the model's guess at tile sizes it has not measured there.
  moved_best_.assign(size_t(sketch_->strata()), "");
  if (sketch_->strata() > 1) {
    for (size_t p = 0; p < parents_.size() && int(p) < o.moved_parents; ++p) {
      for (int k = 0; k < sketch_->strata(); ++k) {
        space::Decisions d = sketch_->Move(parents_[p], k, rng);
        // Not every move applies (no vector tile to pack, an axis too short
        // to block): those would only repeat the parent's stratum.
        if (sketch_->Stratum(d) != k) continue;
        if (Add(std::move(d)) != nullptr && p == 0) moved_best_[size_t(k)] = all_.back().hash;
      }
    }
  }
  for (const space::Decisions& d : seeds_) {
    if (int(seeded_.size()) >= o.transferred) break;
    if (Add(d) != nullptr && !history_.measured.count(all_.back().hash))
      seeded_.push_back(all_.back().hash);
  }
  const std::vector<space::Decisions>& mutate_from = parents_.empty() ? seeds_ : parents_;
  std::uniform_real_distribution<> coin(0, 1);
  for (int tries = 0; int(all_.size()) < o.population && tries < o.population * 4; ++tries) {
    if (!mutate_from.empty() && coin(rng) < o.mutate_fraction) {
      // Better parents more often: the index of the min of two draws.
      size_t p = std::min(rng() % mutate_from.size(), rng() % mutate_from.size());
      Add(sketch_->Mutate(mutate_from[p], rng));
    } else {
      Add(sketch_->Sample(rng));
    }
  }
  // A quarter as many from the whole space (the plain-primitive sketch, or
  // the GPU's fused one, too): on some workloads (depthwise) the tiling
  // sketch is not the best shape.
  for (int k = 0; !plain_judged_ && k < o.population / 4; ++k) {
    schedule::Trace s = space::RandomSchedule(task_.dag, task_.target, rng);
    std::string h = schedule::TraceHash(s);
    if (!seen_.insert(h).second) continue;
    std::optional<space::Decisions> d;
    if (s.sketch_id == sketch_->id()) d = sketch_->Decode(Wire(s));
    all_.push_back({std::move(s), std::move(d), h, 0, {}});
  }
}

void SearchPolicy::Proposal::EvolveWithCostModel() {
  Score(0);
  for (int g = 0; g < p_.options_.generations; ++g) {
    // Survivors: the better-scored half; children: their mutations.
    std::vector<size_t> order(all_.size());
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(),
              [&](size_t a, size_t b) { return all_[a].score > all_[b].score; });
    size_t keep = std::max<size_t>(1, order.size() / 2);
    size_t before = all_.size();
    for (int tries = 0; all_.size() - before < keep && tries < int(keep) * 4; ++tries) {
      const Cand& c = all_[order[p_.rng_() % keep]];
      // Another sketch's schedule (plain primitives, GPU fused): selected, not mutated.
      if (!c.decisions) continue;
      const space::Decisions parent = *c.decisions;
      Add(sketch_->Mutate(parent, p_.rng_));
    }
    Score(before);
  }
  std::sort(all_.begin(), all_.end(),
            [](const Cand& a, const Cand& b) { return a.score > b.score; });
}

bool SearchPolicy::Proposal::NearPicked(const Cand& c) const {
  const EvolutionOptions& o = p_.options_;
  for (const Cand* p : picked_) {
    if (o.distinct_tiles && !c.structure.empty() && c.structure == p->structure) return true;
    const auto& pd = p->schedule.decisions;
    const auto& cd = c.schedule.decisions;
    if (pd.size() != cd.size() || cd.empty()) continue;
    int diff = 0;
    for (size_t i = 0; i < pd.size() && diff <= o.min_distance - 1; ++i) diff += pd[i] != cd[i];
    if (diff < o.min_distance) return true;
  }
  return false;
}

std::vector<schedule::Trace> SearchPolicy::Proposal::PickWithEpsGreedy(int n) {
  const EvolutionOptions& o = p_.options_;
  // Stalled (no new best in the last two batches' worth of trials): the
  // model and the parents hold the search in one corner, so half the batch
  // explores at random until a better schedule turns up.
  const bool stalled =
      !history_.ok.empty() && history_.trials - history_.last_improvement >= 2 * n;
  const double epsilon = stalled ? std::max(o.epsilon, o.stalled_epsilon) : o.epsilon;
  int n_random = std::min(n, int(std::round(n * epsilon)));
  std::vector<schedule::Trace> out;
  // The first pass takes the best-scored candidate of each stratum (tile
  // shape, packed or not) first: the model extrapolates badly to a stratum
  // the run has not measured (a GEMM run warm from convolutions proposed
  // unpacked register tiles for three batches, at 0.5x of the packed
  // blocked ones), so each stratum is measured until it has enough trials to
  // be judged, and for as long as it stays near the task's best.
  // Covered: picked for this batch, or judged (enough trials, far from the best).
  const int strata = sketch_->strata();
  std::vector<bool> covered(size_t(strata), false);
  // Moves of the best into judged strata (stratum, candidate), measured first.
  std::vector<std::pair<int, const Cand*>> paired;
  if (strata > 1) {
    std::vector<int> count(size_t(strata), 0);
    std::vector<double> best(size_t(strata), 0);
    for (const TaskHistory::Entry& e : history_.ok) {
      if (e.schedule.sketch_id != sketch_->id()) continue;
      int k = StratumOf(e.schedule);
      if (count[size_t(k)]++ == 0) best[size_t(k)] = e.seconds;  // history.ok is best first
    }
    std::vector<int>& at = p_.paired_at_[task_.key];
    at.resize(size_t(strata), -1);
    for (int k = 0; k < strata; ++k) {
      covered[size_t(k)] = count[size_t(k)] >= o.stratum_trials &&
                           history_.best_seconds() < o.stratum_keep * best[size_t(k)];
      // Judged, and the best has improved since its last move here: the
      // new best, moved here. Not "tried since": a random sample that lands
      // in the stratum says nothing of the new best's tiles there.
      if (!covered[size_t(k)] || at[size_t(k)] == history_.last_improvement ||
          moved_best_[size_t(k)].empty())
        continue;
      for (const Cand& c : all_) {
        if (c.hash == moved_best_[size_t(k)]) paired.push_back({k, &c});
      }
    }
  }
  for (const auto& [k, c] : paired) {
    if (int(out.size()) >= n - n_random) break;
    if (history_.measured.count(c->hash) || !taken_.insert(c->hash).second) continue;
    p_.paired_at_[task_.key][size_t(k)] = history_.last_improvement;
    picked_.push_back(c);
    out.push_back(c->schedule);
  }
  for (const std::string& h : seeded_) {
    if (int(out.size()) >= n - n_random) break;
    if (history_.measured.count(h) || taken_.count(h)) continue;
    const auto c =
        std::find_if(all_.begin(), all_.end(), [&](const Cand& x) { return x.hash == h; });
    // Two seeds with the same tiles (fitting can make them so) are one.
    if (c == all_.end() || NearPicked(*c)) continue;
    // The seed stands for its stratum in this batch.
    if (strata > 1) covered[size_t(StratumOf(c->schedule))] = true;
    taken_.insert(h);
    picked_.push_back(&*c);
    out.push_back(c->schedule);
  }
  for (int pass = strata > 1 ? 0 : 1; pass < 3; ++pass) {
    for (const Cand& c : all_) {
      if (int(out.size()) >= n - n_random) break;
      if (history_.measured.count(c.hash) || taken_.count(c.hash)) continue;
      if (pass < 2 && NearPicked(c)) continue;
      if (pass == 0) {
        if (c.schedule.sketch_id != sketch_->id()) continue;
        int k = c.decisions ? sketch_->Stratum(*c.decisions) : 0;
        if (covered[size_t(k)]) continue;
        covered[size_t(k)] = true;
      }
      taken_.insert(c.hash);
      picked_.push_back(&c);
      out.push_back(c.schedule);
    }
  }
  // Stalled: part of the exploration share goes to unranked neighbours of
  // the best (one decision changed).
  if (stalled && !parents_.empty()) {
    const int want =
        std::min(n - int(out.size()), int(std::round(n_random * o.stalled_neighbors)));
    std::vector<schedule::Trace> near =
        p_.Fresh(history_, want, &taken_, [&]() -> absl::StatusOr<schedule::Trace> {
          absl::StatusOr<schedule::Trace> s = sketch_->Build(sketch_->Mutate(parents_[0], p_.rng_));
          if (s.ok() && task_.target.is_gpu()) {
            if (absl::Status launch = schedule::CheckGpuLaunch(task_.dag, task_.target, *s);
                !launch.ok())
              return launch;
          }
          return s;
        });
    out.insert(out.end(), near.begin(), near.end());
  }
  std::vector<schedule::Trace> extra =
      plain_judged_ ? p_.SketchSamples(*sketch_, history_, n - int(out.size()), &taken_)
                    : p_.Random(task_, history_, n - int(out.size()), &taken_);
  out.insert(out.end(), extra.begin(), extra.end());
  return out;
}

std::vector<schedule::Trace> SearchPolicy::Propose(const Task& task, const TaskHistory& history,
                                             const cost_model::CostModel* model, int n) {
  if (strategy_ == Strategy::kRandom || !schedule::HasTilingSketch(task.dag)) {
    // Random search starts where evolution starts: the transferred seeds
    // (unmeasured, while the task has no tiling schedule of its own that
    // ran) open its batch as they open evolution's, so the two compare
    // from the same start.
    std::set<std::string> taken;
    std::vector<schedule::Trace> out = TransferredSeeds(task, history, n, &taken);
    std::vector<schedule::Trace> rest = Random(task, history, n - int(out.size()), &taken);
    out.insert(out.end(), std::make_move_iterator(rest.begin()), std::make_move_iterator(rest.end()));
    return out;
  }
  Proposal proposal(*this, task, history, model);
  proposal.SampleInitPopulation();
  proposal.EvolveWithCostModel();
  return proposal.PickWithEpsGreedy(n);
}

std::vector<int> SearchPolicy::PairedAt(const std::string& task_key) const {
  auto it = paired_at_.find(task_key);
  return it == paired_at_.end() ? std::vector<int>{} : it->second;
}

void SearchPolicy::SetPairedAt(const std::string& task_key, std::vector<int> at) {
  if (at.empty()) {
    paired_at_.erase(task_key);
  } else {
    paired_at_[task_key] = std::move(at);
  }
}

void SearchPolicy::SetTransferred(const std::string& task_key,
                                  std::vector<std::vector<int64_t>> decisions) {
  if (decisions.empty()) {
    transferred_.erase(task_key);
  } else {
    transferred_[task_key] = std::move(decisions);
  }
}

std::string SearchPolicy::RngState() const {
  std::ostringstream out;
  out << rng_;
  return out.str();
}

bool SearchPolicy::SetRngState(const std::string& state) {
  std::istringstream in(state);
  std::mt19937_64 rng;
  in >> rng;
  if (in.fail()) return false;
  rng_ = rng;
  return true;
}

}  // namespace tunefarm::search
