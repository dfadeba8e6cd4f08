#include "device_agent/runtime/graph_runtime.h"

#include <chrono>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/file_util.h"
#include "common/random_fill.h"
#include "common/status_macros.h"
#include "device_agent/runtime/cuda_driver.h"
#include "device_agent/runtime/gpu_graph.h"
#include "device_agent/runtime/gpu_module.h"
#include "proto/model_graph.h"
#include "device_agent/runtime/ops.h"
#include "device_agent/runtime/runner.h"
#include "proto/kernel_signature.h"

namespace tunefarm::runtime {
namespace {

using absl::StrCat;
using Dims = std::vector<int64_t>;
constexpr int64_t kMaxElements = int64_t(1) << 32;

absl::Status Bad(const std::string& what) {
  return absl::InvalidArgumentError(StrCat("package: ", what));
}

absl::StatusOr<int64_t> Numel(const google::protobuf::RepeatedField<int64_t>& shape,
                              const std::string& what) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0 || d > kMaxElements) return Bad(StrCat(what, " has dimension ", d));
    n *= d;
    if (n > kMaxElements) return Bad(StrCat(what, " is too large"));
  }
  return n;
}

}  // namespace

int64_t ValueBytes(const v1::ModelPackage& pkg) {
  return HalfKindOf(pkg.precision()).has_value() ? 2 : 4;
}

Node FromPackage(const v1::PackageNode& p) {
  Node n;
  n.op = p.op();
  n.name = p.name();
  n.inputs.assign(p.inputs().begin(), p.inputs().end());
  n.outputs.assign(p.outputs().begin(), p.outputs().end());
  for (const auto& [k, v] : p.ints()) n.ints[k].assign(v.v().begin(), v.v().end());
  for (const auto& [k, v] : p.floats()) n.floats[k].assign(v.v().begin(), v.v().end());
  for (const auto& [k, v] : p.strings()) n.strings[k] = v;
  return n;
}

absl::StatusOr<Constant> FromPackage(const v1::PackageTensor& t, std::optional<HalfKind> half) {
  TF_ASSIGN_OR_RETURN(int64_t n, Numel(t.shape(), StrCat("constant '", t.name(), "'")));
  Constant k;
  k.shape.assign(t.shape().begin(), t.shape().end());
  k.is_int = t.is_int();
  const bool bits16 = !t.is_int() && !t.f16().empty();
  if (bits16 && !half)
    return Bad(StrCat("constant '", t.name(), "' is 16-bit in a float32 package"));
  if (t.is_int() ? t.i64_size() != n
      : bits16   ? int64_t(t.f16().size()) != n * 2 || !t.f32().empty()
                 : int64_t(t.f32().size()) != n * 4)
    return Bad(StrCat("constant '", t.name(), "' has the wrong size"));
  if (t.is_int()) {
    k.ints.assign(t.i64().begin(), t.i64().end());
  } else if (bits16) {
    k.bits16.resize(static_cast<size_t>(n));
    std::memcpy(k.bits16.data(), t.f16().data(), t.f16().size());
    k.floats.resize(size_t(n));
    FromHalfBits(k.bits16.data(), n, *half, k.floats.data());
  } else {
    k.floats.resize(size_t(n));
    std::memcpy(k.floats.data(), t.f32().data(), t.f32().size());
  }
  return k;
}

struct GraphRuntime::Impl {
  v1::ModelPackage pkg;
  Options options;
  std::unique_ptr<runtime::ThreadPool> own_pool;
  runtime::ThreadPool* pool = nullptr;
  std::vector<std::unique_ptr<runtime::KernelLibrary>> libs;
  std::unique_ptr<runtime::AlignedBuffer> arena;
  std::vector<std::unique_ptr<runtime::AlignedBuffer>> owned;
  struct Tensor {
    float* data = nullptr;
    Dims shape;
    int64_t size = 0;
    const Constant* constant = nullptr;
  };
  std::map<std::string, Tensor> tensors;
  std::map<std::string, Constant> constants;
  struct Step {
    int kernel = -1;
    bool view = false;  // the package placed the node's outputs inside its input 0
    bool noop = false;  // a view whose outputs do lie there: skipped
    std::vector<void*> buffers;
    Node node;
    OpArgs<float> args;
  };
  std::vector<Step> steps;
  std::vector<double> step_sec;
  // A cuda package: its kernel steps on the device, values at their arena
  // offsets there; the host tensors above stage the inputs and outputs.
  std::unique_ptr<GpuGraph> gpu;
  std::vector<int> gpu_step_of;  // GpuGraph step -> package step

