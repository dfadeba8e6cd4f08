// The one build path: (workload, target, schedule) -> Artifact. Replays the
// schedule on the workload's compute DAG, lowers it and generates code: an
// ELF shared object through LLVM for llvm targets, a GpuModule (cubin or
// PTX with its launches) through NVRTC for cuda targets, or PTX through
// LLVM's NVPTX back end for the archs NVRTC does not build (RouteFor). The artifact
// carries its KernelSignature, so whoever runs it needs no compiler code.
//
//   TF_ASSIGN_OR_RETURN(Artifact a, Build(workload, target, schedule));
//   // a.bytes to the runtime, with a.signature
//
// Errors name the stage that failed: "workload: ...", "target: ...",
// "schedule: ..." (the schedule does not apply), "build: ..." (code
// generation or the toolchain). Thread safe.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "compiler/codegen/llvm_codegen.h"
#include "compiler/ir/compute.h"
#include "compiler/schedule/schedule.h"
#include "compiler/ir/target.h"
#include "tunefarm/v1/farm.pb.h"

namespace tunefarm::codegen {

struct BuildOptions {
  bool ptx = false;        // cuda targets: PTX (the driver compiles it) instead of a cubin
  // cuda targets: PTX through LLVM's NVPTX back end even where NVRTC builds
  // the arch (the route of archs it does not build: RouteFor).
  bool llvm_ptx = false;
  CpuCompileOptions cpu;   // llvm targets: what else to keep (IR, assembly)
};

struct Artifact {
  ::tunefarm::v1::ArtifactKind kind = ::tunefarm::v1::ARTIFACT_KIND_SHARED_OBJECT;
  std::string bytes;  // the shared object, or a serialized GpuModule
  ::tunefarm::v1::KernelSignature signature;
  // cuda builds: the largest registers per thread and static shared memory
  // of the kernels, and their spills together.
  int registers = 0;
  int64_t shared_bytes = 0;
  int64_t spill_bytes = 0;
  std::string llvm_ir, assembly;  // llvm builds, when BuildOptions::cpu asks
  double seconds = 0;             // replay, lowering and code generation
};

absl::StatusOr<Artifact> Build(const schedule::ScheduleState& scheduled, const ir::Target& target,
                               const BuildOptions& options = {});
// `dag`: BuildComputeDAG of the workload.
absl::StatusOr<Artifact> Build(const ir::ComputeDAG& dag, const ir::Target& target,
                               const schedule::Trace& schedule, const BuildOptions& options = {});
absl::StatusOr<Artifact> Build(const ::tunefarm::v1::Workload& workload, const ir::Target& target,
                               const schedule::Trace& schedule, const BuildOptions& options = {});

// How a cuda arch is built here: NVRTC (CUDA C -> cubin or PTX), LLVM's
// NVPTX back end (LLVM IR -> PTX the board's driver compiles; archs NVRTC
// no longer builds, e.g. Xavier's sm_72), or not at all.
enum class GpuRoute { kNvrtc, kLlvmPtx, kNone };
GpuRoute RouteFor(const std::string& arch);

// The wire form a worker reports (BuildResult), with the build's digest.
::tunefarm::v1::BuildResult ToBuildResult(Artifact artifact);

// "tunefarm <version> LLVM <version>": the fingerprint's compiler.
std::string CompilerFingerprint();

}  // namespace tunefarm::codegen
