#include "server/limits.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/access_tokens.h"
#include "compiler/ir/workload.h"

namespace tunefarm::server {
namespace {

absl::Status Over(const std::string& what, int64_t size, int64_t bound) {
  return absl::InvalidArgumentError(
      absl::StrCat(what, " is ", size, ", over the bound of ", bound, " (docs/security.md)"));
}

int64_t Elements(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d <= 0) return 0;
    if (n > (int64_t{1} << 62) / d) return int64_t{1} << 62;  // saturate
    n *= d;
  }
  return n;
}

}  // namespace

absl::StatusOr<int64_t> WorkloadBytes(const v1::Workload& workload) {
  absl::StatusOr<ir::CanonicalWorkload> c = ir::Canonicalize(workload);
  if (!c.ok()) return c.status();
  int64_t elements = Elements(c->output_shape);
  for (const v1::TensorSpec& t : c->workload.inputs()) {
    elements += Elements({t.shape().begin(), t.shape().end()});
    if (elements > (int64_t{1} << 60)) break;
  }
  return elements * 4;
}

absl::Status CheckJobSpec(const v1::JobSpec& spec, int64_t memory_bytes) {
  if (spec.name().size() > Limits::kMaxJobName) {
    return Over("SubmitJob: the job name's length", int64_t(spec.name().size()),
                Limits::kMaxJobName);
  }
  for (char c : spec.name()) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) {
      return absl::InvalidArgumentError(
          absl::StrFormat("SubmitJob: the job name holds a control character (0x%02x)", u));
    }
  }
  if (spec.device_key().size() > Limits::kMaxDeviceKey) {
    return Over("SubmitJob: the device key's length", int64_t(spec.device_key().size()),
                Limits::kMaxDeviceKey);
  }
  if (!IsNameText(spec.device_key())) {
    return absl::InvalidArgumentError(
        "SubmitJob: a device key is [A-Za-z0-9._:-] (as agents register it)");
  }
  if (spec.tasks_size() > Limits::kMaxTasks) {
    return Over("SubmitJob: the task count", spec.tasks_size(), Limits::kMaxTasks);
  }
  if (spec.input_values_size() > Limits::kMaxInputValues) {
    return Over("SubmitJob: the fixed inputs' count", spec.input_values_size(),
                Limits::kMaxInputValues);
  }
  const v1::MeasureOptions& m = spec.measure();
  struct Option {
    const char* name;
    int64_t value, bound;
  };
  for (const Option& o :
       {Option{"measure.timeout_ms", m.timeout_ms(), Limits::kMaxTimeoutMs},
        Option{"measure.number", m.number(), Limits::kMaxNumber},
        Option{"measure.repeat", m.repeat(), Limits::kMaxRepeat},
        Option{"measure.min_repeat_ms", m.min_repeat_ms(), Limits::kMaxMinRepeatMs}}) {
    if (o.value < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("SubmitJob: ", o.name, " is ", o.value, "; it cannot be negative"));
    }
    if (o.value > o.bound) return Over(absl::StrCat("SubmitJob: ", o.name), o.value, o.bound);
  }
  const int64_t bound = memory_bytes > 0 ? memory_bytes : Limits::kMaxWorkloadBytes;
  for (int i = 0; i < spec.tasks_size(); ++i) {
    absl::StatusOr<int64_t> bytes = WorkloadBytes(spec.tasks(i).workload());
    if (!bytes.ok()) continue;  // the job's own validation names it
    if (*bytes > bound) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "SubmitJob: task %d (%s) needs %.1f GiB for its inputs and output, more than %s "
          "(%.1f GiB)",
          i, ir::Describe(spec.tasks(i).workload()), double(*bytes) / (1 << 30),
          memory_bytes > 0 ? "the memory of any agent of the key" : "the bound for one workload",
          double(bound) / (1 << 30)));
    }
  }
  return absl::OkStatus();
}

double PeakFlops(const ir::Target& target) {
  if (target.is_gpu()) return Limits::kGpuPeakFlops;
  const int cores = target.num_cores > 0 ? target.num_cores : Limits::kCpuCoresWhenUnnamed;
  return cores * Limits::kCpuCorePeakFlops;
}

absl::Status CheckTiming(double seconds, double flops, double peak_flops) {
  const double floor = std::max(Limits::kMinPlausibleSeconds, flops / peak_flops);
  if (std::isfinite(seconds) && seconds >= floor) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrFormat(
      "implausible timing %g s: under the physical floor of %g s (%g FLOP at %g GFLOP/s, and at "
      "least 1 ns)",
      seconds, floor, flops, peak_flops * 1e-9));
}

absl::Status CheckImport(const std::vector<v1::Record>& records) {
  if (records.size() > size_t(Limits::kMaxImportBatch)) {
    return Over("ImportRecords: the batch's record count", int64_t(records.size()),
                Limits::kMaxImportBatch);
  }
  for (size_t i = 0; i < records.size(); ++i) {
    const v1::Record& r = records[i];
    if (r.schedule().steps_size() > Limits::kMaxScheduleSteps) {
      return Over(absl::StrCat("ImportRecords: record ", i, ": its schedule's step count"),
                  r.schedule().steps_size(), Limits::kMaxScheduleSteps);
    }
    if (r.costs_sec_size() > Limits::kMaxCosts) {
      return Over(absl::StrCat("ImportRecords: record ", i, ": its timing count"),
                  r.costs_sec_size(), Limits::kMaxCosts);
    }
    if (r.status() != v1::MEASURE_STATUS_OK) continue;
    absl::StatusOr<ir::CanonicalWorkload> c = ir::Canonicalize(r.workload());
    absl::StatusOr<ir::Target> target = ir::Target::Parse(r.target().spec());
    if (!c.ok() || !target.ok()) continue;  // the store's validation names them
    for (double s : r.costs_sec()) {
      if (absl::Status t = CheckTiming(s, c->flops, PeakFlops(*target)); !t.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat("ImportRecords: record ", i, ": ", t.message()));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status CheckCapabilities(const v1::Capabilities& capabilities) {
  const size_t bytes = capabilities.ByteSizeLong();
  if (bytes > Limits::kMaxCapabilityBytes) {
    return Over("Register: the capabilities' size in bytes", int64_t(bytes),
                Limits::kMaxCapabilityBytes);
  }
  return absl::OkStatus();
}

}  // namespace tunefarm::server