  absl::Status Init();
  // Init's steps, in the order below. Refuses a format, arena size or
  // precision this build does not run; sets pool, cuda, half, dtype, value_bytes.
  absl::Status CheckPackage();
  // Opens the GPU graph (cuda) and the host arena (unless keep_values).
  absl::Status OpenArena();
  // Each constant into a buffer of its own (and onto the device, recorded in
  // *device_of); refuses one that does not decode or comes twice.
  absl::Status PlaceConstants(std::map<std::string, GpuGraph::DevicePtr>* device_of);
  // Each value at its arena offset (or its own buffer with keep_values), and
  // every input and output named has one.
  absl::Status PlaceValues(std::map<std::string, GpuGraph::DevicePtr>* device_of);
  // Loads every kernel (libraries, or GPU modules), checking its signature;
  // *arg_sizes gets each kernel's argument element counts.
  absl::Status LoadKernels(std::vector<std::vector<int64_t>>* arg_sizes);
  // One Step per package step, kernel arguments checked against `arg_sizes`
  // (and added to the GPU graph for cuda).
  absl::Status MakeSteps(const std::vector<std::vector<int64_t>>& arg_sizes,
                         const std::map<std::string, GpuGraph::DevicePtr>& device_of);
  // Fills every node step's OpArgs (pointing into `steps`, which is final by
  // then) and marks the view steps that are no-ops.
  absl::Status BindNodes();
  bool cuda = false;  // the package's target is a cuda one
  std::optional<HalfKind> half;  // its 16-bit value kind, if any
  std::string dtype = "float32";  // the word for its values' type
  // The steps of one run, the inputs in place: natively and through the
  // kernel libraries, or on the GPU (inputs copied up, outputs back).
  absl::Status RunOnHost();
  absl::Status RunOnGpu();
  // Bytes of one arena element (ValueBytes): the host copy holds every
  // value as float32 at its element offset.
  int64_t value_bytes = 4;
  // Byte offset on the device of an arena value's host copy.
  int64_t ArenaOffset(const Tensor& t) const { return (t.data - arena->data()) * value_bytes; }
};

absl::Status GraphRuntime::Impl::Init() {
  TF_RETURN_IF_ERROR(CheckPackage());
  std::map<std::string, GpuGraph::DevicePtr> device_of;
  TF_RETURN_IF_ERROR(OpenArena());
  TF_RETURN_IF_ERROR(PlaceConstants(&device_of));
  TF_RETURN_IF_ERROR(PlaceValues(&device_of));
  // Kernels: loaded, and their argument sizes taken from their signatures.
  std::vector<std::vector<int64_t>> arg_sizes;
  TF_RETURN_IF_ERROR(LoadKernels(&arg_sizes));
  TF_RETURN_IF_ERROR(MakeSteps(arg_sizes, device_of));
  return BindNodes();
}

absl::Status GraphRuntime::Impl::CheckPackage() {
  if (pkg.format_version() < kOldestPackageFormatVersion ||
      pkg.format_version() > kPackageFormatVersion) {
    return Bad(StrCat("format version ", pkg.format_version(), " (this build reads ",
                      kOldestPackageFormatVersion, " to ", kPackageFormatVersion,
                      "; rebuild the package with the tunefarm build that runs it)"));
  }
  if (options.pool != nullptr) {
    pool = options.pool;
  } else {
    own_pool = std::make_unique<runtime::ThreadPool>(options.threads);
    pool = own_pool.get();
  }
  if (pkg.arena_bytes() < 0 || pkg.arena_bytes() > kMaxElements * 4) return Bad("arena size");
  cuda = absl::StartsWith(pkg.target(), "cuda");
  half = HalfKindOf(pkg.precision());
  if (pkg.precision() != v1::DTYPE_UNSPECIFIED && pkg.precision() != v1::DTYPE_FLOAT32 && !half)
    return Bad(StrCat("precision ",
                      v1::DType_IsValid(pkg.precision()) ? v1::DType_Name(pkg.precision())
                                                         : std::to_string(pkg.precision()),
                      " (float32, float16 and bfloat16 run)"));
  dtype = half ? DTypeWord(pkg.precision()) : "float32";
  if (half && !cuda)
    return absl::UnimplementedError(
        StrCat("a ", dtype, " package runs on cuda targets; this one is for ", pkg.target()));
  value_bytes = ValueBytes(pkg);
  return absl::OkStatus();
}

