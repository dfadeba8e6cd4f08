#include "worker/builder.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "common/sha256.h"
#include "compiler/codegen/llvm_codegen.h"
#include "compiler/codegen/llvm_target.h"
#include "compiler/ir/compute.h"
#include "compiler/ir/schedule.h"
#include "compiler/ir/target.h"
#include "compiler/ir/workload.h"

namespace tunefarm::worker {

namespace v1 = ::tunefarm::v1;

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
  if (target->is_gpu()) {
    return fail("target", absl::UnimplementedError("CUDA builds are not built into this worker"));
  }
  if (absl::Status s = codegen::CheckLLVMTarget(*target); !s.ok()) return fail("target", s);
  absl::StatusOr<ir::CanonicalWorkload> cw = ir::Canonicalize(request.workload());
  if (!cw.ok()) return fail("workload", cw.status());
  absl::StatusOr<ir::ComputeDAG> dag = ir::BuildComputeDAG(cw->workload);
  if (!dag.ok()) return fail("workload", dag.status());
  absl::StatusOr<ir::ScheduleState> st =
      ir::ScheduleState::Replay(*dag, request.schedule(), *target);
  if (!st.ok()) return fail("schedule", st.status());
  absl::StatusOr<codegen::CpuArtifact> a = codegen::CompileCpu(st->dag(), ir::Lower(*st), *target);
  if (!a.ok()) return fail("build", a.status());
  out.set_artifact_sha256(Sha256Hex(a->shared_object));
  out.set_artifact(std::move(a->shared_object));
  out.set_compile_sec(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  return out;
}

}  // namespace tunefarm::worker
