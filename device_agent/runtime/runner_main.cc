// tunefarm-runner: the process the measurement sandbox execs for every
// kernel it measures. It reads one request (sandbox_wire.h) from fd 3,
// limits its own address space, confines itself, loads the kernel, runs it
// once and sends that run's output to fd 4; told to go on (fd 5), it warms
// up, times the kernel and writes the report to fd 4. It never sees the
// reference: the agent checks the output. A CUDA plan (gpu_plan.h) runs on
// device 0 through the driver opened at run time. A kernel that crashes or
// hangs takes only this process down; the sandbox turns that into an
// outcome. Not meant to be run by hand.
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "device_agent/runtime/child_exec.h"
#include "device_agent/runtime/confine.h"
#include "device_agent/runtime/cuda_driver.h"
#include "device_agent/runtime/gpu_plan.h"
#include "device_agent/runtime/runner.h"
#include "device_agent/runtime/sandbox_wire.h"
#include "proto/kernel_signature.h"

namespace {

using tunefarm::runtime::AlignedBuffer;
using tunefarm::runtime::CudaDriver;
using tunefarm::runtime::FlushDenormals;
using tunefarm::runtime::GpuSession;
using tunefarm::runtime::KernelLibrary;
using tunefarm::runtime::ThreadPool;
namespace wire = tunefarm::runtime::wire;

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// How Confine left this process (sent with every message).
wire::Confinement g_confinement{};

int Report(wire::RunReport& rep) {
  rep.magic = wire::kMagic;
  rep.kind = wire::MessageKind::kReport;
  rep.confinement = g_confinement;
  return wire::WriteAll(wire::kReportFd, &rep, sizeof(rep)) ? 0 : 1;
}

int BadRequest(const char* why) {
  wire::RunReport rep{};
  rep.status = wire::RunStatus::kRuntimeError;
  rep.bad_request = 1;
  std::snprintf(rep.message, sizeof(rep.message), "%s", why);
  return Report(rep);
}

// The checking run's output to the agent, then its answer: true when it
// says to time the kernel (it kills this process when the output is wrong).
bool ShowOutputAndAwaitGo(const float* out, int64_t n_out) {
  wire::Checked c{};
  c.magic = wire::kMagic;
  c.kind = wire::MessageKind::kChecked;
  c.confinement = g_confinement;
  if (!wire::WriteAll(wire::kReportFd, &c, sizeof(c)) ||
      !wire::WriteAll(wire::kReportFd, out, size_t(n_out) * 4)) {
    return false;
  }
  char go = 0;
  ssize_t n;
  do {
    n = read(wire::kGoFd, &go, 1);
  } while (n < 0 && errno == EINTR);
  return n == 1 && go == wire::kGo;
}

void SetMessage(wire::RunReport& rep, absl::string_view text) {
  std::snprintf(rep.message, sizeof(rep.message), "%.*s", int(text.size()), text.data());
}

struct Arg {
  const char* data;
  int64_t count;
};

absl::Status OutOfMemory() {
  return absl::ResourceExhaustedError("the kernel's buffers do not fit the runner's memory limit");
}

// The inputs of the kernel whose serialized KernelSignature is `bytes`:
// RandomInputs(input_seed), each in the layout the kernel reads, into
// `made`, with `args` pointing at them. Refused: a signature that does not
// parse or check, or whose output is not n_out values.
absl::Status MakeInputs(const wire::RunRequestHeader& h, const std::string& bytes,
                        std::vector<std::vector<float>>* made, std::vector<Arg>* args) {
  tunefarm::v1::KernelSignature sig;
  if (!sig.ParseFromString(bytes))
    return absl::InvalidArgumentError("the signature does not parse");
  if (absl::Status s =
          tunefarm::CheckSignature(sig, tunefarm::runtime::MaxKernelElements(h.memory_limit_bytes));
      !s.ok()) {
    return s;
  }
  if (tunefarm::KernelElements(sig.args(sig.args_size() - 1)) != h.n_out) {
    return absl::InvalidArgumentError("the signature's output is not the request's");
  }
  try {
    for (int i = 0; i + 1 < sig.args_size(); ++i) {
      std::vector<float> v = tunefarm::RandomInput(sig, i, h.input_seed);
      if (sig.args(i).pack_block_size() > 0) v = tunefarm::PackArgument(sig.args(i), v);
      made->push_back(std::move(v));
    }
  } catch (const std::bad_alloc&) {
    return OutOfMemory();
  }
  for (const std::vector<float>& v : *made)
    args->push_back({reinterpret_cast<const char*>(v.data()), int64_t(v.size())});
  return absl::OkStatus();
}

int InputsFailed(const absl::Status& why) {
  wire::RunReport rep{};
  rep.status = wire::RunStatus::kRuntimeError;
  rep.bad_request = why.code() == absl::StatusCode::kInvalidArgument;
  SetMessage(rep, absl::StrCat("inputs: ", why.message()));
  return Report(rep);
}

// How the timing goes, from the last warm-up run of `once` seconds: repeats (as
// many as fit max_timing_s, at most as asked) and runs per repeat (as given,
// else enough for min_repeat_ms; 1 when the cache is flushed, so every timed
// run starts cold). The same for CPU and GPU kernels.
struct TimingPlan {
  int repeats;
  int64_t inner;
};

TimingPlan PlanTiming(const wire::RunRequestHeader& h, double once) {
  once = std::max(1e-7, once);
  TimingPlan t;
  t.repeats =
      std::clamp(int(h.max_timing_s / once), 1, std::clamp(int(h.repeats), 1, wire::kMaxRepeats));
  t.inner = h.number > 0 ? h.number
            : h.flush_cache
                ? 1
                : std::max<int64_t>(1, int64_t(h.min_repeat_ms * 1e-3 / t.repeats / once));
  return t;
}

// Confines this process (confine.h) with `confine` and the request's
// limits, and notes how in g_confinement. On failure it reports that in
// `rep`, sets *exit_code and returns nothing. (With a PID namespace, what
// follows runs in Confine's child.)
std::optional<tunefarm::runtime::Confined> ConfineFor(const wire::RunRequestHeader& h,
                                                     tunefarm::runtime::ConfineOptions confine,
                                                     wire::RunReport& rep, int* exit_code) {
  confine.cpu_limit_s = h.cpu_limit_s;
  confine.filter_optional = h.filter_optional != 0;
  absl::StatusOr<tunefarm::runtime::Confined> confined = tunefarm::runtime::Confine(confine);
  if (!confined.ok()) {
    rep.not_confined = 1;
    SetMessage(rep, absl::StrCat("sandbox: ", confined.status().message()));
    *exit_code = Report(rep);
    return std::nullopt;
  }
  g_confinement.namespaces = confined->namespaces;
  g_confinement.pid_namespace = confined->pid_namespace;
  g_confinement.filtered = confined->filtered;
  return *std::move(confined);
}

// A CUDA plan on device 0. Confined as CPU runs are, with the GPU's device
// files in the new root (confine.h): the driver is loaded before, started
// (context and threads) between the namespaces and the filter, and the
// plan's bytes and the inputs are read and made after. Then: load, copy the
// inputs up, run once and show the output, then (told to go on) time with
// events (the warm-up runs size the repeats as on the CPU). Every CUDA
// failure is a runtime error carrying the driver's reason; a module the
// driver refuses is a load failure.
int RunGpu(const wire::RunRequestHeader& h, const char* plan_bytes, std::vector<Arg> args,
           const std::string& signature) {
  wire::RunReport rep{};
  rep.status = wire::RunStatus::kRuntimeError;
  // (The driver's errors come back as results, not on the agent's stderr.)
  tunefarm::runtime::ConfineOptions confine;
  absl::StatusOr<const CudaDriver*> driver;
  tunefarm::runtime::PrepareGpuConfinement(&confine, &driver);
  int exit_code = 0;
  if (!ConfineFor(h, confine, rep, &exit_code)) return exit_code;
  if (!driver.ok()) {
    SetMessage(rep, driver.status().message());
    return Report(rep);
  }
  std::vector<std::vector<float>> made;
  if (!signature.empty()) {
    if (absl::Status st = MakeInputs(h, signature, &made, &args); !st.ok()) {
      return InputsFailed(st);
    }
  }
  // Against the inputs as given or made (h.n_args is 0 when made here).
  absl::StatusOr<tunefarm::runtime::GpuPlan> plan =
      tunefarm::runtime::DecodeGpuPlan(plan_bytes, size_t(h.so_bytes), int64_t(args.size()));
  if (!plan.ok()) return BadRequest(std::string(plan.status().message()).c_str());
  std::vector<std::pair<const float*, int64_t>> inputs;
  for (const Arg& a : args) inputs.push_back({reinterpret_cast<const float*>(a.data), a.count});
  auto session = GpuSession::Open(**driver, *plan, inputs, h.n_out);
  if (!session.ok()) {
    rep.load_failed = session.status().code() == absl::StatusCode::kFailedPrecondition;
    SetMessage(rep, session.status().message());
    return Report(rep);
  }
  GpuSession& s = **session;
  std::vector<float> out(size_t(h.n_out));
  absl::Status st = s.Run();
  if (st.ok()) st = s.ReadOutput(out.data());
  if (!st.ok()) {
    SetMessage(rep, st.message());
    return Report(rep);
  }
  if (!ShowOutputAndAwaitGo(out.data(), h.n_out)) return 0;
  // Warm-up: runs until warmup_ms has passed (clocks ramp up); the last
  // one sizes the timing.
  absl::StatusOr<double> once = s.Time(1, false);
  for (double t0 = Now(); once.ok() && Now() - t0 < h.warmup_ms * 1e-3;) once = s.Time(1, false);
  if (once.ok()) {
    const TimingPlan t = PlanTiming(h, *once);
    rep.repeats = t.repeats;
    rep.inner = t.inner;
    for (int r = 0; r < t.repeats && once.ok(); ++r) {
      absl::StatusOr<double> spent = s.Time(t.inner, h.flush_cache != 0);
      if (!spent.ok())
        once = spent.status();
      else
        rep.costs[r] = *spent;
    }
  }
  if (once.ok()) {
    rep.status = wire::RunStatus::kOk;
  } else {
    rep.repeats = 0;
    SetMessage(rep, once.status().message());
  }
  return Report(rep);
}

// The request on fd 3, mapped (sandbox_wire.h): its header, the kernel's
// bytes and the arguments given, or the signature to make them from.
struct Request {
  void* map = nullptr;
  size_t size = 0;
  wire::RunRequestHeader h;
  const char* so = nullptr;
  std::vector<Arg> args;
  std::string signature;  // the inputs are made here from it (sandbox_wire.h)
};

// Maps and parses the request on fd 3 into *r. A malformed one is reported
// (BadRequest): then *exit_code is set and it returns false.
bool ReadRequest(Request* r, int* exit_code) {
  auto bad = [exit_code](const char* why) {
    *exit_code = BadRequest(why);
    return false;
  };
  struct stat st {};
  if (fstat(wire::kRequestFd, &st) != 0 || st.st_size < int64_t(sizeof(wire::RunRequestHeader))) {
    return bad("no request on fd 3");
  }
  r->size = size_t(st.st_size);
  r->map = mmap(nullptr, r->size, PROT_READ, MAP_PRIVATE, wire::kRequestFd, 0);
  if (r->map == MAP_FAILED) return bad("cannot map the request");
  const char* p = static_cast<const char*>(r->map);
  const char* end = p + r->size;
  wire::RunRequestHeader& h = r->h;
  std::memcpy(&h, p, sizeof(h));
  p += sizeof(h);
  if (h.magic != wire::kMagic) return bad("request from another tunefarm build");
  auto take = [&](int64_t bytes) -> const char* {
    if (bytes < 0 || bytes > end - p) return nullptr;
    const char* at = p;
    p += bytes;
    return at;
  };
  r->so = take(h.so_bytes);
  if (r->so == nullptr || h.n_out < 0 || h.n_args < 0 || h.n_args > 1024) {
    return bad("truncated request");
  }
  for (int64_t i = 0; i < h.n_args; ++i) {
    int64_t count = 0;
    const char* c = take(sizeof(count));
    if (c == nullptr) return bad("truncated request");
    std::memcpy(&count, c, sizeof(count));
    const char* data = count >= 0 && count <= (end - p) / 4 ? take(count * 4) : nullptr;
    if (data == nullptr) return bad("truncated request");
    r->args.push_back({data, count});
  }
  if (h.signature_bytes != 0) {
    const char* sig = h.n_args == 0 ? take(h.signature_bytes) : nullptr;
    if (sig == nullptr) return bad("truncated request");
    r->signature.assign(sig, size_t(h.signature_bytes));
  }
  if (p != end) return bad("request longer than it says");
  return true;
}

// Times `lib`, its output already checked: warm-up runs, then the repeats
// PlanTiming sizes, into rep's costs, repeats and inner; rep.status is kOk.
void TimeOnCpu(const wire::RunRequestHeader& h, const KernelLibrary& lib, void* const* ptrs,
               const ThreadPool& pool, wire::RunReport& rep) {
  // Warm-up: runs until warmup_ms has passed (a fresh process runs the
  // first milliseconds slower); the last one sizes the timing.
  const double t0 = Now();
  double once = 0, s = t0;
  do {
    lib.Run(ptrs, pool);
    const double e = Now();
    once = e - s;
    s = e;
  } while (s - t0 < h.warmup_ms * 1e-3);
  const TimingPlan t = PlanTiming(h, once);
  const int repeats = t.repeats;
  const int64_t inner = t.inner;
  // Flushing: write a buffer twice the last-level cache before each timed
  // run (not timed), so weights and inputs come from memory.
  std::vector<char> flush;
  if (h.flush_cache) flush.assign(wire::CacheFlushBytes(), 1);
  for (int r = 0; r < repeats; ++r) {
    double spent = 0;
    if (flush.empty()) {
      double s = Now();
      for (int64_t k = 0; k < inner; ++k) lib.Run(ptrs, pool);
      spent = Now() - s;
    } else {
      for (int64_t k = 0; k < inner; ++k) {
        for (size_t i = 0; i < flush.size(); i += 64) flush[i] = char(flush[i] + 1);
        double s = Now();
        lib.Run(ptrs, pool);
        spent += Now() - s;
      }
    }
    rep.costs[r] = spent / double(inner);
  }
  rep.repeats = repeats;
  rep.inner = inner;
  rep.status = wire::RunStatus::kOk;
}

// A CPU kernel: limits the address space, confines this process, makes the
// inputs, loads the kernel, runs it once and shows the output, then (told to
// go on) times it. The request's mapping (`map`, `size`) is unmapped once the
// inputs are copied. Returns the exit code.
int RunCpu(const wire::RunRequestHeader& h, const char* so, std::vector<Arg> args,
           const std::string& signature, void* map, size_t size) {
  std::vector<std::vector<float>> made;
  wire::RunReport rep{};
  rep.status = wire::RunStatus::kRuntimeError;
  // (Measured from /proc, which is gone once confined.)
  tunefarm::runtime::LimitAddressSpace(h.memory_limit_bytes);
  // The kernel's code runs from here on, its constructors at the load:
  // confined first (confine.h).
  tunefarm::runtime::ConfineOptions confine;
  confine.files.push_back({"kernel.so", std::string(so, size_t(h.so_bytes))});
  std::unique_ptr<ThreadPool> pool;
  confine.start_threads = [&] { pool = std::make_unique<ThreadPool>(std::max(1, h.threads)); };
  int exit_code = 0;
  std::optional<tunefarm::runtime::Confined> confined = ConfineFor(h, confine, rep, &exit_code);
  if (!confined) return exit_code;
  // Made confined, within the address-space limit: a signature too large
  // for it fails here, not in the agent.
  if (!signature.empty()) {
    if (absl::Status st = MakeInputs(h, signature, &made, &args); !st.ok()) {
      return InputsFailed(st);
    }
  }
  auto lib = KernelLibrary::Open(confined->paths[0]);
  if (!lib.ok()) {
    rep.load_failed = 1;
    std::snprintf(rep.message, sizeof(rep.message), "%s",
                  std::string(lib.status().message()).c_str());
    return Report(rep);
  }
  std::vector<std::unique_ptr<AlignedBuffer>> bufs;
  std::vector<void*> ptrs;
  for (const Arg& a : args) {
    auto b = std::make_unique<AlignedBuffer>(a.count);
    if (b->data() == nullptr) return InputsFailed(OutOfMemory());
    std::memcpy(b->data(), a.data, size_t(a.count) * 4);
    ptrs.push_back(b->data());
    bufs.push_back(std::move(b));
  }
  munmap(map, size);  // the inputs are copied; give the kernel the room
  made.clear();
  made.shrink_to_fit();
  AlignedBuffer out(h.n_out);
  if (out.data() == nullptr) return InputsFailed(OutOfMemory());
  std::fill(out.data(), out.data() + h.n_out, std::nanf(""));
  ptrs.push_back(out.data());
  const FlushDenormals flush_denormals;  // as the graph runtime runs kernels
  rep.rc = (*lib)->Run(ptrs.data(), *pool);
  if (rep.rc != 0) return Report(rep);
  if (!ShowOutputAndAwaitGo(out.data(), h.n_out)) return 0;
  TimeOnCpu(h, **lib, ptrs.data(), *pool, rep);
  return Report(rep);
}

}  // namespace

int main() {
  Request req;
  int exit_code = 0;
  if (!ReadRequest(&req, &exit_code)) return exit_code;
  const wire::RunRequestHeader& h = req.h;
  // The CUDA driver reserves address space far beyond what it uses, so a
  // GPU measurement has no address-space limit (the time limit still holds).
  if (h.device == wire::Device::kCuda) return RunGpu(h, req.so, std::move(req.args), req.signature);
  if (h.device != wire::Device::kCpu) return BadRequest("unknown device in the request");
  return RunCpu(h, req.so, std::move(req.args), req.signature, req.map, req.size);
}
