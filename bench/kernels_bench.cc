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

// What `kernels` was asked for on the command line.
struct KernelsOptions {
  int samples = 200;
  bool samples_given = false;  // --samples was given (the GPU bench has its own default)
  std::vector<int> thread_counts = {1, 2};
  std::string only, json_path, target_flag;
  uint64_t seed = 2026;
  std::optional<schedule::ConvTile> tile_override;  // --tile channels,rows,cols
};

// Reads `args` into `o`: 0, or 2 after a line on stderr naming an unknown
// argument. Bad values are read leniently (as atoi does).
int ParseKernelsArgs(const std::vector<std::string>& args, KernelsOptions* o) {
  for (size_t i = 0; i < args.size(); ++i) {
    auto value = [&]() { return i + 1 < args.size() ? args[++i] : std::string(); };
    if (args[i] == "--samples") {
      o->samples = std::atoi(value().c_str());
      o->samples_given = true;
    } else if (args[i] == "--target")
      o->target_flag = value();
    else if (args[i] == "--only")
      o->only = value();
    else if (args[i] == "--json")
      o->json_path = value();
    else if (args[i] == "--tile") {
      // channels,rows,cols for the hand-written convolution schedule
      std::vector<std::string> p = absl::StrSplit(value(), ',');
      if (p.size() == 3) {
        o->tile_override = schedule::ConvTile{std::atoll(p[0].c_str()), std::atoll(p[1].c_str()),
                                              std::atoll(p[2].c_str())};
      }
    } else if (args[i] == "--seed")
      o->seed = std::strtoull(value().c_str(), nullptr, 10);
    else if (args[i] == "--threads") {
      o->thread_counts.clear();
      for (absl::string_view t : absl::StrSplit(value(), ',')) {
        int n = 0;
        if (absl::SimpleAtoi(t, &n) && n > 0) o->thread_counts.push_back(n);
      }
    } else {
      std::fprintf(stderr, "tunefarm-bench: unknown argument %s\n", args[i].c_str());
      return 2;
    }
  }
  return 0;
}

// A workload's inputs, drawn from `rng` in [-1, 1), and the buffers our
// kernels run on: `ptrs` holds the inputs' buffers, then the output's.
struct KernelBuffers {
  std::vector<std::vector<float>> inputs;
  std::vector<std::unique_ptr<runtime::AlignedBuffer>> bufs;
  std::unique_ptr<runtime::AlignedBuffer> out;
  std::vector<void*> ptrs;
};

// Fills a KernelBuffers for `dag`, drawing the inputs in argument order.
KernelBuffers MakeBuffers(const ir::ComputeDAG& dag, std::mt19937_64& rng) {
  KernelBuffers k;
  for (size_t i = 0; i + 1 < dag.args.size(); ++i) {
    int64_t n = dag.NumElements(dag.args[i]);
    std::vector<float> v(n);
    std::uniform_real_distribution<float> d(-1, 1);
    for (float& x : v) x = d(rng);
    auto b = std::make_unique<runtime::AlignedBuffer>(n);
    std::copy(v.begin(), v.end(), b->data());
    k.ptrs.push_back(b->data());
    k.bufs.push_back(std::move(b));
    k.inputs.push_back(std::move(v));
  }
  k.out = std::make_unique<runtime::AlignedBuffer>(dag.NumElements(dag.output));
  k.ptrs.push_back(k.out->data());
  return k;
}

// Our kernels for one workload, compiled once and timed per thread count.
struct CompiledKernels {
  Candidate def;
  std::optional<Candidate> hand;  // the hand-written schedule (convolutions)
  std::vector<Candidate> sampled;
  double median_compile_ms = 0;  // over the default and the samples that built
};

