// tunefarm-model-runner: the process an agent execs for every whole-model
// run (model_run.h). It reads the request from fd 3, limits its own address
// space, loads the package with the graph runtime, runs it once untimed
// (the outputs, when asked for, come from that run), times the repeats and
// writes a ModelRunResult to fd 4. A kernel that crashes or hangs takes only
// this process down. A CUDA package runs on device 0, confined as the GPU
// runner is (confine.h: the driver started before the filter). Not meant to
// be run by hand.
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "device_agent/runtime/child_exec.h"
#include "device_agent/runtime/confine.h"
#include "device_agent/runtime/cuda_driver.h"
#include "device_agent/runtime/graph_runtime.h"
#include "device_agent/runtime/model_timing.h"
#include "device_agent/runtime/model_run.h"
#include "device_agent/runtime/runner.h"
#include "device_agent/runtime/sandbox_wire.h"

namespace {

namespace v1 = tunefarm::v1;
namespace runtime = tunefarm::runtime;

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

}  // namespace

int main() {
  struct stat st {};
  if (fstat(runtime::kChildRequestFd, &st) != 0 ||
      st.st_size < int64_t(sizeof(runtime::ModelRunWireHeader))) {
    return Fail(v1::MEASURE_STATUS_RUNTIME_ERROR, "model runner: no request on fd 3");
  }
  const size_t size = size_t(st.st_size);
  void* map = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, runtime::kChildRequestFd, 0);
  if (map == MAP_FAILED) return Fail(v1::MEASURE_STATUS_RUNTIME_ERROR, "cannot map the request");
  runtime::ModelRunWireHeader h;
  std::memcpy(&h, map, sizeof(h));
  if (h.magic != runtime::kModelRunMagic)
    return Fail(v1::MEASURE_STATUS_RUNTIME_ERROR, "model request from another tunefarm build");
  v1::ModelRunRequest req;
  if (h.request_bytes < 0 || size_t(h.request_bytes) > size - sizeof(h) ||
      !req.ParseFromArray(static_cast<const char*>(map) + sizeof(h), int(h.request_bytes))) {
    return Fail(v1::MEASURE_STATUS_RUNTIME_ERROR, "model runner: truncated request");
  }
  munmap(map, size);

  v1::ModelRunResult result;
  const int threads =
      req.threads() > 0 ? req.threads() : std::max(1, int(std::thread::hardware_concurrency()));
  result.set_threads(threads);
  const double t_load = Now();
  absl::StatusOr<v1::ModelPackage> pkg =
      tunefarm::runtime::GraphRuntime::ParsePackage(req.package(), "the package sent");
  if (!pkg.ok()) return Fail(v1::MEASURE_STATUS_UPLOAD_ERROR, std::string(pkg.status().message()));
  req.clear_package();
  tunefarm::runtime::GraphRuntime::Options ro;
  ro.threads = threads;
  // The package's code runs from the load on: confined first (confine.h),
  // its libraries placed in the runner's own root; a CUDA package's modules
  // are loaded by the driver, started (context, threads) before the filter.
  const bool cuda = absl::StartsWith(pkg->target(), "cuda");
  // The CUDA driver reserves address space far beyond what it uses, so a
  // GPU run has no address-space limit (the time limit still holds); the
  // host copies it makes (arena, constants) are held to the limit instead.
  if (!cuda) runtime::LimitAddressSpace(h.memory_limit_bytes);
  if (cuda && h.memory_limit_bytes > 0) {
    int64_t host = pkg->arena_bytes();
    for (const v1::PackageTensor& c : pkg->constants())
      host += int64_t(c.f32().size() + 2 * c.f16().size());  // held as floats
    if (host > h.memory_limit_bytes) {
      return Fail(v1::MEASURE_STATUS_RUNTIME_ERROR,
                  absl::StrCat("the package's arena and constants take ", host,
                               " bytes of host memory, the board allows ", h.memory_limit_bytes));
    }
  }
  runtime::ConfineOptions confine;
  std::unique_ptr<runtime::ThreadPool> pool;
  confine.start_threads = [&] { pool = std::make_unique<runtime::ThreadPool>(threads); };
  absl::StatusOr<const runtime::CudaDriver*> driver = nullptr;
  if (cuda) {
    runtime::PrepareGpuConfinement(&confine, &driver);
  } else {
    for (int k = 0; k < pkg->kernels_size(); ++k) {
      confine.files.push_back({absl::StrCat("kernel-", k, ".so"),
                               std::move(*pkg->mutable_kernels(k)->mutable_shared_object())});
    }
  }
  confine.cpu_limit_s = h.cpu_limit_s;
  confine.filter_optional = h.filter_optional != 0;
  absl::StatusOr<runtime::Confined> confined = runtime::Confine(confine);
  if (!confined.ok()) {
    return Fail(v1::MEASURE_STATUS_RUNTIME_ERROR,
                absl::StrCat("sandbox: ", confined.status().message()));
  }
  if (!driver.ok()) {
    return Fail(v1::MEASURE_STATUS_RUNTIME_ERROR, std::string(driver.status().message()));
  }
  confine.files.clear();
  if (!cuda) ro.library_paths = confined->paths;
  ro.pool = pool.get();
  auto rt = tunefarm::runtime::GraphRuntime::Load(*pkg, ro);
  if (!rt.ok()) {
    return Fail(v1::MEASURE_STATUS_UPLOAD_ERROR,
                absl::StrCat("the package did not load here: ", rt.status().message()));
  }
  result.set_load_sec(Now() - t_load);
  const auto inputs = (*rt)->SeededInputs(req.input_seed());
  std::map<std::string, std::vector<float>> outputs;
  if (absl::Status s = (*rt)->Run(inputs, &outputs); !s.ok())
    return Fail(v1::MEASURE_STATUS_RUNTIME_ERROR, std::string(s.message()));
  const int repeats = std::min(req.repeats() > 0 ? req.repeats() : runtime::kDefaultModelRepeats,
                               tunefarm::kMaxModelRepeats);
  runtime::ModelRunCount count;
  count.runs = count.min_runs = repeats;
  absl::StatusOr<runtime::ModelTimes> timed = runtime::TimeModel(**rt, inputs, count);
  if (!timed.ok()) {
    return Fail(v1::MEASURE_STATUS_RUNTIME_ERROR, std::string(timed.status().message()));
  }
  for (double t : timed->latencies) result.add_latencies_sec(t);
  if (req.return_outputs()) {
    for (const std::string& name : pkg->outputs()) {
      v1::PackageTensor* t = result.add_outputs();
      t->set_name(name);
      for (int64_t d : (*rt)->Shape(name)) t->add_shape(d);
      const std::vector<float>& v = outputs[name];
      t->set_f32(std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4));
    }
  }
  result.set_status(v1::MEASURE_STATUS_OK);
  return Report(result);
}
