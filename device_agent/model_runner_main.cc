// tunefarm-model-runner: the process every whole-model measurement execs
// (model_run.h): an agent's model runs, `tunefarm run` here, a build's
// paired A/B timings. It reads the request from fd 3, limits its own address
// space, loads the package (and the paired one) with the graph runtime,
// runs each once untimed (the outputs, and the paired check, come from that
// run), times the runs (runtime::TimeModel or TimeModelsPaired) and writes
// a ModelRunResult to fd 4. A kernel that crashes or hangs takes only this
// process down. A CUDA package runs on device 0, confined as the GPU runner
// is (confine.h: the driver started before the filter). Not meant to be run
// by hand.
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "device_agent/runtime/child_exec.h"
#include "device_agent/runtime/confine.h"
#include "device_agent/runtime/cuda_driver.h"
#include "device_agent/runtime/graph_runtime.h"
#include "device_agent/runtime/model_run.h"
#include "device_agent/runtime/model_timing.h"
#include "device_agent/runtime/runner.h"
#include "device_agent/runtime/sandbox_wire.h"

namespace {

namespace v1 = tunefarm::v1;
namespace runtime = tunefarm::runtime;
using runtime::GraphRuntime;

int Report(const v1::ModelRunResult& r) {
  const std::string bytes = r.SerializeAsString();
  return runtime::wire::WriteAll(runtime::kChildReportFd, bytes.data(), bytes.size()) ? 0 : 1;
}

int Fail(v1::MeasureStatus status, const std::string& error) {
  v1::ModelRunResult r;
  r.set_status(status);
  r.set_error(error);
  return Report(r);
}

double Now() { return runtime::MonotonicSeconds(); }

// The request on fd 3: its header and message, or the error to report.
std::string ReadRequest(runtime::ModelRunWireHeader* h, v1::ModelRunRequest* req) {
  struct stat st {};
  if (fstat(runtime::kChildRequestFd, &st) != 0 ||
      st.st_size < int64_t(sizeof(runtime::ModelRunWireHeader))) {
    return "model runner: no request on fd 3";
  }
  const size_t size = size_t(st.st_size);
  void* map = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, runtime::kChildRequestFd, 0);
  if (map == MAP_FAILED) return "cannot map the request";
  std::memcpy(h, map, sizeof(*h));
  std::string error;
  if (h->magic != runtime::kModelRunMagic) {
    error = "model request from another tunefarm build";
  } else if (h->request_bytes < 0 || size_t(h->request_bytes) > size - sizeof(*h) ||
             !req->ParseFromArray(static_cast<const char*>(map) + sizeof(*h),
                                  int(h->request_bytes))) {
    error = "model runner: truncated request";
  }
  munmap(map, size);
  return error;
}

std::string ShapeText(const std::vector<int64_t>& shape) {
  return shape.empty() ? std::string("a scalar") : absl::StrJoin(shape, "x");
}

// The run's inputs: seeded as `tunefarm run --seed` makes them, then those
// the request gives by name, each checked against the model's input.
absl::StatusOr<runtime::ModelInputs> InputsOf(const GraphRuntime& rt,
                                              const v1::ModelRunRequest& req) {
  runtime::ModelInputs inputs = rt.SeededInputs(req.input_seed());
  for (const v1::PackageTensor& t : req.inputs()) {
    auto it = inputs.find(t.name());
    if (it == inputs.end())
      return absl::InvalidArgumentError(absl::StrCat("'", t.name(), "' is not an input of the model"));
    const std::vector<int64_t> want = rt.Shape(t.name());
    const std::vector<int64_t> given(t.shape().begin(), t.shape().end());
    if (given != want || t.f32().size() != it->second.size() * 4) {
      return absl::InvalidArgumentError(absl::StrCat("input '", t.name(), "' needs shape ",
                                                     ShapeText(want), " (given ",
                                                     ShapeText(given), ")"));
    }
    std::memcpy(it->second.data(), t.f32().data(), t.f32().size());
  }
  return inputs;
}

void AddOutputs(const GraphRuntime& rt, std::map<std::string, std::vector<float>>& outputs,
                v1::ModelRunResult* result) {
  for (const std::string& name : rt.package().outputs()) {
    v1::PackageTensor* t = result->add_outputs();
    t->set_name(name);
    for (int64_t d : rt.Shape(name)) t->add_shape(d);
    const std::vector<float>& v = outputs[name];
    t->set_f32(std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4));
  }
}

// The packages of the request, loaded confined (confine.h) on one thread
// pool: the package's code runs from the load on. A CUDA package's modules
// are loaded by the driver, started (context, threads) before the filter.
struct Loaded {
  std::unique_ptr<runtime::ThreadPool> pool;
  std::unique_ptr<GraphRuntime> a, b;  // b: the paired package, if any
};