absl::Status GraphRuntime::Impl::OpenArena() {
  if (cuda) {
    if (options.keep_values)
      return absl::FailedPreconditionError("a CUDA package's values stay on the device");
    TF_ASSIGN_OR_RETURN(const CudaDriver* driver, CudaDriver::Get());
    TF_ASSIGN_OR_RETURN(gpu, GpuGraph::Open(*driver, pkg.arena_bytes(), half));
  }
  if (!options.keep_values)
    arena = std::make_unique<runtime::AlignedBuffer>(
        (pkg.arena_bytes() + value_bytes - 1) / value_bytes + 16);
  return absl::OkStatus();
}

absl::Status GraphRuntime::Impl::PlaceConstants(
    std::map<std::string, GpuGraph::DevicePtr>* device_of) {
  for (const v1::PackageTensor& c : pkg.constants()) {
    TF_ASSIGN_OR_RETURN(Constant k, FromPackage(c, half));
    const int64_t n = k.size();
    auto buf = std::make_unique<runtime::AlignedBuffer>(std::max<int64_t>(n, 1));
    if (k.is_int) {
      for (int64_t i = 0; i < n; ++i) buf->data()[i] = float(k.ints[size_t(i)]);
    } else {
      std::copy(k.floats.begin(), k.floats.end(), buf->data());
    }
    if (constants.count(c.name())) return Bad(StrCat("constant '", c.name(), "' twice"));
    auto& stored = constants[c.name()] = std::move(k);
    tensors[c.name()] = Tensor{buf->data(), stored.shape, n, &stored};
    if (cuda) {
      TF_ASSIGN_OR_RETURN((*device_of)[c.name()],
                          stored.bits16.empty() ? gpu->AddConstant(buf->data(), n)
                                                : gpu->AddConstantBits(stored.bits16.data(), n));
    }
    stored.bits16 = {};  // the floats stay for the host
    owned.push_back(std::move(buf));
  }
  return absl::OkStatus();
}

absl::Status GraphRuntime::Impl::PlaceValues(
    std::map<std::string, GpuGraph::DevicePtr>* device_of) {
  for (const v1::PackageValue& v : pkg.values()) {
    TF_ASSIGN_OR_RETURN(int64_t n, Numel(v.shape(), StrCat("value '", v.name(), "'")));
    if (tensors.count(v.name())) return Bad(StrCat("value '", v.name(), "' twice"));
    float* p;
    if (options.keep_values) {
      auto buf = std::make_unique<runtime::AlignedBuffer>(std::max<int64_t>(n, 1));
      p = buf->data();
      owned.push_back(std::move(buf));
    } else {
      if (v.offset() < 0 || v.offset() % value_bytes != 0 ||
          v.offset() + n * value_bytes > pkg.arena_bytes())
        return Bad(StrCat("value '", v.name(), "' lies outside the arena"));
      p = arena->data() + v.offset() / value_bytes;
      if (cuda) (*device_of)[v.name()] = gpu->ArenaAt(v.offset());
    }
    tensors[v.name()] = Tensor{p, Dims(v.shape().begin(), v.shape().end()), n, nullptr};
  }
  for (const std::string& name : pkg.inputs())
    if (!tensors.count(name)) return Bad(StrCat("input '", name, "' has no value"));
  for (const std::string& name : pkg.outputs())
    if (!tensors.count(name)) return Bad(StrCat("output '", name, "' has no value"));
  return absl::OkStatus();
}