// Compiles the default schedule, the hand-written one (convolutions) and
// o.samples random ones drawn from `rng`, in that order. nullopt, after a
// line saying why, where the default schedule does not build.
std::optional<CompiledKernels> CompileKernels(const Anchor& a, const ir::CanonicalWorkload& cw,
                                              const ir::ComputeDAG& dag, const ir::Target& target,
                                              const KernelsOptions& o, const KernelBuffers& b,
                                              std::mt19937_64& rng) {
  auto def = Build(dag, schedule::DefaultSchedule(dag, target), target, b.inputs, b.ptrs);
  if (!def.ok()) {
    std::printf("%-28s default schedule failed: %s\n", a.name,
                std::string(def.status().message()).c_str());
    return std::nullopt;
  }
  CompiledKernels k{*std::move(def), std::nullopt, {}, 0};
  std::vector<double> compile_ms = {k.def.compile_ms};
  // The hand-written schedule (convolutions): what the space can express.
  if (cw.workload.op() == v1::OP_KIND_CONV2D) {
    schedule::ConvTile tile =
        o.tile_override ? *o.tile_override : schedule::PickConvTile(dag, target);
    auto hs = schedule::HandwrittenConv2dSchedule(dag, target, tile);
    auto hc = hs.ok() ? Build(dag, *hs, target, b.inputs, b.ptrs)
                      : absl::StatusOr<Candidate>(hs.status());
    if (hc.ok()) {
      k.hand = *std::move(hc);
    } else {
      std::printf("%-28s hand-written schedule failed: %s\n", a.name,
                  std::string(hc.status().message()).c_str());
    }
  }
  for (int s = 0; s < o.samples; ++s) {
    schedule::Trace sched = search::space::RandomSchedule(dag, target, rng);
    auto c = Build(dag, sched, target, b.inputs, b.ptrs);
    if (c.ok()) {
      compile_ms.push_back(c->compile_ms);
      k.sampled.push_back(*std::move(c));
    }
  }
  std::sort(compile_ms.begin(), compile_ms.end());
  k.median_compile_ms = compile_ms[compile_ms.size() / 2];
  return k;
}

// One workload ready to time: its kernels, their buffers and the float64
// reference's output (as float) that every output is checked against.
struct KernelCase {
  const Anchor& anchor;
  const v1::Workload& w;
  double flops;
  KernelBuffers& buffers;
  const CompiledKernels& kernels;
  std::vector<float> want;
};

// Reports an output off the reference: `who` and its error.
using WrongFn = std::function<void(const std::string& who, double err)>;
// Runs a candidate on the output filled with NaN first; its error.
using CheckFn = std::function<double(const Candidate&)>;

// oneDNN's and OpenBLAS's runs at `threads` (nullopt where they do not
// cover the op); one whose output is off the reference is reported through
// `wrong` and dropped.
void RunCheckedLibraries(const KernelCase& k, int threads, const WrongFn& wrong,
                         std::optional<ReferenceRun>* dnn, std::optional<ReferenceRun>* blas) {
  *dnn = RunOneDnn(k.w, k.buffers.inputs, threads);
  *blas = RunOpenBlas(k.w, k.buffers.inputs, threads);
  for (auto [lib, name] : {std::pair{dnn, "oneDNN"}, std::pair{blas, "OpenBLAS"}}) {
    if (!*lib) continue;
    double err = MaxRelError((*lib)->output.data(), (*lib)->output.size(), k.want);
    if (err > 1e-3) {
      wrong(name, err);
      lib->reset();
    }
  }
}

// The sample's reported time at `threads`: one quick timing each, the best
// few checked and timed properly; the fastest of those is timed once more,
// exactly as the references are. NaN where none of the best few is right.
double TimeBestSample(const KernelCase& k, int threads, double def_s, runtime::ThreadPool& pool,
                      const CheckFn& check) {
  const std::vector<Candidate>& sampled = k.kernels.sampled;
  auto run = [&](const Candidate& c) { c.lib->Run(c.ptrs.data(), pool); };
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
                  "dropped)\n", k.anchor.name, quick[i].second, err);
      continue;
    }
    double t = TimeIt([&] { run(c); });
    if (t < best_sel) best_sel = t, best = quick[i].second;
  }
  return best >= 0 ? TimeIt([&] { run(sampled[best]); }) : NAN;
}

// Seconds per run of each candidate and library at one thread count; NaN
// where there is none or its output was wrong.
struct KernelTimes {
  double def_s = NAN, best_s = NAN, hand_s = NAN, dnn_s = NAN, blas_s = NAN;
};

