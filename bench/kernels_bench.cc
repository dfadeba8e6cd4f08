// tunefarm-bench kernels: GFLOP/s of the default schedule and of the best of
// a seeded random sample from the schedule space, beside oneDNN and OpenBLAS
// measured in the same run, on the anchor workloads. Every kernel and library
// whose time is reported is first checked against the float64 reference (its
// output NaN-filled before each run); a wrong one is reported as null with
// its error, and the bench exits 1. Every reported time is the same
// statistic: the median of one TimeIt.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <optional>
#include <random>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "bench/anchors.h"
#include "bench/references.h"
#include "compiler/codegen/build.h"
#include "compiler/codegen/llvm_target.h"
#include "compiler/ir/compute.h"
#include "compiler/schedule/handwritten.h"
#include "search/space/random_schedule.h"
#include "compiler/ir/reference.h"
#include "compiler/schedule/schedule.h"
#include "compiler/ir/workload.h"
#include "compiler/ir/workload_spec.h"
#include "device_agent/runtime/runner.h"
#include "proto/kernel_signature.h"

namespace tunefarm::bench {
namespace {

namespace v1 = ::tunefarm::v1;

struct Candidate {
  std::unique_ptr<runtime::KernelLibrary> lib;
  double compile_ms = 0;
  // The kernel's arguments: the shared buffers, except weights the schedule
  // repacked (layout_pack), which are packed once here, like a deployment does.
  std::vector<void*> ptrs;
  std::vector<std::unique_ptr<runtime::AlignedBuffer>> packed;
};

absl::StatusOr<Candidate> Build(const ir::ComputeDAG& dag, const schedule::Trace& s,
                                const ir::Target& target,
                                const std::vector<std::vector<float>>& inputs,
                                const std::vector<void*>& ptrs) {
  absl::StatusOr<codegen::Artifact> art = codegen::Build(dag, target, s);
  if (!art.ok()) return art.status();
  Candidate c;
  c.compile_ms = art->seconds * 1e3;
  c.ptrs = ptrs;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const v1::KernelArgument& a = art->signature.args(int(i));
    if (a.pack_block_size() == 0) continue;
    std::vector<float> p = PackArgument(a, inputs[i]);
    auto buf = std::make_unique<runtime::AlignedBuffer>(int64_t(p.size()));
    std::copy(p.begin(), p.end(), buf->data());
    c.ptrs[i] = buf->data();
    c.packed.push_back(std::move(buf));
  }
  absl::StatusOr<std::unique_ptr<runtime::KernelLibrary>> lib =
      runtime::KernelLibrary::Load(art->bytes);
  if (!lib.ok()) return lib.status();
  c.lib = *std::move(lib);
  return c;
}

// Runs the kernel once in a forked child; true if it finished within `limit_s`.
bool RunsWithin(const Candidate& c, int threads, double limit_s) {
  pid_t pid = fork();
  if (pid == 0) {
    runtime::ThreadPool pool(threads);  // the parent's pool threads do not exist here
    c.lib->Run(c.ptrs.data(), pool);
    _exit(0);
  }
  if (pid < 0) return false;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(limit_s);
  int status = 0;
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return false;
    }
    usleep(1000);
  }
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

std::string Num(double v) { return std::isnan(v) ? "null" : absl::StrFormat("%.2f", v); }

}  // namespace

int RunGpuKernelsBench(const std::string& target_flag, int samples, uint64_t seed,
                       const std::string& only, const std::string& json_path);

