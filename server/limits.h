// The bounds the server holds every request to (docs/security.md lists
// them). A request past one is refused INVALID_ARGUMENT naming the field,
// its size and the bound, before anything is stored or allocated for it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "compiler/ir/target.h"
#include "tunefarm/v1/farm.pb.h"
#include "tunefarm/v1/records.pb.h"

namespace tunefarm::server {

struct Limits {
  static constexpr size_t kMaxJobName = 200;      // bytes, printable
  static constexpr size_t kMaxDeviceKey = 128;    // [A-Za-z0-9._:-]
  static constexpr int kMaxTasks = 10000;         // per job
  static constexpr int kMaxInputValues = 64;      // fixed model inputs per job
  static constexpr int kMaxScheduleSteps = 4096;  // per schedule
  static constexpr int kMaxCosts = 1024;          // timings per record
  static constexpr int kMaxImportBatch = 10000;   // records per ImportRecords
  static constexpr size_t kMaxCapabilityBytes = 65536;
  static constexpr int kMaxTimeoutMs = 600000;  // a candidate's limit: 10 minutes
  static constexpr int kMaxNumber = 1000000;    // runs per repeat
  static constexpr int kMaxRepeat = 64;         // timed repeats
  static constexpr int kMaxMinRepeatMs = 60000;
  // Buffers (inputs and output) of one workload, when no agent of the
  // job's key says how much memory it has: 16 GiB.
  static constexpr int64_t kMaxWorkloadBytes = int64_t{16} << 30;
  // The fastest a timing may be: its FLOPs at the target's plausible peak
  // (GPUs 2 PFLOP/s, beyond any board's fp16 tensor-core peak; CPUs 1
  // TFLOP/s per core of the target's -num-cores, 3x a 5 GHz AVX-512 core's
  // fp32 peak, 256 cores when it names none), and never under a nanosecond.
  static constexpr double kGpuPeakFlops = 2e15;
  static constexpr double kCpuCorePeakFlops = 1e12;
  static constexpr int kCpuCoresWhenUnnamed = 256;
  static constexpr double kMinPlausibleSeconds = 1e-9;
};

// The bytes of a workload's inputs and output (4 per element); an error for
// a workload that does not canonicalize.
absl::StatusOr<int64_t> WorkloadBytes(const v1::Workload& workload);

// A job spec: name, device key, task count, every workload's buffers
// against `memory_bytes` (the most any agent of the key has; 0: unknown,
// kMaxWorkloadBytes), measure options, fixed inputs.
absl::Status CheckJobSpec(const v1::JobSpec& spec, int64_t memory_bytes);

// The plausible peak of a target (Limits), FLOP/s.
double PeakFlops(const ir::Target& target);

// A timing of a workload of `flops` that could have happened on a device of
// `peak_flops`: finite and at least the floor of Limits. The error says why
// not.
absl::Status CheckTiming(double seconds, double flops, double peak_flops);

// An import batch: its size, and every record's steps, timings (plausible
// for its workload when the record is OK).
absl::Status CheckImport(const std::vector<v1::Record>& records);

// A registration's capabilities.
absl::Status CheckCapabilities(const v1::Capabilities& capabilities);

}  // namespace tunefarm::server
