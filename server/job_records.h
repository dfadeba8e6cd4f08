// Internal to server/: what JobRunner keeps while a job runs, beside the
// search: its results on their way to the log (ResultSink, which also
// stops a job whose device fails every candidate the same way), and where
// the warm start's records were made (Provenance, ForeignRecords).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "compiler/ir/target.h"
#include "server/job_runner.h"
#include "server/metrics.h"
#include "store/group_commit.h"
#include "tunefarm/v1/farm.pb.h"
#include "tunefarm/v1/records.pb.h"

namespace tunefarm::server {

namespace v1 = ::tunefarm::v1;

// Commits a job's results as they arrive and watches for a device that
// fails every candidate the same way (an agent without the GPU the target
// needs, a runner it cannot start): after kSameDeviceFailures results of
// one status and FailureKind in a row the job stops rather than spend its
// budget on that error.
// Thread safe.
class ResultSink {
 public:
  static constexpr int kSameDeviceFailures = 16;

  explicit ResultSink(store::GroupCommitter& commits) : commits_(commits) {}

  void Add(const v1::Record& r) {
    absl::Status c = commits_.Commit(r);
    std::lock_guard<std::mutex> l(mu_);
    if (!c.ok() && store_error_.ok()) store_error_ = c;
    const bool device_failure = r.status() == v1::MEASURE_STATUS_RUNTIME_ERROR ||
                                r.status() == v1::MEASURE_STATUS_UPLOAD_ERROR;
    const std::string kind = absl::StrCat(r.status(), " ", FailureKind(r.error()));
    if (r.status() != v1::MEASURE_STATUS_OK) {
      Group& g = groups_[kind];
      g.status = r.status();
      if (g.count++ == 0)
        g.example = absl::StrCat(EnumLabel(v1::MeasureStatus_Name(r.status()), "MEASURE_STATUS_"),
                                 ": ", r.error());
    }
    if (!device_failure) {
      same_failures_ = 0;
    } else if (kind == last_kind_) {
      last_failure_ = r.error();
      if (++same_failures_ >= kSameDeviceFailures) device_broken_ = true;
    } else {
      same_failures_ = 1;
      last_kind_ = kind;
      last_failure_ = r.error();
    }
  }
  bool device_broken() const { return device_broken_; }
  // This run's failures by status, most frequent first: "8
  // sandbox_violation, 4 runtime_error".
  std::string FailureCounts() const {
    std::lock_guard<std::mutex> l(mu_);
    std::vector<std::pair<int, v1::MeasureStatus>> order;
    std::map<v1::MeasureStatus, int> by_status;
    for (const auto& [kind, g] : groups_) by_status[g.status] += g.count;
    for (const auto& [status, n] : by_status) order.push_back({n, status});
    std::stable_sort(order.begin(), order.end(),
                     [](const auto& a, const auto& b) { return a.first > b.first; });
    std::string out;
    for (const auto& [n, status] : order) {
      absl::StrAppend(&out, out.empty() ? "" : ", ", n, " ",
                      EnumLabel(v1::MeasureStatus_Name(status), "MEASURE_STATUS_"));
    }
    return out;
  }
  absl::Status store_error() const {
    std::lock_guard<std::mutex> l(mu_);
    return store_error_;
  }
  // The failures of this run by kind, most frequent first: "12 x
  // compile_error: <first message of the kind>; 4 x ...".
  std::string FailureGroups() const {
    std::lock_guard<std::mutex> l(mu_);
    std::vector<std::pair<int, std::string>> order;
    for (const auto& [kind, g] : groups_) order.push_back({g.count, g.example});
    std::sort(order.begin(), order.end(),
              [](const auto& a, const auto& b) { return a.first > b.first; });
    std::string out;
    for (const auto& [n, example] : order) {
      absl::StrAppend(&out, out.empty() ? "" : "; ", n, " x ", example);
    }
    return out;
  }
  // Why the job stopped for a broken device.
  std::string BrokenDevice() const {
    std::lock_guard<std::mutex> l(mu_);
    return absl::StrCat(
        "the last ", same_failures_,
        " failed on the device with the same kind of error, the last: ", last_failure_);
  }