// Returns -1 once the package (and the paired one) are loaded, else the
// exit code after the failure was reported.
int LoadConfined(v1::ModelRunRequest& req, const runtime::ModelRunWireHeader& h, int threads,
                 Loaded* loaded) {
  std::vector<v1::ModelPackage> pkgs;
  for (std::string* bytes : {req.mutable_package(), req.mutable_paired_package()}) {
    if (bytes == req.mutable_paired_package() && bytes->empty()) break;
    absl::StatusOr<v1::ModelPackage> pkg = GraphRuntime::ParsePackage(
        *bytes, pkgs.empty() ? "the package sent" : "the paired package sent");
    if (!pkg.ok())
      return Fail(v1::MEASURE_STATUS_UPLOAD_ERROR, std::string(pkg.status().message()));
    bytes->clear();
    pkgs.push_back(*std::move(pkg));
  }
  const bool cuda = absl::StartsWith(pkgs[0].target(), "cuda");
  if (pkgs.size() == 2 && cuda != absl::StartsWith(pkgs[1].target(), "cuda"))
    return Fail(v1::MEASURE_STATUS_RUNTIME_ERROR, "a paired run needs two builds for one device");
  // The CUDA driver reserves address space far beyond what it uses, so a
  // GPU run has no address-space limit (the time limit still holds); the
  // host copies it makes (arena, constants) are held to the limit instead.
  if (!cuda) runtime::LimitAddressSpace(h.memory_limit_bytes);
  if (cuda && h.memory_limit_bytes > 0) {
    int64_t host = 0;
    for (const v1::ModelPackage& pkg : pkgs) {
      host += pkg.arena_bytes();
      for (const v1::PackageTensor& c : pkg.constants())
        host += int64_t(c.f32().size() + 2 * c.f16().size());  // held as floats
    }
    if (host > h.memory_limit_bytes) {
      return Fail(v1::MEASURE_STATUS_RUNTIME_ERROR,
                  absl::StrCat("the package's arena and constants take ", host,
                               " bytes of host memory, the board allows ", h.memory_limit_bytes));
    }
  }
  runtime::ConfineOptions confine;
  confine.start_threads = [&] { loaded->pool = std::make_unique<runtime::ThreadPool>(threads); };
  absl::StatusOr<const runtime::CudaDriver*> driver = nullptr;
  std::vector<int> first_file;  // per package, its first kernel's index in confine.files
  if (cuda) {
    runtime::PrepareGpuConfinement(&confine, &driver);
  } else {
    for (size_t p = 0; p < pkgs.size(); ++p) {
      first_file.push_back(int(confine.files.size()));
      for (int k = 0; k < pkgs[p].kernels_size(); ++k) {
        confine.files.push_back({absl::StrCat(p == 0 ? "" : "b-", "kernel-", k, ".so"),
                                 std::move(*pkgs[p].mutable_kernels(k)->mutable_shared_object())});
      }
    }
  }
  confine.cpu_limit_s = h.cpu_limit_s;
  confine.filter_optional = h.filter_optional != 0;
  absl::StatusOr<runtime::Confined> confined = runtime::Confine(confine);
  if (!confined.ok()) {
    return Fail(v1::MEASURE_STATUS_RUNTIME_ERROR,
                absl::StrCat("sandbox: ", confined.status().message()));
  }
  if (!driver.ok())
    return Fail(v1::MEASURE_STATUS_RUNTIME_ERROR, std::string(driver.status().message()));
  confine.files.clear();
  for (size_t p = 0; p < pkgs.size(); ++p) {
    GraphRuntime::Options ro;
    ro.threads = threads;
    ro.profile = req.profile();
    ro.pool = loaded->pool.get();
    if (!cuda) {
      auto at = confined->paths.begin() + first_file[p];
      ro.library_paths.assign(at, at + pkgs[p].kernels_size());
    }
    auto rt = GraphRuntime::Load(pkgs[p], ro);
    if (!rt.ok()) {
      return Fail(v1::MEASURE_STATUS_UPLOAD_ERROR,
                  absl::StrCat(p == 0 ? "the package" : "the paired package",
                               " did not load here: ", rt.status().message()));
    }
    (p == 0 ? loaded->a : loaded->b) = *std::move(rt);
  }
  return -1;
}

// The timed runs (pairs, for a paired request) the request asks for.
int Repeats(const v1::ModelRunRequest& req) {
  return std::min(req.repeats() > 0 ? req.repeats() : runtime::kDefaultModelRepeats,
                  tunefarm::kMaxModelRepeats);
}

