// CPU code generation: loop IR -> LLVM IR (CpuEmitter, cpu_emitter.h, on
// the LoopEmitter the NVPTX back end shares) -> O3 for a TargetMachine
// built from the target -> ELF object -> shared object (lld).
// Works for any x86_64 or aarch64 target from this machine. Thread safe: each
// call owns its LLVMContext.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "compiler/ir/compute.h"
#include "compiler/ir/stmt.h"
#include "compiler/ir/target.h"

namespace tunefarm::codegen {

struct CpuCompileOptions {
  bool keep_llvm_ir = false;  // fill CpuArtifact::llvm_ir (after O3)
  bool keep_assembly = false;  // fill CpuArtifact::assembly
  bool link = true;            // produce the shared object
  bool optimize = true;        // run the O3 pipeline (off: for looking at the IR we emit)
};

struct CpuArtifact {
  std::string object;          // ELF relocatable
  std::string shared_object;   // ELF shared object exporting tf_main
  std::string llvm_ir;
  std::string assembly;
  double codegen_ms = 0;       // IR building and O3
  double link_ms = 0;
};

absl::StatusOr<CpuArtifact> CompileCpu(const ir::ComputeDAG& dag, const ir::Stmt& program,
                                       const ir::Target& target,
                                       const CpuCompileOptions& options = {});

// Links an ELF object into a shared object with ld.lld (LLVM 19).
absl::StatusOr<std::string> LinkSharedObject(const std::string& object);

}  // namespace tunefarm::codegen