int RunKernelsBench(const std::vector<std::string>& args) {
  int samples = 200;
  std::vector<int> thread_counts = {1, 2};
  std::string only, json_path;
  uint64_t seed = 2026;
  std::optional<schedule::ConvTile> tile_override;
  std::string target_flag;
  bool samples_given = false;
  for (size_t i = 0; i < args.size(); ++i) {
    auto value = [&]() { return i + 1 < args.size() ? args[++i] : std::string(); };
    if (args[i] == "--samples") {
      samples = std::atoi(value().c_str());
      samples_given = true;
    } else if (args[i] == "--target")
      target_flag = value();
    else if (args[i] == "--only")
      only = value();
    else if (args[i] == "--json")
      json_path = value();
    else if (args[i] == "--tile") {
      // channels,rows,cols for the hand-written convolution schedule
      std::vector<std::string> p = absl::StrSplit(value(), ',');
      if (p.size() == 3) {
        tile_override = schedule::ConvTile{std::atoll(p[0].c_str()), std::atoll(p[1].c_str()),
                                     std::atoll(p[2].c_str())};
      }
    } else if (args[i] == "--seed")
      seed = std::strtoull(value().c_str(), nullptr, 10);
    else if (args[i] == "--threads") {
      thread_counts.clear();
      for (absl::string_view t : absl::StrSplit(value(), ',')) {
        int n = 0;
        if (absl::SimpleAtoi(t, &n) && n > 0) thread_counts.push_back(n);
      }
    } else {
      std::fprintf(stderr, "tunefarm-bench: unknown argument %s\n", args[i].c_str());
      return 2;
    }
  }
  if (target_flag.rfind("cuda", 0) == 0) {
    // NVRTC builds and GPU timings: 32 samples keep the run within minutes.
    return RunGpuKernelsBench(target_flag, samples_given ? samples : 32, seed, only, json_path);
  }
  if (!target_flag.empty() && target_flag != "host") {
    std::fprintf(stderr, "tunefarm-bench: kernels --target takes host or cuda[ -arch=sm_XX]\n");
    return 2;
  }
  ir::Target target = codegen::HostTarget();
  std::printf("target: %s   samples: %d   seed: %llu\n", target.ToString().c_str(), samples,
              static_cast<unsigned long long>(seed));
  std::map<int, double> peak;
  for (int t : thread_counts) {
    peak[t] = MeasurePeakGflops(t);
    std::printf("measured FMA peak, %d thread(s): %.1f GFLOP/s\n", t, peak[t]);
  }
  std::printf("\n%-28s %3s %9s %9s %9s %9s %9s %7s %7s %7s %9s %8s\n", "workload", "thr", "default",
              "sampled", "handwrit", "onednn", "openblas", "def/dn", "smp/dn", "hw/dn", "%peak",
              "comp_ms");
  std::vector<std::string> rows;
  bool failures = false;  // a wrong kernel or library output: exit 1
  for (const Anchor& a : KernelAnchors()) {
    if (!Selected(a.name, only)) continue;
    v1::Workload w = *ir::ParseWorkloadSpec(a.spec);
    ir::CanonicalWorkload cw = *ir::Canonicalize(w);
    ir::ComputeDAG dag = *ir::BuildComputeDAG(w);
    std::mt19937_64 rng(seed);
    std::vector<std::vector<float>> inputs;
    std::vector<std::unique_ptr<runtime::AlignedBuffer>> bufs;
    std::vector<void*> ptrs;
    for (size_t i = 0; i + 1 < dag.args.size(); ++i) {
      int64_t n = dag.NumElements(dag.args[i]);
      std::vector<float> v(n);
      std::uniform_real_distribution<float> d(-1, 1);
      for (float& x : v) x = d(rng);
      auto b = std::make_unique<runtime::AlignedBuffer>(n);
      std::copy(v.begin(), v.end(), b->data());
      ptrs.push_back(b->data());
      bufs.push_back(std::move(b));
      inputs.push_back(std::move(v));
    }
    runtime::AlignedBuffer out(dag.NumElements(dag.output));
    ptrs.push_back(out.data());

    // Default schedule and the sample, compiled once, timed per thread count.
    auto def = Build(dag, schedule::DefaultSchedule(dag, target), target, inputs, ptrs);
    if (!def.ok()) {
      std::printf("%-28s default schedule failed: %s\n", a.name,
                  std::string(def.status().message()).c_str());
      continue;
    }
    std::vector<double> compile_ms = {def->compile_ms};
    // The hand-written schedule (convolutions): what the space can express.
    std::optional<Candidate> hand;
    if (cw.workload.op() == v1::OP_KIND_CONV2D) {
      schedule::ConvTile tile = tile_override ? *tile_override : schedule::PickConvTile(dag, target);
      auto hs = schedule::HandwrittenConv2dSchedule(dag, target, tile);
      auto hc =
          hs.ok() ? Build(dag, *hs, target, inputs, ptrs) : absl::StatusOr<Candidate>(hs.status());
      if (hc.ok()) {
        hand = *std::move(hc);
      } else {
        std::printf("%-28s hand-written schedule failed: %s\n", a.name,
                    std::string(hc.status().message()).c_str());
      }
    }
    std::vector<Candidate> sampled;
    for (int s = 0; s < samples; ++s) {
      schedule::Trace sched = search::space::RandomSchedule(dag, target, rng);
      auto c = Build(dag, sched, target, inputs, ptrs);
      if (c.ok()) {
        compile_ms.push_back(c->compile_ms);
        sampled.push_back(*std::move(c));
      }
    }
    std::sort(compile_ms.begin(), compile_ms.end());
    double median_compile = compile_ms[compile_ms.size() / 2];

    // One reference for every output of this workload: the float64
    // interpreter. oneDNN, OpenBLAS and each of our kernels are checked
    // against it; a wrong one is reported as null with the reason.
    absl::StatusOr<std::vector<double>> ref64 = ir::EvaluateReference(dag, inputs);
    if (!ref64.ok()) {
      std::printf("%-28s no reference: %s\n", a.name, std::string(ref64.status().message()).c_str());
      failures = true;
      continue;
    }
    const std::vector<float> want(ref64->begin(), ref64->end());
    const int64_t n_out = dag.NumElements(dag.output);
    for (int threads : thread_counts) {
      runtime::ThreadPool pool(threads);
      std::vector<std::string> errors;
      auto wrong = [&](const std::string& who, double err) {
        errors.push_back(absl::StrFormat("%s: max relative error %g against the float64 reference",
                                         who, err));
        std::printf("%-28s %d thr: %s\n", a.name, threads, errors.back().c_str());
      };
      std::optional<ReferenceRun> dnn = RunOneDnn(w, inputs, threads);
      std::optional<ReferenceRun> blas = RunOpenBlas(w, inputs, threads);
      for (auto [lib, name] : {std::pair{&dnn, "oneDNN"}, std::pair{&blas, "OpenBLAS"}}) {
        if (!*lib) continue;
        double err = MaxRelError((*lib)->output.data(), (*lib)->output.size(), want);
        if (err > 1e-3) {
          wrong(name, err);
          lib->reset();
        }
      }
      auto run = [&](const Candidate& c) { c.lib->Run(c.ptrs.data(), pool); };
      // Every candidate starts from a NaN-filled output, so one that writes
      // nothing cannot pass on an earlier kernel's result.
      auto check = [&](const Candidate& c) {
        std::fill(out.data(), out.data() + n_out, std::nanf(""));
        run(c);
        return MaxRelError(out.data(), size_t(n_out), want);
      };
      double def_s = NAN;
      if (double err = check(*def); err > 1e-3) {
        wrong("default schedule", err);
      } else {
        def_s = TimeIt([&] { run(*def); });
      }
      // The sample: one quick timing each, the best few checked and timed
      // properly; the fastest of those is timed once more, exactly as the
      // references are, and that time is the one reported.
      std::vector<std::pair<double, int>> quick;
      const double limit = std::max(0.2, 4 * (std::isnan(def_s) ? 0.05 : def_s));
      for (size_t i = 0; i < sampled.size(); ++i) {
        // One run in a child process with a deadline first: random schedules
        // can be very slow (a parallel loop deep inside serial ones), and such
        // a candidate is not worth timing properly.
        double t = RunsWithin(sampled[i], threads, limit) ? TimeIt([&] { run(sampled[i]); }, 5, 1)
                                                          : INFINITY;
        quick.emplace_back(t, int(i));
      }
      std::sort(quick.begin(), quick.end());
      int best = -1;
      double best_sel = INFINITY;
      for (size_t i = 0; i < std::min<size_t>(3, quick.size()); ++i) {
        const Candidate& c = sampled[quick[i].second];
        if (double err = check(c); err > 1e-3) {
          std::printf("%-28s sampled schedule %d gave a wrong result (max relative error %g; "
                      "dropped)\n", a.name, quick[i].second, err);
          continue;
        }
        double t = TimeIt([&] { run(c); });
        if (t < best_sel) best_sel = t, best = quick[i].second;
      }
      const double best_s = best >= 0 ? TimeIt([&] { run(sampled[best]); }) : NAN;
      double hand_s = NAN;
      if (hand) {
        if (double err = check(*hand); err > 1e-3) {
          wrong("hand-written schedule", err);
        } else {
          hand_s = TimeIt([&] { run(*hand); });
        }
      }
      if (!errors.empty()) failures = true;
      double gf = cw.flops * 1e-9;
      double hand_g = gf / hand_s;
      double def_g = gf / def_s, smp_g = gf / best_s;
      double dnn_g = dnn ? gf / dnn->seconds : NAN, blas_g = blas ? gf / blas->seconds : NAN;
      double best_g = 0;
      for (double g : {def_g, smp_g, hand_g})
        if (!std::isnan(g)) best_g = std::max(best_g, g);
      std::printf("%-28s %3d %9s %9s %9s %9s %9s %7s %7s %7s %8.1f%% %8.1f%s\n", a.name, threads,
                  Num(def_g).c_str(), Num(smp_g).c_str(), Num(hand_g).c_str(), Num(dnn_g).c_str(),
                  Num(blas_g).c_str(), Num(def_g / dnn_g).c_str(), Num(smp_g / dnn_g).c_str(),
                  Num(hand_g / dnn_g).c_str(), 100 * best_g / peak[threads], median_compile,
                  errors.empty() ? "" : "  WRONG (see above)");
      std::fflush(stdout);
      std::string errors_json;
      for (const std::string& e : errors) {
        absl::StrAppend(&errors_json, errors_json.empty() ? "" : ", ", "\"", e, "\"");
      }
      rows.push_back(absl::StrCat(
          "{\"workload\": \"", a.name, "\", \"spec\": \"", a.spec, "\", \"threads\": ", threads,
          ", \"default_gflops\": ", Num(def_g), ", \"sampled_best_gflops\": ", Num(smp_g),
          ", \"samples\": ", sampled.size(), ", \"onednn_gflops\": ", Num(dnn_g),
          ", \"openblas_gflops\": ", Num(blas_g), ", \"handwritten_gflops\": ", Num(hand_g),
          ", \"peak_gflops\": ", Num(peak[threads]),
          ", \"compile_ms_median\": ", Num(median_compile), ", \"errors\": [", errors_json, "]}"));
    }
  }
  if (!json_path.empty()) {
    std::ofstream f(json_path);
    f << "{\"target\": \"" << target.ToString() << "\", \"rows\": [\n";
    for (size_t i = 0; i < rows.size(); ++i)
      f << "  " << rows[i] << (i + 1 < rows.size() ? ",\n" : "\n");
    f << "]}\n";
  }
  if (failures) {
    std::fprintf(stderr, "tunefarm-bench: a kernel or library gave a wrong result (above)\n");
    return 1;
  }
  return 0;
}

}  // namespace tunefarm::bench