 private:
  store::GroupCommitter& commits_;
  mutable std::mutex mu_;
  absl::Status store_error_;  // the first failed commit
  int same_failures_ = 0;
  struct Group {
    v1::MeasureStatus status = v1::MEASURE_STATUS_UNSPECIFIED;
    int count = 0;
    std::string example;  // the first message of the kind, with its status
  };
  std::map<std::string, Group> groups_;  // failures by status and FailureKind
  std::string last_kind_;     // status and FailureKind of the run of failures
  std::string last_failure_;  // the last one's message
  std::atomic<bool> device_broken_{false};
};

// Where the records of a target were made, against the machines this job
// runs on. Per fingerprint field, the values the job's agents (board: CPU,
// GPU, CUDA driver, L4T release) and the target's workers (compiler, CUDA
// toolkit) report. A record whose field has a value none of them reports
// was made elsewhere; an empty field on either side says nothing.
class Provenance {
 public:
  Provenance(const std::vector<v1::Device>& devices, const std::string& device_key,
             const ir::Target& target)
      : board_seen_(kBoard.size()), tools_seen_(kToolchain.size()) {
    for (const v1::Device& d : devices) {
      const v1::Capabilities& c = d.capabilities();
      if (d.role() == v1::ROLE_AGENT && d.device_key() == device_key) {
        v1::Fingerprint f = c.fingerprint();
        if (f.cpu_model().empty()) f.set_cpu_model(c.cpu_model());
        Note(kBoard, f, &board_seen_);
      }
      const auto& builds = target.is_gpu() ? c.cuda_archs() : c.build_triples();
      const std::string want = target.is_gpu() ? target.arch() : target.triple;
      if (d.role() == v1::ROLE_WORKER &&
          std::find(builds.begin(), builds.end(), want) != builds.end()) {
        Note(kToolchain, c.fingerprint(), &tools_seen_);
      }
    }
  }
  bool OtherHardware(const v1::Record& r) const { return Differs(r, kBoard, board_seen_); }
  bool OtherToolchain(const v1::Record& r) const { return Differs(r, kToolchain, tools_seen_); }

 private:
  using Field = std::string (*)(const v1::Fingerprint&);
  using Seen = std::vector<std::set<std::string>>;
  inline static const std::vector<Field> kBoard = {
      [](const v1::Fingerprint& f) { return f.cpu_model(); },
      [](const v1::Fingerprint& f) { return f.gpu_name(); },
      [](const v1::Fingerprint& f) { return f.cuda_driver(); },
      [](const v1::Fingerprint& f) { return f.l4t_release(); }};
  inline static const std::vector<Field> kToolchain = {
      [](const v1::Fingerprint& f) { return f.compiler(); },
      [](const v1::Fingerprint& f) { return f.cuda_toolkit(); }};

  static void Note(const std::vector<Field>& fields, const v1::Fingerprint& f, Seen* seen) {
    for (size_t i = 0; i < fields.size(); ++i) {
      if (!fields[i](f).empty()) (*seen)[i].insert(fields[i](f));
    }
  }
  static bool Differs(const v1::Record& r, const std::vector<Field>& fields, const Seen& seen) {
    for (size_t i = 0; i < fields.size(); ++i) {
      const std::string v = fields[i](r.fingerprint());
      if (!v.empty() && !seen[i].empty() && !seen[i].count(v)) return true;
    }
    return false;
  }

  Seen board_seen_, tools_seen_;
};

// Records of other hardware or another toolchain that the warm start met.
struct ForeignRecords {
  int64_t hardware = 0, toolchain = 0;
  bool refused = false;  // left out (else reused)
};

}  // namespace tunefarm::server