absl::Status GraphRuntime::Impl::LoadKernels(std::vector<std::vector<int64_t>>* arg_sizes) {
  for (const v1::PackageKernel& k : pkg.kernels()) {
    if (absl::Status s = CheckSignature(k.signature(), kMaxElements); !s.ok())
      return Bad(StrCat("kernel ", k.workload_key(), ": ", s.message()));
    std::vector<int64_t> sizes;
    for (const v1::KernelArgument& a : k.signature().args()) {
      sizes.push_back(KernelElements(a));
      if (HalfKindOf(a.dtype()) != half)
        return Bad(StrCat("kernel ", k.workload_key(), " takes ", DTypeWord(a.dtype()),
                          " arguments, the package's values are ", dtype));
    }
    arg_sizes->push_back(std::move(sizes));
    if (cuda) {
      // The kernel's bytes are a serialized GpuModule.
      v1::GpuModule module;
      if (!module.ParseFromString(k.shared_object()))
        return Bad(StrCat("kernel ", k.workload_key(), " is not a CUDA module"));
      absl::StatusOr<GpuPlan> plan = PlanFromModule(module, k.signature());
      if (!plan.ok())
        return Bad(StrCat("kernel ", k.workload_key(), ": ", plan.status().message()));
      TF_RETURN_IF_ERROR(gpu->AddKernel(*plan).status());
      continue;
    }
    const size_t i = libs.size();
    if (!options.library_paths.empty() && i >= options.library_paths.size())
      return Bad(StrCat("kernel ", k.workload_key(), " has no library path"));
    absl::StatusOr<std::unique_ptr<runtime::KernelLibrary>> lib =
        options.library_paths.empty() ? runtime::KernelLibrary::Load(k.shared_object())
                                      : runtime::KernelLibrary::Open(options.library_paths[i]);
    if (!lib.ok()) return Bad(StrCat("kernel ", k.workload_key(), ": ", lib.status().message()));
    libs.push_back(*std::move(lib));
  }
  return absl::OkStatus();
}

absl::Status GraphRuntime::Impl::MakeSteps(
    const std::vector<std::vector<int64_t>>& arg_sizes,
    const std::map<std::string, GpuGraph::DevicePtr>& device_of) {
  for (int s = 0; s < pkg.steps_size(); ++s) {
    const v1::PackageStep& ps = pkg.steps(s);
    Step st;
    if (ps.has_kernel()) {
      const v1::KernelStep& k = ps.kernel();
      if (k.kernel() < 0 || k.kernel() >= pkg.kernels_size())
        return Bad(StrCat("step ", s, " names kernel ", k.kernel()));
      st.kernel = k.kernel();
      const auto& sizes = arg_sizes[size_t(k.kernel())];
      if (size_t(k.args_size()) != sizes.size())
        return Bad(StrCat("step ", s, " passes ", k.args_size(), " arguments, the kernel takes ",
                          sizes.size()));
      for (int i = 0; i < k.args_size(); ++i) {
        auto t = tensors.find(k.args(i));
        if (t == tensors.end()) return Bad(StrCat("step ", s, " uses unknown '", k.args(i), "'"));
        if (t->second.size != sizes[size_t(i)])
          return Bad(StrCat("step ", s, ": '", k.args(i), "' has ", t->second.size,
                            " elements, the kernel reads ", sizes[size_t(i)]));
        st.buffers.push_back(t->second.data);
      }
      if (cuda) {
        std::vector<GpuGraph::DevicePtr> args;
        for (const std::string& a : k.args()) args.push_back(device_of.at(a));
        TF_RETURN_IF_ERROR(gpu->AddStep(k.kernel(), std::move(args)));
        gpu_step_of.push_back(s);
      }
    } else if (ps.has_node()) {
      st.node = FromPackage(ps.node());
      st.view = ps.node().view();
    } else {
      return Bad(StrCat("step ", s, " is empty"));
    }
    steps.push_back(std::move(st));
  }
  return absl::OkStatus();
}

