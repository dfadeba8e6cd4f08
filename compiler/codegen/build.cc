#include "compiler/codegen/build.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "common/sha256.h"
#include "compiler/codegen/cuda_codegen.h"
#include "compiler/codegen/llvm_target.h"
#include "compiler/codegen/nvptx_codegen.h"
#include "compiler/codegen/nvrtc_info.h"
#include "compiler/ir/workload.h"

namespace tunefarm::codegen {

namespace v1 = ::tunefarm::v1;

namespace {

absl::Status Prefixed(absl::string_view stage, const absl::Status& s) {
  return absl::Status(s.code(), absl::StrCat(stage, ": ", s.message()));
}

// The route that builds `arch`: NVRTC where it can, else LLVM's NVPTX
// back end (PTX).
GpuRoute RouteFor(const std::string& arch, bool llvm_ptx) {
  const std::vector<std::string> nvrtc = NvrtcSupportedArchs();
  if (!llvm_ptx && std::find(nvrtc.begin(), nvrtc.end(), arch) != nvrtc.end())
    return GpuRoute::kNvrtc;
  const std::vector<std::string> llvm = LlvmCudaArchs();
  if (std::find(llvm.begin(), llvm.end(), arch) != llvm.end()) return GpuRoute::kLlvmPtx;
  return GpuRoute::kNone;
}

// CUDA C through NVRTC, or LLVM IR through NVPTX, packed with its launches
// as a GpuModule.
absl::Status BuildGpu(const schedule::ScheduleState& st, const ir::Target& target, bool ptx,
                      bool llvm_ptx, Artifact* out) {
  absl::StatusOr<GpuArtifact> a;
  switch (RouteFor(target.arch(), llvm_ptx)) {
    case GpuRoute::kNvrtc: {
      absl::StatusOr<GpuProgram> program = EmitCuda(st.dag(), schedule::Lower(st), target);
      if (!program.ok()) return program.status();
      CudaCompileOptions co;
      co.ptx = ptx;
      co.cubin = !ptx;
      a = CompileCuda(*program, target, co);
      break;
    }
    case GpuRoute::kLlvmPtx:
      ptx = true;
      a = CompileCudaWithLlvm(st.dag(), schedule::Lower(st), target);
      break;
    case GpuRoute::kNone:
      // NVRTC's own message names the archs it builds.
      a = CompileCuda(GpuProgram{}, target, {});
      if (a.ok())
        a = absl::FailedPreconditionError(absl::StrCat("no route builds ", target.arch()));
      break;
  }
  if (!a.ok()) return a.status();
  v1::GpuModule m;
  m.set_arch(target.arch());
  m.set_image(ptx ? a->ptx : a->cubin);
  for (const GpuKernel& k : a->program.kernels) {
    v1::GpuModule::Kernel* mk = m.add_kernels();
    mk->set_name(k.name);
    for (int64_t g : k.grid) mk->add_grid(g);
    for (int64_t b : k.block) mk->add_block(b);
    mk->set_shared_bytes(k.shared_bytes);
    mk->set_dynamic_shared(k.dynamic_shared);
    for (int p : k.params) mk->add_params(p);
    mk->set_registers(k.registers);
    mk->set_spill_store_bytes(k.spill_store_bytes);
    mk->set_spill_load_bytes(k.spill_load_bytes);
    out->registers = std::max(out->registers, k.registers);
    out->shared_bytes = std::max(out->shared_bytes, k.shared_bytes);
    out->spill_bytes +=
        std::max<int64_t>(0, k.spill_store_bytes) + std::max<int64_t>(0, k.spill_load_bytes);
  }
  for (const auto& [tensor, bytes] : a->program.workspace) {
    v1::GpuModule::Workspace* w = m.add_workspace();
    w->set_tensor(tensor);
    w->set_bytes(bytes);
  }
  out->kind = ptx ? v1::ARTIFACT_KIND_PTX : v1::ARTIFACT_KIND_CUBIN;
  out->bytes = m.SerializeAsString();
  return absl::OkStatus();
}

double Since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

GpuRoute RouteFor(const std::string& arch) { return RouteFor(arch, false); }

absl::StatusOr<Artifact> Build(const schedule::ScheduleState& scheduled, const ir::Target& target,
                               const BuildOptions& options) {
  const auto t0 = std::chrono::steady_clock::now();
  Artifact out;
  out.signature = ir::SignatureOf(scheduled.dag());
  if (target.is_gpu()) {
    if (absl::Status s = BuildGpu(scheduled, target, options.ptx, options.llvm_ptx, &out); !s.ok())
      return Prefixed("build", s);
  } else {
    if (absl::Status s = CheckLLVMTarget(target); !s.ok()) return Prefixed("target", s);
    absl::StatusOr<CpuArtifact> a =
        CompileCpu(scheduled.dag(), schedule::Lower(scheduled), target, options.cpu);
    if (!a.ok()) return Prefixed("build", a.status());
    out.kind = v1::ARTIFACT_KIND_SHARED_OBJECT;
    out.bytes = std::move(a->shared_object);
    out.llvm_ir = std::move(a->llvm_ir);
    out.assembly = std::move(a->assembly);
  }
  out.seconds = Since(t0);
  return out;
}

absl::StatusOr<Artifact> Build(const ir::ComputeDAG& dag, const ir::Target& target,
                               const schedule::Trace& schedule, const BuildOptions& options) {
  const auto t0 = std::chrono::steady_clock::now();
  absl::StatusOr<schedule::ScheduleState> st = schedule::ScheduleState::Replay(dag, schedule, target);
  if (!st.ok()) return Prefixed("schedule", st.status());
  absl::StatusOr<Artifact> a = Build(*st, target, options);
  if (a.ok()) a->seconds = Since(t0);
  return a;
}

absl::StatusOr<Artifact> Build(const v1::Workload& workload, const ir::Target& target,
                               const schedule::Trace& schedule, const BuildOptions& options) {
  const auto t0 = std::chrono::steady_clock::now();
  absl::StatusOr<ir::ComputeDAG> dag = ir::BuildComputeDAG(workload);
  if (!dag.ok()) return Prefixed("workload", dag.status());
  absl::StatusOr<Artifact> a = Build(*dag, target, schedule, options);
  if (a.ok()) a->seconds = Since(t0);
  return a;
}

v1::BuildResult ToBuildResult(Artifact artifact) {
  v1::BuildResult out;
  out.set_kind(artifact.kind);
  out.set_artifact_sha256(Sha256Hex(artifact.bytes));
  out.set_artifact(std::move(artifact.bytes));
  *out.mutable_signature() = std::move(artifact.signature);
  out.set_compile_sec(artifact.seconds);
  out.mutable_fingerprint()->set_compiler(CompilerFingerprint());
  if (artifact.kind != v1::ARTIFACT_KIND_SHARED_OBJECT) {
    out.set_registers_per_thread(artifact.registers);
    out.set_shared_bytes(int32_t(artifact.shared_bytes));
    out.set_spill_bytes(int32_t(artifact.spill_bytes));
    out.mutable_fingerprint()->set_cuda_toolkit(NvrtcVersion());
  }
  return out;
}

std::string CompilerFingerprint() {
  return absl::StrCat("tunefarm ", TUNEFARM_VERSION, " LLVM ", LLVMVersion());
}

}  // namespace tunefarm::codegen