// One package: the untimed first run, then the timed runs.
int RunOne(const v1::ModelRunRequest& req, GraphRuntime& rt, const runtime::ModelInputs& inputs,
           v1::ModelRunResult* result) {
  std::map<std::string, std::vector<float>> outputs;
  const double t0 = Now();
  if (absl::Status s = rt.Run(inputs, &outputs); !s.ok())
    return Fail(v1::MEASURE_STATUS_RUNTIME_ERROR, std::string(s.message()));
  result->set_first_run_sec(Now() - t0);
  const std::vector<double> first_steps = rt.StepSeconds();
  runtime::ModelRunCount count;
  count.runs = req.first_run_only() ? 0 : Repeats(req);
  count.min_runs =
      req.min_repeats() > 0 ? std::min<int64_t>(req.min_repeats(), count.runs) : count.runs;
  count.max_seconds = req.max_run_s();
  absl::StatusOr<runtime::ModelTimes> timed = runtime::TimeModel(rt, inputs, count);
  if (!timed.ok())
    return Fail(v1::MEASURE_STATUS_RUNTIME_ERROR, std::string(timed.status().message()));
  for (double t : timed->latencies) result->add_latencies_sec(t);
  // Profiled with no timed runs: the first run's steps.
  for (double t : timed->step_seconds.empty() ? first_steps : timed->step_seconds)
    result->add_step_sec(t);
  if (req.return_outputs()) AddOutputs(rt, outputs, result);
  result->set_status(v1::MEASURE_STATUS_OK);
  return Report(*result);
}

// Two builds: each run once, b's outputs checked against a's, then timed
// pair by pair.
int RunPaired(const v1::ModelRunRequest& req, GraphRuntime& a, GraphRuntime& b,
              const runtime::ModelInputs& inputs, v1::ModelRunResult* result) {
  std::map<std::string, std::vector<float>> out_a, out_b;
  const double t0 = Now();
  if (absl::Status s = a.Run(inputs, &out_a); !s.ok())
    return Fail(v1::MEASURE_STATUS_RUNTIME_ERROR, absl::StrCat("package a: ", s.message()));
  result->set_first_run_sec(Now() - t0);
  if (absl::Status s = b.Run(inputs, &out_b); !s.ok())
    return Fail(v1::MEASURE_STATUS_RUNTIME_ERROR, absl::StrCat("package b: ", s.message()));
  const double tolerance = req.output_tolerance() > 0 ? req.output_tolerance() : 1e-3;
  v1::ModelRunPair* pair = result->mutable_pair();
  for (const std::string& name : a.package().outputs()) {
    const double err = runtime::OutputError(out_a[name], out_b[name]);
    pair->set_output_error(std::max(pair->output_error(), err));
    if (!(err <= tolerance)) {
      return Fail(v1::MEASURE_STATUS_WRONG_RESULT,
                  absl::StrCat("the two builds disagree on output '", name, "': error ", err,
                               " of its largest value (allowed ", tolerance, ")"));
    }
  }
  const int pairs = Repeats(req);
  absl::StatusOr<runtime::PairedModelTimes> t = runtime::TimeModelsPaired(a, b, inputs, pairs);
  if (!t.ok()) return Fail(v1::MEASURE_STATUS_RUNTIME_ERROR, std::string(t.status().message()));
  pair->set_a_sec(t->a_seconds);
  pair->set_b_sec(t->b_seconds);
  pair->set_a_over_b(t->a_over_b);
  pair->set_pairs(t->pairs);
  for (double s : t->a_steps) pair->add_a_step_sec(s);
  for (double s : t->b_steps) pair->add_b_step_sec(s);
  if (req.return_outputs()) AddOutputs(a, out_a, result);
  result->set_status(v1::MEASURE_STATUS_OK);
  return Report(*result);
}

}  // namespace

int main() {
  runtime::ModelRunWireHeader h{};
  v1::ModelRunRequest req;
  if (std::string error = ReadRequest(&h, &req); !error.empty())
    return Fail(v1::MEASURE_STATUS_RUNTIME_ERROR, error);
  v1::ModelRunResult result;
  const int threads =
      req.threads() > 0 ? req.threads() : std::max(1, int(std::thread::hardware_concurrency()));
  result.set_threads(threads);
  const double t_load = Now();
  Loaded loaded;
  if (int code = LoadConfined(req, h, threads, &loaded); code >= 0) return code;
  result.set_load_sec(Now() - t_load);
  absl::StatusOr<runtime::ModelInputs> inputs = InputsOf(*loaded.a, req);
  if (!inputs.ok())
    return Fail(v1::MEASURE_STATUS_RUNTIME_ERROR, std::string(inputs.status().message()));
  if (loaded.b != nullptr) return RunPaired(req, *loaded.a, *loaded.b, *inputs, &result);
  return RunOne(req, *loaded.a, *inputs, &result);
}