absl::Status GraphRuntime::Impl::BindNodes() {
  const TFRuntime* rt = pool->runtime();
  // Node arguments point into `steps`, so fill them once the vector is final.
  for (Step& st : steps) {
    if (st.kernel >= 0) continue;
    OpArgs<float>& a = st.args;
    a.node = &st.node;
    a.opset = pkg.opset();
    a.parallel = rt->parallel_for;
    a.parallel_ctx = rt->ctx;
    for (const std::string& in : st.node.inputs) {
      if (in.empty()) {
        a.in.push_back(nullptr);
        a.in_shapes.push_back({});
        a.in_const.push_back(nullptr);
        continue;
      }
      auto t = tensors.find(in);
      if (t == tensors.end())
        return Bad(StrCat("node '", st.node.name, "' uses unknown '", in, "'"));
      a.in.push_back(t->second.data);
      a.in_shapes.push_back(t->second.shape);
      a.in_const.push_back(t->second.constant);
    }
    for (const std::string& out : st.node.outputs) {
      auto t = tensors.find(out);
      if (out.empty() || t == tensors.end()) {
        a.out.push_back(nullptr);
        a.out_shapes.push_back({});
        continue;
      }
      if (t->second.constant) return Bad(StrCat("node '", st.node.name, "' writes a constant"));
      a.out.push_back(t->second.data);
      a.out_shapes.push_back(t->second.shape);
    }
    // A view step is skipped when each output does lie inside input 0; a
    // Concat view when each input lies in its block of the output.
    st.noop = st.view && !a.in.empty() && a.in[0] != nullptr;
    if (st.noop && st.node.op == "Concat") {
      int64_t at = 0;
      st.noop = a.out.size() == 1 && a.out[0] != nullptr;
      for (size_t k = 0; st.noop && k < a.in.size(); ++k) {
        st.noop = a.in[k] == a.out[0] + at;
        at += Numel(a.in_shapes[k]);
      }
      st.noop = st.noop && at == Numel(a.out_shapes[0]);
    } else {
      for (size_t k = 0; st.noop && k < a.out.size(); ++k) {
        const float* lo = a.in[0];
        const float* hi = lo + Numel(a.in_shapes[0]);
        st.noop =
            a.out[k] != nullptr && a.out[k] >= lo && a.out[k] + Numel(a.out_shapes[k]) <= hi;
      }
    }
    if (cuda && !st.noop) {
      return absl::UnimplementedError(StrCat("node '", st.node.name, "' (", st.node.op,
                                             ") runs natively, and a CUDA package runs kernels "
                                             "only"));
    }
  }
  return absl::OkStatus();
}

