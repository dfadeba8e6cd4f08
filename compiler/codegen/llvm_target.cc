#include "compiler/codegen/llvm_target.h"

#include <memory>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "llvm/Config/llvm-config.h"
#include "llvm/MC/MCSubtargetInfo.h"
#include "llvm/MC/TargetRegistry.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/Target/TargetMachine.h"
#include "llvm/TargetParser/Host.h"
#include "llvm/TargetParser/Triple.h"
#include <thread>

namespace tunefarm::codegen {
namespace {

void InitTargetsOnceImpl() {
  static std::once_flag once;
  std::call_once(once, [] {
    LLVMInitializeX86TargetInfo();
    LLVMInitializeX86Target();
    LLVMInitializeX86TargetMC();
    LLVMInitializeX86AsmPrinter();
    LLVMInitializeAArch64TargetInfo();
    LLVMInitializeAArch64Target();
    LLVMInitializeAArch64TargetMC();
    LLVMInitializeAArch64AsmPrinter();
  });
}

}  // namespace

void InitLLVMTargets() { InitTargetsOnceImpl(); }

std::string LLVMVersion() { return LLVM_VERSION_STRING; }

ir::Target HostTarget() {
  ir::Target t;
  t.kind = ir::Target::Kind::kLLVM;
  llvm::Triple host(llvm::sys::getProcessTriple());
  t.triple = host.getArch() == llvm::Triple::aarch64 ? "aarch64-linux-gnu" : "x86_64-linux-gnu";
  t.cpu = llvm::sys::getHostCPUName().str();
  t.num_cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return t;
}

std::vector<std::string> BuildableTriples() {
  return {"x86_64-linux-gnu", "aarch64-linux-gnu"};
}

namespace {

// LLVM's subtarget information for `triple` (its generic CPU); null when
// LLVM does not know the triple.
std::unique_ptr<llvm::MCSubtargetInfo> GenericSubtarget(const std::string& triple) {
  InitLLVMTargets();
  std::string error;
  const llvm::Target* t = llvm::TargetRegistry::lookupTarget(triple, error);
  if (t == nullptr) return nullptr;
  return std::unique_ptr<llvm::MCSubtargetInfo>(t->createMCSubtargetInfo(triple, "generic", ""));
}

}  // namespace

std::vector<std::string> KnownCpus(const std::string& triple) {
  std::vector<std::string> out;
  if (auto sti = GenericSubtarget(triple)) {
    for (const auto& kv : sti->getAllProcessorDescriptions()) out.push_back(kv.Key);
  }
  return out;
}

std::vector<std::string> KnownFeatures(const std::string& triple) {
  std::vector<std::string> out;
  if (auto sti = GenericSubtarget(triple)) {
    for (const auto& kv : sti->getAllProcessorFeatures()) out.push_back(kv.Key);
  }
  return out;
}

absl::Status CheckLLVMTarget(const ir::Target& target) {
  if (target.kind != ir::Target::Kind::kLLVM) {
    return absl::InvalidArgumentError("not an llvm target");
  }
  InitLLVMTargets();
  std::string error;
  const llvm::Target* t = llvm::TargetRegistry::lookupTarget(target.triple, error);
  if (t == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("target field -mtriple='", target.triple, "': ", error));
  }
  std::unique_ptr<llvm::MCSubtargetInfo> sti(
      t->createMCSubtargetInfo(target.triple, target.cpu, ""));
  if (sti == nullptr) return absl::InternalError("LLVM made no subtarget info");
  if (target.cpu != "generic" && !sti->isCPUStringValid(target.cpu)) {
    return absl::InvalidArgumentError(absl::StrCat("target field -mcpu='", target.cpu,
                                                   "' is not a CPU LLVM ", LLVMVersion(),
                                                   " knows for ", target.triple));
  }
  for (const std::string& attr : target.attrs) {
    std::string name = attr.substr(1);
    bool known = false;
    for (const llvm::SubtargetFeatureKV& kv : sti->getAllProcessorFeatures()) {
      if (name == kv.Key) known = true;
    }
    if (!known) {
      return absl::InvalidArgumentError(absl::StrCat("target field -mattr: feature '", name,
                                                     "' is unknown for ", target.triple));
    }
  }
  return absl::OkStatus();
}

}  // namespace tunefarm::codegen