// Prints the table line of `t` and returns its JSON row.
std::string ReportKernelRow(const KernelCase& k, int threads, const KernelTimes& t, double peak,
                            const std::vector<std::string>& errors) {
  const char* name = k.anchor.name;
  double gf = k.flops * 1e-9;
  double hand_g = gf / t.hand_s;
  double def_g = gf / t.def_s, smp_g = gf / t.best_s;
  double dnn_g = gf / t.dnn_s, blas_g = gf / t.blas_s;
  double best_g = 0;
  for (double g : {def_g, smp_g, hand_g})
    if (!std::isnan(g)) best_g = std::max(best_g, g);
  const double median_compile = k.kernels.median_compile_ms;
  std::printf("%-28s %3d %9s %9s %9s %9s %9s %7s %7s %7s %8.1f%% %8.1f%s\n", name, threads,
              Num(def_g).c_str(), Num(smp_g).c_str(), Num(hand_g).c_str(), Num(dnn_g).c_str(),
              Num(blas_g).c_str(), Num(def_g / dnn_g).c_str(), Num(smp_g / dnn_g).c_str(),
              Num(hand_g / dnn_g).c_str(), 100 * best_g / peak, median_compile,
              errors.empty() ? "" : "  WRONG (see above)");
  std::fflush(stdout);
  std::string errors_json;
  for (const std::string& e : errors) {
    absl::StrAppend(&errors_json, errors_json.empty() ? "" : ", ", "\"", e, "\"");
  }
  return absl::StrCat(
      "{\"workload\": \"", name, "\", \"spec\": \"", k.anchor.spec, "\", \"threads\": ", threads,
      ", \"default_gflops\": ", Num(def_g), ", \"sampled_best_gflops\": ", Num(smp_g),
      ", \"samples\": ", k.kernels.sampled.size(), ", \"onednn_gflops\": ", Num(dnn_g),
      ", \"openblas_gflops\": ", Num(blas_g), ", \"handwritten_gflops\": ", Num(hand_g),
      ", \"peak_gflops\": ", Num(peak), ", \"compile_ms_median\": ", Num(median_compile),
      ", \"errors\": [", errors_json, "]}");
}

// One row at `threads`: the libraries, the default, the sample and the
// hand-written schedule, each checked against the reference and then timed,
// in that order. Prints the line, returns the JSON row; sets *failed where
// an output was wrong.
std::string MeasureKernelRow(KernelCase& k, int threads, double peak, bool* failed) {
  runtime::ThreadPool pool(threads);
  std::vector<std::string> errors;
  auto wrong = [&](const std::string& who, double err) {
    errors.push_back(absl::StrFormat("%s: max relative error %g against the float64 reference",
                                     who, err));
    std::printf("%-28s %d thr: %s\n", k.anchor.name, threads, errors.back().c_str());
  };
  KernelTimes t;
  std::optional<ReferenceRun> dnn, blas;
  RunCheckedLibraries(k, threads, wrong, &dnn, &blas);
  if (dnn) t.dnn_s = dnn->seconds;
  if (blas) t.blas_s = blas->seconds;
  auto run = [&](const Candidate& c) { c.lib->Run(c.ptrs.data(), pool); };
  // Every candidate starts from a NaN-filled output, so one that writes
  // nothing cannot pass on an earlier kernel's result.
  float* out = k.buffers.out->data();
  const int64_t n_out = k.buffers.out->size();
  auto check = [&](const Candidate& c) {
    std::fill(out, out + n_out, std::nanf(""));
    run(c);
    return MaxRelError(out, size_t(n_out), k.want);
  };
  if (double err = check(k.kernels.def); err > 1e-3) {
    wrong("default schedule", err);
  } else {
    t.def_s = TimeIt([&] { run(k.kernels.def); });
  }
  t.best_s = TimeBestSample(k, threads, t.def_s, pool, check);
  if (k.kernels.hand) {
    if (double err = check(*k.kernels.hand); err > 1e-3) {
      wrong("hand-written schedule", err);
    } else {
      t.hand_s = TimeIt([&] { run(*k.kernels.hand); });
    }
  }
  if (!errors.empty()) *failed = true;
  return ReportKernelRow(k, threads, t, peak, errors);
}

