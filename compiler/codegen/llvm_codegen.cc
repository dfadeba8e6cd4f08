#include "compiler/codegen/llvm_codegen.h"

#include <chrono>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "compiler/codegen/cpu_emitter.h"
#include "compiler/codegen/llvm_target.h"
#include "llvm/Analysis/CGSCCPassManager.h"
#include "llvm/Analysis/LoopAnalysisManager.h"
#include "llvm/IR/DiagnosticInfo.h"
#include "llvm/IR/IRBuilder.h"
#include "llvm/IR/LLVMContext.h"
#include "llvm/IR/LegacyPassManager.h"
#include "llvm/IR/Module.h"
#include "llvm/IR/Verifier.h"
#include "llvm/MC/TargetRegistry.h"
#include "llvm/Passes/PassBuilder.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/Support/raw_ostream.h"
#include "llvm/Target/TargetMachine.h"
#include "llvm/Target/TargetOptions.h"

namespace tunefarm::codegen {
namespace {

double MsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

absl::StatusOr<CpuArtifact> CompileCpu(const ir::ComputeDAG& dag, const ir::Stmt& program,
                                       const ir::Target& target, const CpuCompileOptions& options) {
  if (target.is_gpu()) return absl::InvalidArgumentError("CompileCpu needs an llvm target");
  if (ir::HasFloat16(dag)) {
    return absl::UnimplementedError(
        "float16 and bfloat16 kernels build for cuda targets only (CPU kernels are float32)");
  }
  if (dag.tf32) {
    return absl::UnimplementedError(
        "tf32 products build for cuda targets only (CPU kernels are float32)");
  }
  InitLLVMTargets();
  auto t0 = std::chrono::steady_clock::now();
  std::string error;
  const llvm::Target* llvm_target = llvm::TargetRegistry::lookupTarget(target.triple, error);
  if (llvm_target == nullptr) return absl::InvalidArgumentError(absl::StrCat("-mtriple: ", error));
  std::string features = absl::StrJoin(target.attrs, ",");
  llvm::TargetOptions topts;
  std::unique_ptr<llvm::TargetMachine> tm(llvm_target->createTargetMachine(
      target.triple, target.cpu, features, topts, llvm::Reloc::PIC_, std::nullopt,
      llvm::CodeGenOptLevel::Aggressive));
  if (tm == nullptr) return absl::InternalError("LLVM made no TargetMachine");

  llvm::LLVMContext ctx;
  // Optimisation remarks and "loop not vectorized" warnings are hints about a
  // candidate, not failures; keep them off stderr (a search compiles thousands).
  ctx.setDiagnosticHandlerCallBack(
      [](const llvm::DiagnosticInfo* info, void*) {
        if (info->getSeverity() == llvm::DS_Error) {
          llvm::errs() << "tunefarm codegen: LLVM error diagnostic\n";
        }
      },
      nullptr);
  auto mod = std::make_unique<llvm::Module>("tunefarm_kernel", ctx);
  mod->setTargetTriple(target.triple);
  mod->setDataLayout(tm->createDataLayout());
  std::vector<std::string> attrs = {"target-cpu", target.cpu};
  if (!features.empty()) attrs.insert(attrs.end(), {"target-features", features});
  if (target.wide_vectors()) {
    // LLVM prefers 256-bit vectors on these cores, which halves FMA throughput.
    attrs.insert(attrs.end(), {"prefer-vector-width", "512", "min-legal-vector-width", "512"});
  }
  // Lanes per vector chunk: one full vector register of floats.
  CpuEmitter gen(*mod, dag, target.float_lanes());
  gen.Generate(program, attrs);
  std::string verify;
  llvm::raw_string_ostream vs(verify);
  if (llvm::verifyModule(*mod, &vs)) {
    return absl::InternalError(absl::StrCat("generated LLVM IR is invalid: ", vs.str()));
  }

  if (options.optimize) {
    llvm::LoopAnalysisManager lam;
    llvm::FunctionAnalysisManager fam;
    llvm::CGSCCAnalysisManager cgam;
    llvm::ModuleAnalysisManager mam;
    llvm::PipelineTuningOptions pto;
    pto.LoopVectorization = true;
    // No SLP vectorizer: LLVM 19's miscompiles fully unrolled scalar
    // reductions into a buffer inside an outlined parallel loop
    // (docs/tuning-guide.md), and upstream has fixed several such SLP bugs
    // since. Vector code comes from vectorized loops (our own vector
    // IR, and the loop vectorizer), which the schedules ask for explicitly.
    pto.SLPVectorization = false;
    llvm::PassBuilder pb(tm.get(), pto);
    pb.registerModuleAnalyses(mam);
    pb.registerCGSCCAnalyses(cgam);
    pb.registerFunctionAnalyses(fam);
    pb.registerLoopAnalyses(lam);
    pb.crossRegisterProxies(lam, fam, cgam, mam);
    llvm::ModulePassManager mpm = pb.buildPerModuleDefaultPipeline(llvm::OptimizationLevel::O3);
    mpm.run(*mod, mam);
  }
  CpuArtifact out;
  if (options.keep_llvm_ir) {
    llvm::raw_string_ostream os(out.llvm_ir);
    mod->print(os, nullptr);
  }
  auto emit = [&](llvm::CodeGenFileType type, std::string* dest) -> absl::Status {
    llvm::SmallVector<char, 0> buf;
    llvm::raw_svector_ostream os(buf);
    llvm::legacy::PassManager pm;  // LLVM 19's code generator still runs on the legacy PM
    if (tm->addPassesToEmitFile(pm, os, nullptr, type)) {
      return absl::InternalError("the target cannot emit this file type");
    }
    pm.run(*mod);
    dest->assign(buf.begin(), buf.end());
    return absl::OkStatus();
  };
  if (options.keep_assembly)
    TF_RETURN_IF_ERROR(emit(llvm::CodeGenFileType::AssemblyFile, &out.assembly));
  TF_RETURN_IF_ERROR(emit(llvm::CodeGenFileType::ObjectFile, &out.object));
  out.codegen_ms = MsSince(t0);
  if (options.link) {
    auto t1 = std::chrono::steady_clock::now();
    TF_ASSIGN_OR_RETURN(out.shared_object, LinkSharedObject(out.object));
    out.link_ms = MsSince(t1);
  }
  return out;
}

}  // namespace tunefarm::codegen
