#include "worker/builder.h"

#include "absl/strings/str_cat.h"
#include "compiler/codegen/build.h"
#include "compiler/ir/target.h"

namespace tunefarm::worker {

namespace v1 = ::tunefarm::v1;

v1::BuildResult Build(const v1::BuildRequest& request) {
  v1::BuildResult out;
  out.mutable_fingerprint()->set_compiler(codegen::CompilerFingerprint());
  absl::StatusOr<ir::Target> target = ir::Target::Parse(request.target().spec());
  if (!target.ok()) {
    out.set_error(absl::StrCat("target: ", target.status().message()));
    return out;
  }
  absl::StatusOr<schedule::Trace> schedule = schedule::TraceFromProto(request.schedule());
  if (!schedule.ok()) {
    out.set_error(absl::StrCat("schedule: ", schedule.status().message()));
    return out;
  }
  codegen::BuildOptions options;
  options.ptx = request.kind() == v1::ARTIFACT_KIND_PTX;
  options.llvm_ptx = request.llvm_ptx();
  absl::StatusOr<codegen::Artifact> a =
      codegen::Build(request.workload(), *target, *schedule, options);
  if (!a.ok()) {
    out.set_error(std::string(a.status().message()));
    return out;
  }
  return codegen::ToBuildResult(*std::move(a));
}

}  // namespace tunefarm::worker