// Compiles and measures anchor `a` at every thread count of `o`, appending
// its JSON rows to `rows`. True where an output was wrong or had no reference.
bool BenchKernelWorkload(const Anchor& a, const KernelsOptions& o, const ir::Target& target,
                         const std::map<int, double>& peak, std::vector<std::string>* rows) {
  v1::Workload w = *ir::ParseWorkloadSpec(a.spec);
  ir::CanonicalWorkload cw = *ir::Canonicalize(w);
  ir::ComputeDAG dag = *ir::BuildComputeDAG(w);
  std::mt19937_64 rng(o.seed);
  KernelBuffers buffers = MakeBuffers(dag, rng);
  std::optional<CompiledKernels> kernels = CompileKernels(a, cw, dag, target, o, buffers, rng);
  if (!kernels) return false;
  // One reference for every output of this workload: the float64
  // interpreter. oneDNN, OpenBLAS and each of our kernels are checked
  // against it; a wrong one is reported as null with the reason.
  absl::StatusOr<std::vector<double>> ref64 = ir::EvaluateReference(dag, buffers.inputs);
  if (!ref64.ok()) {
    std::printf("%-28s no reference: %s\n", a.name, std::string(ref64.status().message()).c_str());
    return true;
  }
  KernelCase k{a, w, cw.flops, buffers, *kernels, std::vector<float>(ref64->begin(), ref64->end())};
  bool failed = false;
  for (int threads : o.thread_counts)
    rows->push_back(MeasureKernelRow(k, threads, peak.at(threads), &failed));
  return failed;
}

// Writes the rows as {"target": ..., "rows": [...]} to `path`.
void WriteKernelsJson(const std::string& path, const ir::Target& target,
                      const std::vector<std::string>& rows) {
  std::ofstream f(path);
  f << "{\"target\": \"" << target.ToString() << "\", \"rows\": [\n";
  for (size_t i = 0; i < rows.size(); ++i)
    f << "  " << rows[i] << (i + 1 < rows.size() ? ",\n" : "\n");
  f << "]}\n";
}

}  // namespace

int RunGpuKernelsBench(const std::string& target_flag, int samples, uint64_t seed,
                       const std::string& only, const std::string& json_path);

int RunKernelsBench(const std::vector<std::string>& args) {
  KernelsOptions o;
  if (int rc = ParseKernelsArgs(args, &o); rc != 0) return rc;
  if (o.target_flag.rfind("cuda", 0) == 0) {
    // NVRTC builds and GPU timings: 32 samples keep the run within minutes.
    return RunGpuKernelsBench(o.target_flag, o.samples_given ? o.samples : 32, o.seed, o.only,
                              o.json_path);
  }
  if (!o.target_flag.empty() && o.target_flag != "host") {
    std::fprintf(stderr, "tunefarm-bench: kernels --target takes host or cuda[ -arch=sm_XX]\n");
    return 2;
  }
  ir::Target target = codegen::HostTarget();
  std::printf("target: %s   samples: %d   seed: %llu\n", target.ToString().c_str(), o.samples,
              static_cast<unsigned long long>(o.seed));
  std::map<int, double> peak;
  for (int t : o.thread_counts) {
    peak[t] = MeasurePeakGflops(t);
    std::printf("measured FMA peak, %d thread(s): %.1f GFLOP/s\n", t, peak[t]);
  }
  std::printf("\n%-28s %3s %9s %9s %9s %9s %9s %7s %7s %7s %9s %8s\n", "workload", "thr", "default",
              "sampled", "handwrit", "onednn", "openblas", "def/dn", "smp/dn", "hw/dn", "%peak",
              "comp_ms");
  std::vector<std::string> rows;
  bool failures = false;  // a wrong kernel or library output: exit 1
  for (const Anchor& a : KernelAnchors()) {
    if (!Selected(a.name, o.only)) continue;
    if (BenchKernelWorkload(a, o, target, peak, &rows)) failures = true;
  }
  if (!o.json_path.empty()) WriteKernelsJson(o.json_path, target, rows);
  if (failures) {
    std::fprintf(stderr, "tunefarm-bench: a kernel or library gave a wrong result (above)\n");
    return 1;
  }
  return 0;
}

}  // namespace tunefarm::bench