GraphRuntime::GraphRuntime(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
GraphRuntime::~GraphRuntime() = default;

absl::StatusOr<std::unique_ptr<GraphRuntime>> GraphRuntime::Load(const v1::ModelPackage& package,
                                                                 const Options& options) {
  auto impl = std::make_unique<Impl>();
  impl->pkg = package;
  impl->options = options;
  if (impl->options.threads < 1) impl->options.threads = 1;
  TF_RETURN_IF_ERROR(impl->Init());
  return std::unique_ptr<GraphRuntime>(new GraphRuntime(std::move(impl)));
}

absl::StatusOr<v1::ModelPackage> GraphRuntime::ReadPackage(const std::string& path) {
  TF_ASSIGN_OR_RETURN(std::string bytes, ReadFile(path));
  return ParsePackage(bytes, path);
}

absl::StatusOr<v1::ModelPackage> GraphRuntime::ParsePackage(const std::string& bytes,
                                                            const std::string& what) {
  v1::ModelPackage pkg;
  if (!pkg.ParseFromString(bytes) || pkg.format_version() == 0)
    return absl::InvalidArgumentError(StrCat(what, " is not a tunefarm model package"));
  return pkg;
}

std::map<std::string, std::vector<float>> GraphRuntime::SeededInputs(uint64_t seed) const {
  std::map<std::string, std::vector<float>> inputs;
  for (int i = 0; i < impl_->pkg.inputs_size(); ++i) {
    const std::string& name = impl_->pkg.inputs(i);
    int64_t n = 1;
    for (int64_t d : Shape(name)) n *= d;
    std::vector<float>& v = inputs[name];
    v.resize(size_t(n));
    FillUniform(seed, uint64_t(i), v.data(), n);
  }
  return inputs;
}

const v1::ModelPackage& GraphRuntime::package() const { return impl_->pkg; }

std::vector<int64_t> GraphRuntime::Shape(const std::string& value) const {
  auto t = impl_->tensors.find(value);
  return t == impl_->tensors.end() ? std::vector<int64_t>() : t->second.shape;
}

absl::Status GraphRuntime::Impl::RunOnHost() {
  const FlushDenormals flush;
  for (size_t s = 0; s < steps.size(); ++s) {
    Step& st = steps[s];
    if (st.noop) continue;
    auto t0 = std::chrono::steady_clock::now();
    if (st.kernel >= 0) {
      if (int32_t rc = libs[size_t(st.kernel)]->Run(st.buffers.data(), *pool); rc != 0)
        return absl::InternalError(StrCat("step ", s, ": kernel returned ", rc));
    } else {
      TF_RETURN_IF_ERROR(RunOp(st.args));
    }
    if (options.profile)
      step_sec[s] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  return absl::OkStatus();
}

absl::Status GraphRuntime::Impl::RunOnGpu() {
  for (const std::string& name : pkg.inputs()) {
    const Tensor& t = tensors.at(name);
    TF_RETURN_IF_ERROR(gpu->Upload(ArenaOffset(t), t.data, t.size));
  }
  std::vector<double> sec;
  TF_RETURN_IF_ERROR(gpu->Run(options.profile ? &sec : nullptr));
  for (size_t g = 0; g < sec.size(); ++g) step_sec[size_t(gpu_step_of[g])] = sec[g];
  for (const std::string& name : pkg.outputs()) {
    const Tensor& t = tensors.at(name);
    if (t.constant == nullptr) TF_RETURN_IF_ERROR(gpu->Download(ArenaOffset(t), t.data, t.size));
  }
  return absl::OkStatus();
}

absl::Status GraphRuntime::Run(const std::map<std::string, std::vector<float>>& inputs,
                               std::map<std::string, std::vector<float>>* outputs) {
  Impl& m = *impl_;
  for (const std::string& name : m.pkg.inputs()) {
    auto it = inputs.find(name);
    if (it == inputs.end()) return absl::InvalidArgumentError(StrCat("no input '", name, "'"));
    const Impl::Tensor& t = m.tensors.at(name);
    if (int64_t(it->second.size()) != t.size)
      return absl::InvalidArgumentError(StrCat("input '", name, "' has ", it->second.size(),
                                               " elements, the model needs ", t.size));
    std::copy(it->second.begin(), it->second.end(), t.data);
  }
  for (const auto& [name, v] : inputs) {
    if (std::find(m.pkg.inputs().begin(), m.pkg.inputs().end(), name) == m.pkg.inputs().end())
      return absl::InvalidArgumentError(StrCat("'", name, "' is not an input of the model"));
  }
  m.step_sec.assign(m.options.profile ? m.steps.size() : 0, 0.0);
  TF_RETURN_IF_ERROR(m.gpu != nullptr ? m.RunOnGpu() : m.RunOnHost());
  if (outputs != nullptr) {
    outputs->clear();
    for (const std::string& name : m.pkg.outputs()) {
      const Impl::Tensor& t = m.tensors.at(name);
      (*outputs)[name].assign(t.data, t.data + t.size);
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<float>> GraphRuntime::Value(const std::string& name) const {
  auto t = impl_->tensors.find(name);
  if (t == impl_->tensors.end()) return absl::NotFoundError(StrCat("no value '", name, "'"));
  return std::vector<float>(t->second.data, t->second.data + t->second.size);
}

const std::vector<double>& GraphRuntime::StepSeconds() const { return impl_->step_sec; }

std::string GraphRuntime::StepLabel(int step) const {
  return runtime::StepLabel(impl_->pkg, step);
}

std::string StepLabel(const v1::ModelPackage& package, int step) {
  const v1::PackageStep& s = package.steps(step);
  if (s.has_kernel()) {
    const v1::PackageKernel& k = package.kernels(s.kernel().kernel());
    return StrCat(k.tuned() ? "tuned " : "default ", k.description());
  }
  return StrCat(s.node().op(), " ", s.node().name());
}

std::vector<int64_t> ValueShape(const v1::ModelPackage& package, const std::string& value) {
  for (const v1::PackageValue& v : package.values()) {
    if (v.name() == value) return {v.shape().begin(), v.shape().end()};
  }
  return {};
}

bool IsLayoutFlip(const v1::PackageNode& n) {
  if (n.op() != "Transpose" || n.inputs_size() != 1 || n.outputs_size() != 1) return false;
  auto nhwc = [](const std::string& v) { return absl::EndsWith(v, "@nhwc"); };
  return nhwc(n.inputs(0)) != nhwc(n.outputs(0)) && absl::EndsWith(n.name(), "/transpose");
}

TimeShares SharesOf(const v1::ModelPackage& package, const std::vector<double>& step_seconds) {
  TimeShares t;
  for (int i = 0; i < package.steps_size() && size_t(i) < step_seconds.size(); ++i) {
    const v1::PackageStep& s = package.steps(i);
    const double sec = step_seconds[size_t(i)];
    if (!s.has_kernel()) {
      (IsLayoutFlip(s.node()) ? t.layout : t.native) += sec;
    } else if (s.kernel().kernel() < package.kernels_size() &&
               package.kernels(s.kernel().kernel()).tuned()) {
      t.tuned += sec;
    } else {
      t.default_kernels += sec;
    }
  }
  return t;
}

}  // namespace tunefarm::runtime
