// tunefarm-bench kernels --target cuda: on this machine's GPU, GFLOP/s of
// the default GPU schedule and of the best of a seeded random sample of GPU
// schedules, beside cuBLAS (GEMM) and cuDNN (convolutions) measured in the
// same run. Our kernels go through the farm's own path (the worker's NVRTC
// build, the agent's sandboxed measurement: checked against the reference on
// random inputs, then CUDA-event timed with the L2 flushed between runs);
// the libraries are timed the same way in this process, and their outputs
// are checked against the float64 reference where it is affordable.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <optional>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "bench/anchors.h"
#include "bench/cuda_references.h"
#include "bench/references.h"
#include "common/float16.h"
#include "compiler/ir/reference.h"
#include "compiler/ir/workload.h"
#include "compiler/ir/workload_spec.h"
#include "compiler/schedule/gpu_tiling.h"
#include "compiler/schedule/schedule.h"
#include "device_agent/runtime/capabilities.h"
#include "search/gpu_local_measurer.h"
#include "search/space/gpu_sketch.h"

namespace tunefarm::bench {
namespace {

namespace v1 = ::tunefarm::v1;

// The GPU issue's list: GEMM 1024^3 and 4096^3, the ResNet-18 3x3 layers at
// batch 1 and 16, a depthwise layer; float16 GEMMs (one bfloat16, two tf32) and batch-16
// layers against cuBLAS's and cuDNN's tensor cores in the same format.
const std::vector<Anchor>& Anchors() {
  static const std::vector<Anchor> anchors = {
      {"gemm_1024", "matmul(M=1024,N=1024,K=1024)"},
      {"gemm_4096", "matmul(M=4096,N=4096,K=4096)"},
      {"gemm_1024_fp16", "matmul(M=1024,N=1024,K=1024,dtype=float16)"},
      {"gemm_4096_fp16", "matmul(M=4096,N=4096,K=4096,dtype=float16)"},
      {"gemm_4096_bf16", "matmul(M=4096,N=4096,K=4096,dtype=bfloat16)"},
      {"gemm_1024_tf32", "matmul(M=1024,N=1024,K=1024,dtype=tf32)"},
      {"gemm_4096_tf32", "matmul(M=4096,N=4096,K=4096,dtype=tf32)"},
      {"resnet_c64_h56_3x3_b1", "conv2d_nchw(N=1,C=64,H=56,W=56,K=64,R=3,S=3,pad=1)"},
      {"resnet_c128_h28_3x3_b1", "conv2d_nchw(N=1,C=128,H=28,W=28,K=128,R=3,S=3,pad=1)"},
      {"resnet_c256_h14_3x3_b1", "conv2d_nchw(N=1,C=256,H=14,W=14,K=256,R=3,S=3,pad=1)"},
      {"resnet_c512_h7_3x3_b1", "conv2d_nchw(N=1,C=512,H=7,W=7,K=512,R=3,S=3,pad=1)"},
      {"resnet_c64_h56_3x3_b16", "conv2d_nchw(N=16,C=64,H=56,W=56,K=64,R=3,S=3,pad=1)"},
      {"resnet_c128_h28_3x3_b16", "conv2d_nchw(N=16,C=128,H=28,W=28,K=128,R=3,S=3,pad=1)"},
      {"resnet_c256_h14_3x3_b16", "conv2d_nchw(N=16,C=256,H=14,W=14,K=256,R=3,S=3,pad=1)"},
      {"resnet_c512_h7_3x3_b16", "conv2d_nchw(N=16,C=512,H=7,W=7,K=512,R=3,S=3,pad=1)"},
      {"mbv2_dw_c144_h56", "depthwise_conv2d_nchw(N=1,C=144,H=56,W=56,R=3,S=3,pad=1)"},
      {"resnet_c64_h56_3x3_b16_fp16",
       "conv2d_nchw(N=16,C=64,H=56,W=56,K=64,R=3,S=3,pad=1,dtype=float16)"},
      {"resnet_c256_h14_3x3_b16_fp16",
       "conv2d_nchw(N=16,C=256,H=14,W=14,K=256,R=3,S=3,pad=1,dtype=float16)"},
      {"resnet_c256_h14_3x3_b16_tf32",
       "conv2d_nchw(N=16,C=256,H=14,W=14,K=256,R=3,S=3,pad=1,dtype=tf32)"},
      // Channels-last: both tensor-core tiles move 16 bytes at a time (cuDNN NHWC beside).
      {"resnet_c64_h56_3x3_b16_nhwc_fp16",
       "conv2d_nhwc(N=16,C=64,H=56,W=56,K=64,R=3,S=3,pad=1,dtype=float16)"},
      {"resnet_c256_h14_3x3_b16_nhwc_fp16",
       "conv2d_nhwc(N=16,C=256,H=14,W=14,K=256,R=3,S=3,pad=1,dtype=float16)"},
  };
  return anchors;
}

// Up to this many flops (every anchor but GEMM 4096) our kernels and the
// libraries are checked against the float64 interpreter; above it ours are
// checked against the default schedule's output (whose code generation the
// smaller anchors check) and the library against oneDNN or OpenBLAS on the CPU.
constexpr double kInterpretUpTo = 4e9;

int CpuThreads() { return std::max(1, int(std::thread::hardware_concurrency())); }

std::string Num(double v) { return std::isnan(v) ? "null" : absl::StrFormat("%.1f", v); }

// The fastest sample as JSON: its sketch and decisions (a tensor-core
// sketch's say mma.sync or wgmma), or null.
std::string Winner(const std::vector<schedule::Trace>& schedules, int best) {
  if (best <= 0) return "null";
  const schedule::Trace& s = schedules[size_t(best)];
  return absl::StrCat("{\"sketch_id\": ", s.sketch_id, ", \"decisions\": [",
                      absl::StrJoin(s.decisions, ", "), "]}");
}

// The GPU target `target_flag` names ("cuda": this machine's GPU), measurable
// here and with cuBLAS/cuDNN to compare with. Otherwise nullopt after one
// line on stderr, `*exit_code` 2 for a target that is no CUDA target, else 1.
std::optional<ir::Target> UsableCudaTarget(const std::string& target_flag,
                                           const v1::Capabilities& caps, int* exit_code) {
  *exit_code = 1;
  std::string spec = target_flag;
  if (spec == "cuda") {
    if (!caps.has_gpu()) {
      std::fprintf(stderr, "tunefarm-bench: kernels --target cuda: no GPU on this machine\n");
      return std::nullopt;
    }
    spec = runtime::LocalCudaTarget(caps);
  }
  absl::StatusOr<ir::Target> target = ir::Target::Parse(spec);
  if (!target.ok() || !target->is_gpu()) {
    std::fprintf(
        stderr, "tunefarm-bench: --target %s: %s\n", spec.c_str(),
        target.ok() ? "not a cuda target" : std::string(target.status().message()).c_str());
    *exit_code = 2;
    return std::nullopt;
  }
  if (absl::Status s = search::GpuLocalMeasurer::Check(*target); !s.ok()) {
    std::fprintf(stderr, "tunefarm-bench: kernels --target %s: %s\n", spec.c_str(),
                 std::string(s.message()).c_str());
    return std::nullopt;
  }
  if (!HaveCudaReferences()) {
    std::fprintf(stderr, "tunefarm-bench: this build has no cuBLAS/cuDNN to compare with\n");
    return std::nullopt;
  }
  return *std::move(target);
}

// Our kernels of one workload, as measured: the default schedule (first)
// and the samples, how many passed, and the fastest sample (re-timed).
struct GpuSampleResults {
  std::vector<schedule::Trace> schedules;  // [0] is the default schedule
  std::vector<search::MeasureResult> got;  // one per schedule
  int ok = 0, best_i = -1;                 // best_i: the fastest sample, -1 where none passed
  double best_s = NAN;                     // its re-timed seconds; NaN where none or it failed
  double median_compile_ms = NAN;          // over the schedules that built
};

// Measures the default schedule and `samples` random GPU schedules drawn
// with `seed` through `measurer`, then the fastest sample once more, as the
// library is timed. Adds the wrong results and a failed re-timing to `*wrong`.
GpuSampleResults MeasureGpuSamples(search::GpuLocalMeasurer& measurer, const search::Task& task,
                                   const ir::Target& target, int samples, uint64_t seed,
                                   const char* name, int* wrong) {
  GpuSampleResults r;
  std::mt19937_64 rng(seed);
  r.schedules = {schedule::DefaultSchedule(task.dag, target)};
  for (int s = 0; s < samples; ++s)
    r.schedules.push_back(search::space::RandomGpuSchedule(task.dag, target, rng));
  r.got = measurer.Measure(task, r.schedules);
  std::vector<double> compile_ms;
  for (size_t i = 0; i < r.got.size(); ++i) {
    if (r.got[i].status != search::MeasureResult::Status::kBuildError)
      compile_ms.push_back(r.got[i].compile_ms);
    if (r.got[i].status == search::MeasureResult::Status::kWrongResult) ++*wrong;
    if (r.got[i].status != search::MeasureResult::Status::kOk) continue;
    ++r.ok;
    if (i > 0 && (std::isnan(r.best_s) || r.got[i].seconds < r.best_s)) {
      r.best_s = r.got[i].seconds;
      r.best_i = int(i);
    }
  }
  // The fastest sample was picked by its own timing: it is timed once more,
  // as the library is, and that time is the one reported.
  if (r.best_i > 0) {
    std::vector<search::MeasureResult> again = measurer.Measure(task, {r.schedules[r.best_i]});
    r.best_s = again[0].status == search::MeasureResult::Status::kOk ? again[0].seconds : NAN;
    if (std::isnan(r.best_s)) {
      std::printf("%-26s sampled best re-timed: %s: %s\n", name,
                  search::StatusName(again[0].status), again[0].error.c_str());
      ++*wrong;
    }
  }
  std::sort(compile_ms.begin(), compile_ms.end());
  if (!compile_ms.empty()) r.median_compile_ms = compile_ms[compile_ms.size() / 2];
  return r;
}

// The library's run (cuBLAS, cuDNN) on the inputs the measurement used, and
// what its check said: `note` for the table, `error` (empty: none) where
// its output is wrong or unchecked.
struct GpuLibraryResult {
  absl::StatusOr<GpuReferenceRun> run;
  std::string note, error;
};

// Runs the library on `task` with inputs from `seed` and checks its output
// against the float64 interpreter, or above kInterpretUpTo against oneDNN or
// OpenBLAS on the CPU: a wrong library is no baseline. A wrong one gets a
// line and adds one to `*wrong`.
GpuLibraryResult RunCheckedGpuLibrary(const search::Task& task, uint64_t seed, const char* name,
                                      int* wrong) {
  const std::vector<std::vector<float>> inputs = ir::RandomInputs(task.dag, seed);
  GpuLibraryResult r{RunCudaReference(task.workload, inputs), "", ""};
  if (!r.run.ok()) {
    r.note = std::string(r.run.status().message());
    return r;
  }
  const GpuReferenceRun& lib = *r.run;
  double err = INFINITY;
  std::string against;
  if (task.flops <= kInterpretUpTo) {
    absl::StatusOr<std::vector<double>> want = ir::EvaluateReference(task.dag, inputs);
    if (want.ok()) {
      err = MaxRelError(lib.output.data(), lib.output.size(), *want);
      against = "float64 reference";
    }
  } else {
    std::optional<ReferenceRun> cpu = RunOneDnn(task.workload, inputs, CpuThreads());
    if (!cpu) cpu = RunOpenBlas(task.workload, inputs, CpuThreads());
    if (cpu) {
      err = MaxRelError(lib.output.data(), lib.output.size(), cpu->output);
      against = "CPU library";
    }
  }
  r.note = absl::StrFormat("%s, max rel. error %.1e against the %s", lib.library, err,
                           against.empty() ? "(none)" : against);
  const bool half = task.dag.tensors[size_t(task.dag.output)].float16;
  if (!(err <= (half ? HalfTolerance(task.dag.half) : 1e-3))) {
    r.error = absl::StrCat(lib.library, " output wrong or unchecked: ", r.note);
    std::printf("%-26s %s\n", name, r.error.c_str());
    ++*wrong;
  }
  return r;
}

// Anchor `a` on the GPU: our kernels measured, then the library; prints its
// table line and returns its JSON row. Adds the kernels that passed to
// `*checked`, and the failures to `*wrong`. nullopt, after a line, where
// the workload is no task for `target`.
std::optional<std::string> BenchGpuKernel(const Anchor& a, search::GpuLocalMeasurer& measurer,
                                          const ir::Target& target, int samples, uint64_t seed,
                                          int* checked, int* wrong) {
  absl::StatusOr<search::Task> task =
      search::Task::Make(*ir::ParseWorkloadSpec(a.spec), target, a.name);
  if (!task.ok()) {
    std::printf("%-26s %s\n", a.name, std::string(task.status().message()).c_str());
    return std::nullopt;
  }
  const GpuSampleResults s = MeasureGpuSamples(measurer, *task, target, samples, seed, a.name,
                                               wrong);
  *checked += s.ok;
  const search::MeasureResult& def = s.got[0];
  const double def_s = def.status == search::MeasureResult::Status::kOk ? def.seconds : NAN;
  if (std::isnan(def_s)) {
    std::printf("%-26s default schedule: %s: %s\n", a.name, search::StatusName(def.status),
                def.error.c_str());
  }
  const GpuLibraryResult lib = RunCheckedGpuLibrary(*task, seed, a.name, wrong);
  if (std::isnan(def_s)) ++*wrong;
  const double gf = task->flops * 1e-9;
  const double def_g = gf / def_s, smp_g = gf / s.best_s,
               lib_g = lib.run.ok() && lib.error.empty() ? gf / lib.run->seconds : NAN;
  std::printf("%-26s %9s %9s %9s %7s %7s %3d/%-3d %7.0f  %s\n", a.name, Num(def_g).c_str(),
              Num(smp_g).c_str(), Num(lib_g).c_str(),
              absl::StrFormat("%.2f", def_g / lib_g).c_str(),
              absl::StrFormat("%.2f", smp_g / lib_g).c_str(), s.ok, int(s.got.size()),
              s.median_compile_ms, lib.note.c_str());
  std::fflush(stdout);
  return absl::StrCat(
      "{\"workload\": \"", a.name, "\", \"spec\": \"", a.spec, "\", \"default_gflops\": ",
      Num(def_g), ", \"sampled_best_gflops\": ", Num(smp_g), ", \"samples\": ", samples,
      ", \"ok\": ", s.ok, ", \"sampled_best\": ", Winner(s.schedules, s.best_i),
      ", \"library_gflops\": ", Num(lib_g), ", \"library\": \"",
      lib.run.ok() ? lib.run->library : "", "\", \"library_error\": ",
      lib.error.empty() ? "null" : absl::StrCat("\"", lib.error, "\""), "}");
}

}  // namespace

int RunGpuKernelsBench(const std::string& target_flag, int samples, uint64_t seed,
                       const std::string& only, const std::string& json_path) {
  v1::Capabilities caps = runtime::DetectCapabilities();
  int exit_code = 1;
  const std::optional<ir::Target> target = UsableCudaTarget(target_flag, caps, &exit_code);
  if (!target) return exit_code;
  std::printf("target: %s   GPU: %s   driver: CUDA %s   samples: %d   seed: %llu\n",
              target->ToString().c_str(), caps.gpu_name().c_str(),
              caps.fingerprint().cuda_driver().c_str(), samples,
              static_cast<unsigned long long>(seed));
  std::printf("\n%-26s %9s %9s %9s %7s %7s %7s %7s  %s\n", "workload", "default", "sampled",
              "library", "def/lib", "smp/lib", "ok", "comp_ms", "library");
  search::GpuLocalMeasureOptions mo;
  mo.timeout_s = 5;
  mo.input_seed = seed;
  mo.max_interpreted_flops = kInterpretUpTo;
  search::GpuLocalMeasurer measurer(mo);
  std::vector<std::string> rows;
  int checked = 0, wrong = 0;
  for (const Anchor& a : Anchors()) {
    if (!Selected(a.name, only)) continue;
    std::optional<std::string> row =
        BenchGpuKernel(a, measurer, *target, samples, seed, &checked, &wrong);
    if (row) rows.push_back(*std::move(row));
  }
  std::printf("\n%d kernels checked against the reference and timed, %d wrong or failed "
              "(kernels, defaults, libraries)\n", checked, wrong);
  if (!json_path.empty()) {
    std::ofstream f(json_path);
    f << "{\"target\": \"" << target->ToString() << "\", \"gpu\": \"" << caps.gpu_name()
      << "\", \"rows\": [\n";
    for (size_t i = 0; i < rows.size(); ++i)
      f << "  " << rows[i] << (i + 1 < rows.size() ? ",\n" : "\n");
    f << "]}\n";
  }
  return wrong > 0 ? 1 : 0;
}

}  // namespace tunefarm::bench
