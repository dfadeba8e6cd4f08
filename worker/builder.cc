#include "worker/builder.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "common/sha256.h"
#include "common/status_macros.h"
#include "compiler/codegen/cuda_codegen.h"
#include "compiler/codegen/llvm_codegen.h"
#include "compiler/codegen/llvm_target.h"
#include "compiler/codegen/nvrtc_info.h"
#include "compiler/ir/compute.h"
#include "compiler/ir/schedule.h"
#include "compiler/ir/target.h"
#include "compiler/ir/workload.h"

namespace tunefarm::worker {

namespace v1 = ::tunefarm::v1;

namespace {

// A CUDA build: CUDA C through NVRTC, a cubin for the target's sm_XX (or PTX
// when the request asks for it), packed with its launches as a GpuModule.
// The result carries the largest register count and shared memory of its
// kernels and their spills together.
absl::Status BuildGpu(const ir::ScheduleState& st, const ir::Target& target,
                      v1::ArtifactKind kind, v1::BuildResult* out) {
  TF_ASSIGN_OR_RETURN(codegen::GpuProgram program, codegen::EmitCuda(st.dag(), ir::Lower(st), target));
  codegen::CudaCompileOptions co;
  co.ptx = kind == v1::ARTIFACT_KIND_PTX;
  co.cubin = !co.ptx;
  TF_ASSIGN_OR_RETURN(codegen::GpuArtifact a, codegen::CompileCuda(program, target, co));
  v1::GpuModule m;
  m.set_arch(target.arch());
  m.set_image(co.ptx ? a.ptx : a.cubin);
  int registers = 0;
  int64_t shared = 0, spills = 0;
  for (const codegen::GpuKernel& k : a.program.kernels) {
    v1::GpuModule::Kernel* mk = m.add_kernels();
    mk->set_name(k.name);
    for (int64_t g : k.grid) mk->add_grid(g);
    for (int64_t b : k.block) mk->add_block(b);
    mk->set_shared_bytes(k.shared_bytes);
    for (int p : k.params) mk->add_params(p);
    mk->set_registers(k.registers);
    mk->set_spill_store_bytes(k.spill_store_bytes);
    mk->set_spill_load_bytes(k.spill_load_bytes);
    registers = std::max(registers, k.registers);
    shared = std::max(shared, k.shared_bytes);
    spills += std::max<int64_t>(0, k.spill_store_bytes) + std::max<int64_t>(0, k.spill_load_bytes);
  }
  for (const auto& [tensor, bytes] : a.program.workspace) {
    v1::GpuModule::Workspace* w = m.add_workspace();
    w->set_tensor(tensor);
    w->set_bytes(bytes);
  }
  out->set_kind(co.ptx ? v1::ARTIFACT_KIND_PTX : v1::ARTIFACT_KIND_CUBIN);
  out->set_registers_per_thread(registers);
  out->set_shared_bytes(int32_t(shared));
  out->set_spill_bytes(int32_t(spills));
  out->mutable_fingerprint()->set_cuda_toolkit(codegen::NvrtcVersion());
  std::string bytes = m.SerializeAsString();
  out->set_artifact_sha256(Sha256Hex(bytes));
  out->set_artifact(std::move(bytes));
  return absl::OkStatus();
}

}  // namespace

v1::BuildResult Build(const v1::BuildRequest& request) {
  auto t0 = std::chrono::steady_clock::now();
  v1::BuildResult out;
  out.set_kind(v1::ARTIFACT_KIND_SHARED_OBJECT);
  out.mutable_fingerprint()->set_compiler(
      absl::StrCat("tunefarm ", TUNEFARM_VERSION, " LLVM ", codegen::LLVMVersion()));
  auto fail = [&](absl::string_view what, const absl::Status& s) {
    out.set_error(absl::StrCat(what, ": ", s.message()));
    return out;
  };
  absl::StatusOr<ir::Target> target = ir::Target::Parse(request.target().spec());
  if (!target.ok()) return fail("target", target.status());
  if (!target->is_gpu()) {
    if (absl::Status s = codegen::CheckLLVMTarget(*target); !s.ok()) return fail("target", s);
  }
  absl::StatusOr<ir::CanonicalWorkload> cw = ir::Canonicalize(request.workload());
  if (!cw.ok()) return fail("workload", cw.status());
  absl::StatusOr<ir::ComputeDAG> dag = ir::BuildComputeDAG(cw->workload);
  if (!dag.ok()) return fail("workload", dag.status());
  absl::StatusOr<ir::ScheduleState> st =
      ir::ScheduleState::Replay(*dag, request.schedule(), *target);
  if (!st.ok()) return fail("schedule", st.status());
  if (target->is_gpu()) {
    absl::Status s = BuildGpu(*st, *target, request.kind(), &out);
    if (!s.ok()) return fail("build", s);
    out.set_compile_sec(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    return out;
  }
  absl::StatusOr<codegen::CpuArtifact> a = codegen::CompileCpu(st->dag(), ir::Lower(*st), *target);
  if (!a.ok()) return fail("build", a.status());
  out.set_artifact_sha256(Sha256Hex(a->shared_object));
  out.set_artifact(std::move(a->shared_object));
  out.set_compile_sec(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  return out;
}

}  // namespace tunefarm::worker
