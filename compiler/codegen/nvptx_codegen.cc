#include "compiler/codegen/nvptx_codegen.h"

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <unordered_map>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "compiler/codegen/loop_emitter.h"
#include "compiler/codegen/llvm_target.h"
#include "compiler/ir/functor.h"
#include "compiler/schedule/gpu_launch.h"
#include "llvm/Analysis/CGSCCPassManager.h"
#include "llvm/Analysis/LoopAnalysisManager.h"
#include "llvm/Bitcode/BitcodeReader.h"
#include "llvm/IR/DiagnosticInfo.h"
#include "llvm/IR/IRBuilder.h"
#include "llvm/IR/Intrinsics.h"
#include "llvm/IR/IntrinsicsNVPTX.h"
#include "llvm/IR/LLVMContext.h"
#include "llvm/IR/LegacyPassManager.h"
#include "llvm/IR/Module.h"
#include "llvm/IR/Verifier.h"
#include "llvm/Linker/Linker.h"
#include "llvm/MC/TargetRegistry.h"
#include "llvm/Passes/PassBuilder.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/Support/raw_ostream.h"
#include "llvm/Target/TargetMachine.h"
#include "llvm/Target/TargetOptions.h"

namespace tunefarm::codegen {
namespace {

using ir::Expr;
using ir::ExprKind;
using ir::ExprNode;
using ir::Op;
using ir::ScalarType;
using ir::Stmt;

constexpr const char* kTriple = "nvptx64-nvidia-cuda";

void InitNvptxOnce() {
  static std::once_flag once;
  std::call_once(once, [] {
    LLVMInitializeNVPTXTargetInfo();
    LLVMInitializeNVPTXTarget();
    LLVMInitializeNVPTXTargetMC();
    LLVMInitializeNVPTXAsmPrinter();
  });
}

// The PTX ISA version an arch needs at least: what the board's driver must
// accept (JetPack 5's CUDA 11.4 takes up to 7.4).
const char* PtxFeature(int sm) {
  if (sm >= 90) return "+ptx78";
  if (sm >= 89) return "+ptx78";
  if (sm >= 87) return "+ptx74";
  if (sm >= 86) return "+ptx71";
  if (sm >= 80) return "+ptx70";
  if (sm >= 75) return "+ptx63";
  if (sm >= 72) return "+ptx61";
  return "+ptx60";
}

// The tensors a statement loads and stores.
class Accesses : public ir::StmtVisitor {
 public:
  std::set<int> loads, stores;

 protected:
  void VisitExpr(const Expr& e) override {
    ir::VisitLoads(e, [&](const ExprNode& n) { loads.insert(n.tensor); });
  }
  void VisitStore(const Stmt& s) override {
    stores.insert(s->tensor);
    StmtVisitor::VisitStore(s);
  }
};

// One kernel (a GpuLaunch) as an LLVM function on LoopEmitter: the
// launch's bound loops read the block and thread indices, shared buffers
// are addrspace(3) globals, local ones allocas, barriers
// llvm.nvvm.barrier0; float16 tensors are held as half.
class KernelGen : public LoopEmitter {
 public:
  // `wide_index`: 64-bit index math (a tensor of 2^31 elements or more);
  // else 32-bit, as the CUDA C back end does (64-bit multiplies are slow).
  KernelGen(llvm::Module& mod, const ir::ComputeDAG& dag, const schedule::GpuLaunch& launch,
            std::string name, bool wide_index)
      : LoopEmitter(mod, dag,
                    wide_index ? llvm::Type::getInt64Ty(mod.getContext())
                               : llvm::Type::getInt32Ty(mod.getContext())),
        launch_(launch),
        f16_(llvm::Type::getHalfTy(ctx_)) {
    for (const ir::TensorDecl& t : dag.tensors) half_.push_back(t.float16);
    kernel_.name = std::move(name);
    kernel_.grid = launch.grid;
    kernel_.block = launch.block;
    kernel_.shared_bytes = launch.shared_bytes;
  }

  GpuKernel Emit(const std::set<int>& global_tensors) {
    Accesses acc;
    acc.Visit(launch_.nest);
    std::vector<int> params;
    for (int t : global_tensors) {
      if (acc.loads.count(t) || acc.stores.count(t)) params.push_back(t);
    }
    kernel_.params = params;
    auto* fn_ty = llvm::FunctionType::get(llvm::Type::getVoidTy(ctx_),
                                          std::vector<llvm::Type*>(params.size(), ptr_), false);
    fn_ = llvm::Function::Create(fn_ty, llvm::Function::ExternalLinkage, kernel_.name, mod_);
    fn_->addFnAttr(llvm::Attribute::NoUnwind);
    for (size_t i = 0; i < params.size(); ++i) {
      fn_->addParamAttr(unsigned(i), llvm::Attribute::NoAlias);
      if (!acc.stores.count(params[i])) fn_->addParamAttr(unsigned(i), llvm::Attribute::ReadOnly);
      buffers_[size_t(params[i])] = fn_->getArg(unsigned(i));
    }
    Annotate("kernel", 1);
    Annotate("maxntidx", kernel_.threads());
    entry_ = llvm::BasicBlock::Create(ctx_, "entry", fn_);
    b_.SetInsertPoint(entry_);
    PlaceSharedBuffers();
    for (const auto& [var, kind] : launch_.bound) Bind(var, LaunchIndex(kind));
    GenStmt(launch_.nest);
    b_.CreateRetVoid();
    return kernel_;
  }

 private:
  void Annotate(const char* key, int64_t value) {
    llvm::NamedMDNode* md = mod_.getOrInsertNamedMetadata("nvvm.annotations");
    md->addOperand(llvm::MDNode::get(
        ctx_, {llvm::ValueAsMetadata::get(fn_), llvm::MDString::get(ctx_, key),
               llvm::ConstantAsMetadata::get(llvm::ConstantInt::get(i32_, value))}));
  }

  // Up to the static limit, one addrspace(3) array per buffer; past it the
  // buffers are carved from the module's extern shared array (dynamic
  // shared memory the launch passes) at the launch's layout, as the CUDA
  // back end does.
  void PlaceSharedBuffers() {
    kernel_.dynamic_shared = launch_.DynamicShared();
    llvm::GlobalVariable* dynamic = nullptr;
    if (kernel_.dynamic_shared) {
      dynamic = mod_.getNamedGlobal("tf_shared");
      if (dynamic == nullptr) {
        auto* ty = llvm::ArrayType::get(llvm::Type::getInt8Ty(ctx_), 0);
        dynamic =
            new llvm::GlobalVariable(mod_, ty, false, llvm::GlobalValue::ExternalLinkage, nullptr,
                                     "tf_shared", nullptr, llvm::GlobalValue::NotThreadLocal, 3);
        dynamic->setAlignment(llvm::Align(16));
      }
    }
    for (size_t i = 0; i < launch_.shared.size(); ++i) {
      const auto& [tensor, elements] = launch_.shared[i];
      if (dynamic != nullptr) {
        llvm::Constant* p = llvm::ConstantExpr::getGetElementPtr(
            llvm::Type::getInt8Ty(ctx_), dynamic,
            llvm::ConstantInt::get(llvm::Type::getInt64Ty(ctx_),
                                   uint64_t(launch_.shared_offsets[i])));
        buffers_[size_t(tensor)] = llvm::ConstantExpr::getAddrSpaceCast(p, ptr_);
        continue;
      }
      auto* ty = llvm::ArrayType::get(ElementType(tensor), uint64_t(elements));
      auto* g = new llvm::GlobalVariable(mod_, ty, false, llvm::GlobalValue::InternalLinkage,
                                         llvm::UndefValue::get(ty),
                                         absl::StrCat(kernel_.name, "_shared_t", tensor), nullptr,
                                         llvm::GlobalValue::NotThreadLocal, 3);
      g->setAlignment(llvm::Align(16));
      buffers_[size_t(tensor)] = llvm::ConstantExpr::getAddrSpaceCast(g, ptr_);
    }
    if (dynamic != nullptr) kernel_.shared_bytes = launch_.shared_end;
  }

  // The block or thread index a loop of `kind` is bound to.
  llvm::Value* LaunchIndex(ir::ForKind kind) {
    const int axis = ir::BindingAxis(kind);
    static const llvm::Intrinsic::ID kBlock[] = {llvm::Intrinsic::nvvm_read_ptx_sreg_ctaid_x,
                                                 llvm::Intrinsic::nvvm_read_ptx_sreg_ctaid_y,
                                                 llvm::Intrinsic::nvvm_read_ptx_sreg_ctaid_z};
    static const llvm::Intrinsic::ID kThread[] = {llvm::Intrinsic::nvvm_read_ptx_sreg_tid_x,
                                                  llvm::Intrinsic::nvvm_read_ptx_sreg_tid_y,
                                                  llvm::Intrinsic::nvvm_read_ptx_sreg_tid_z};
    llvm::Function* f = llvm::Intrinsic::getDeclaration(
        &mod_, ir::IsBlockBound(kind) ? kBlock[axis] : kThread[axis]);
    return b_.CreateZExt(b_.CreateCall(f), idx_);
  }

  // How a tensor's elements are held: float, or half (float16 tensors).
  llvm::Type* ElementType(int tensor) const override { return half_[size_t(tensor)] ? f16_ : f32_; }
  llvm::Align ElementAlign(int tensor) const { return llvm::Align(half_[size_t(tensor)] ? 2 : 4); }

  // Integer division and remainder by a power of two as a shift and a mask.
  llvm::Value* EmitBinary(const ExprNode& n, llvm::Value* a, llvm::Value* c) override {
    int64_t k = 0;
    const bool pow2 = ir::IsConstInt(n.args[1], &k) && k > 0 && (k & (k - 1)) == 0;
    if (!ir::IsFloat(n.type) && pow2) {
      // An arithmetic shift is floor division for any sign.
      if (n.op == Op::kFloorDiv) return b_.CreateAShr(a, uint64_t(llvm::Log2_64(uint64_t(k))));
      if (n.op == Op::kFloorMod) return b_.CreateAnd(a, llvm::ConstantInt::get(idx_, k - 1));
    }
    return LoopEmitter::EmitBinary(n, a, c);
  }

  llvm::Value* VisitCall(const Expr& e) override {
    const ExprNode& n = *e.get();
    llvm::Value* x = GenExpr(n.args[0]);
    const bool f64 = x->getType()->isDoubleTy();
    const char* libdevice = nullptr;
    switch (n.op) {
      case Op::kSqrt:
      case Op::kAbs: {
        llvm::Function* f = llvm::Intrinsic::getDeclaration(
            &mod_, n.op == Op::kSqrt ? llvm::Intrinsic::sqrt : llvm::Intrinsic::fabs,
            {x->getType()});
        return b_.CreateCall(f, {x});
      }
      case Op::kExp:
        libdevice = f64 ? "__nv_exp" : "__nv_expf";
        break;
      case Op::kLog:
        libdevice = f64 ? "__nv_log" : "__nv_logf";
        break;
      case Op::kTanh:
        libdevice = f64 ? "__nv_tanh" : "__nv_tanhf";
        break;
      default:
        break;
    }
    TF_CHECK(libdevice != nullptr && "unsupported call in the GPU back end");
    llvm::FunctionCallee f = mod_.getOrInsertFunction(
        libdevice, llvm::FunctionType::get(x->getType(), {x->getType()}, false));
    return b_.CreateCall(f, {x});
  }
  llvm::Value* VisitLoad(const Expr& e) override {
    llvm::Value* v = b_.CreateAlignedLoad(ElementType(e->tensor),
                                          ElementAddress(e->tensor, e->args),
                                          ElementAlign(e->tensor));
    return half_[size_t(e->tensor)] ? b_.CreateFPExt(v, f32_) : v;
  }
  llvm::Value* VisitDefault(const Expr&) override {
    TF_CHECK(false && "unsupported expression in the GPU back end");
    return nullptr;
  }

  // One method per statement kind (ir::StmtFunctor).
  void VisitFor(const Stmt& s) override {
    if (ir::IsBlockBound(s->for_kind) || ir::IsThreadBound(s->for_kind)) {
      // The variable is the block or thread index (read at the top); a
      // guard only where the launch is wider than this loop.
      const int axis = ir::BindingAxis(s->for_kind);
      const int64_t launch =
          ir::IsBlockBound(s->for_kind) ? kernel_.grid[size_t(axis)] : kernel_.block[size_t(axis)];
      if (s->extent < launch) {
        llvm::Value* in =
            b_.CreateICmpSLT(VisitVar(s->var), llvm::ConstantInt::get(idx_, s->extent));
        Guarded(in, s->body[0]);
      } else {
        GenStmt(s->body[0]);
      }
      return;
    }
    const bool unrolled =
        s->for_kind == ir::ForKind::kUnrolled || s->for_kind == ir::ForKind::kVThread;
    EmitCountedLoop(s->var->name, llvm::ConstantInt::get(idx_, 0),
                    llvm::ConstantInt::get(idx_, s->extent),
                    unrolled ? LoopMetadata(ir::ForKind::kUnrolled) : nullptr,
                    [&](llvm::Value* i) {
                      Bind(s->var.get(), i);
                      GenStmt(s->body[0]);
                      Unbind();
                    });
  }
  void VisitStore(const Stmt& s) override {
    llvm::Value* v = GenExpr(s->value);
    if (!v->getType()->isFloatTy()) v = b_.CreateFPCast(v, f32_);
    if (half_[size_t(s->tensor)]) v = b_.CreateFPTrunc(v, f16_);  // round to nearest even
    b_.CreateAlignedStore(v, ElementAddress(s->tensor, s->indices), ElementAlign(s->tensor));
  }
  void VisitIf(const Stmt& s) override { Guarded(GenExpr(s->cond), s->body[0]); }
  void VisitAllocate(const Stmt& s) override {
    const size_t t = size_t(s->tensor);
    std::vector<int64_t> saved_shape = shapes_[t];
    llvm::Value* saved_buffer = buffers_[t];
    shapes_[t] = s->shape;
    if (!s->shared) {  // each thread's own: an alloca at the entry (registers after SROA)
      int64_t elements = 1;
      for (int64_t e : s->shape) elements *= e;
      llvm::IRBuilder<> at_entry(entry_, entry_->begin());
      llvm::AllocaInst* a =
          at_entry.CreateAlloca(llvm::ArrayType::get(ElementType(s->tensor), uint64_t(elements)));
      a->setAlignment(llvm::Align(16));
      buffers_[t] = a;
    }  // shared: an addrspace(3) global made at the top
    GenStmt(s->body[0]);
    shapes_[t] = saved_shape;
    buffers_[t] = saved_buffer;
  }
  void VisitBarrier(const Stmt&) override {
    b_.CreateCall(llvm::Intrinsic::getDeclaration(&mod_, llvm::Intrinsic::nvvm_barrier0));
  }
  void VisitDefault(const Stmt&) override {}


  const schedule::GpuLaunch& launch_;
  GpuKernel kernel_;
  std::vector<bool> half_;  // per tensor: held as float16
  llvm::BasicBlock* entry_ = nullptr;
  llvm::Type* f16_;
};

// Links the libdevice functions `mod` calls into it (only those), then
// makes every function but the kernels internal, so the optimizer drops
// what is unused.
absl::Status LinkLibdevice(llvm::Module& mod, const std::set<std::string>& kernels) {
  bool needed = false;
  for (const llvm::Function& f : mod) {
    if (f.isDeclaration() && f.getName().starts_with("__nv_")) needed = true;
  }
  if (needed) {
    const std::string path = LibdevicePath();
    if (path.empty()) {
      return absl::FailedPreconditionError(
          "the program calls exp, log or tanh, and no libdevice.10.bc was found (install the CUDA "
          "toolkit or set TUNEFARM_LIBDEVICE)");
    }
    llvm::ErrorOr<std::unique_ptr<llvm::MemoryBuffer>> buf = llvm::MemoryBuffer::getFile(path);
    if (!buf) return absl::FailedPreconditionError(absl::StrCat("cannot read ", path));
    llvm::Expected<std::unique_ptr<llvm::Module>> lib =
        llvm::parseBitcodeFile((*buf)->getMemBufferRef(), mod.getContext());
    if (!lib) {
      llvm::consumeError(lib.takeError());
      return absl::FailedPreconditionError(absl::StrCat(path, " is not LLVM bitcode"));
    }
    (*lib)->setTargetTriple(mod.getTargetTriple());
    (*lib)->setDataLayout(mod.getDataLayout());
    if (llvm::Linker::linkModules(mod, std::move(*lib), llvm::Linker::Flags::LinkOnlyNeeded)) {
      return absl::InternalError(absl::StrCat("linking ", path, " failed"));
    }
  }
  for (llvm::Function& f : mod) {
    if (!f.isDeclaration() && !kernels.count(f.getName().str()))
      f.setLinkage(llvm::GlobalValue::InternalLinkage);
  }
  return absl::OkStatus();
}

// Whether `s` holds a tensor-core product (kMma), which this route has no
// lowering for.
bool HasMma(const ir::Stmt& s) {
  if (s->kind == ir::StmtKind::kMma) return true;
  for (const ir::Stmt& b : s->body) {
    if (HasMma(b)) return true;
  }
  return false;
}

}  // namespace

std::string LibdevicePath() {
  namespace fs = std::filesystem;
  std::vector<std::string> candidates;
  if (const char* env = std::getenv("TUNEFARM_LIBDEVICE")) candidates.push_back(env);
  if (const char* home = std::getenv("CUDA_HOME"))
    candidates.push_back(absl::StrCat(home, "/nvvm/libdevice/libdevice.10.bc"));
#ifdef TF_CUDA_LIBDEVICE
  candidates.push_back(TF_CUDA_LIBDEVICE);
#endif
  candidates.push_back("/usr/local/cuda/nvvm/libdevice/libdevice.10.bc");
  for (const std::string& c : candidates) {
    std::error_code ec;
    if (fs::is_regular_file(c, ec)) return c;
  }
  return "";
}

std::vector<std::string> LlvmCudaArchs() {
  return {"sm_50", "sm_52", "sm_53", "sm_60", "sm_61", "sm_62", "sm_70",
          "sm_72", "sm_75", "sm_80", "sm_86", "sm_87", "sm_89", "sm_90"};
}

absl::StatusOr<GpuArtifact> CompileCudaWithLlvm(const ir::ComputeDAG& dag, const ir::Stmt& program,
                                                const ir::Target& target) {
  if (!target.is_gpu()) {
    return absl::InvalidArgumentError("CompileCudaWithLlvm needs a cuda target, got " +
                                      target.ToString());
  }
  const std::vector<std::string> archs = LlvmCudaArchs();
  if (std::find(archs.begin(), archs.end(), target.arch()) == archs.end()) {
    return absl::InvalidArgumentError(absl::StrCat("LLVM's NVPTX back end here does not build ",
                                                   target.arch(), " (it builds sm_50..sm_90)"));
  }
  if (ir::HasFloat16(dag) && dag.half == HalfKind::kBFloat16) {
    return absl::UnimplementedError(
        "bfloat16 kernels are built through NVRTC only (sm_80 and newer); the NVPTX route holds "
        "float16 and float32");
  }
  if (HasMma(program)) {
    return absl::UnimplementedError(
        "tensor-core kernels build through NVRTC (sm_80 and newer), not LLVM's NVPTX route");
  }
  const auto t0 = std::chrono::steady_clock::now();
  TF_ASSIGN_OR_RETURN(schedule::GpuLaunchPlan plan, schedule::PlanGpuLaunches(dag, program, target));
  GpuArtifact out;
  std::set<int> global(dag.args.begin(), dag.args.end());
  for (const auto& [tensor, shape] : plan.workspace) {
    int64_t bytes = ir::ElementBytes(dag.tensors[size_t(tensor)]);
    for (int64_t e : shape) bytes *= e;
    out.program.workspace.push_back({tensor, bytes});
    global.insert(tensor);
  }

  InitNvptxOnce();
  std::string error;
  const llvm::Target* nvptx = llvm::TargetRegistry::lookupTarget(kTriple, error);
  if (nvptx == nullptr) return absl::InternalError(absl::StrCat("LLVM has no NVPTX: ", error));
  llvm::TargetOptions topts;
  std::unique_ptr<llvm::TargetMachine> tm(
      nvptx->createTargetMachine(kTriple, target.arch(), PtxFeature(target.sm), topts, std::nullopt,
                                 std::nullopt, llvm::CodeGenOptLevel::Aggressive));
  if (tm == nullptr) return absl::InternalError("LLVM made no NVPTX TargetMachine");

  llvm::LLVMContext ctx;
  ctx.setDiagnosticHandlerCallBack([](const llvm::DiagnosticInfo*, void*) {}, nullptr);
  llvm::Module mod("tunefarm_gpu", ctx);
  mod.setTargetTriple(kTriple);
  mod.setDataLayout(tm->createDataLayout());
  int64_t largest = 1;
  for (int t : global) largest = std::max(largest, dag.NumElements(t));
  std::set<std::string> names;
  for (const schedule::GpuLaunch& launch : plan.kernels) {
    KernelGen k(mod, dag, launch, absl::StrCat("tf_kernel_", out.program.kernels.size()),
                largest >= (int64_t{1} << 31));
    out.program.kernels.push_back(k.Emit(global));
    names.insert(out.program.kernels.back().name);
  }
  std::string verify;
  llvm::raw_string_ostream vs(verify);
  if (llvm::verifyModule(mod, &vs)) {
    return absl::InternalError(absl::StrCat("generated NVPTX IR is invalid: ", vs.str()));
  }
  {
    llvm::raw_string_ostream os(out.program.source);
    mod.print(os, nullptr);
  }
  TF_RETURN_IF_ERROR(LinkLibdevice(mod, names));

  llvm::LoopAnalysisManager lam;
  llvm::FunctionAnalysisManager fam;
  llvm::CGSCCAnalysisManager cgam;
  llvm::ModuleAnalysisManager mam;
  llvm::PassBuilder pb(tm.get());
  pb.registerModuleAnalyses(mam);
  pb.registerCGSCCAnalyses(cgam);
  pb.registerFunctionAnalyses(fam);
  pb.registerLoopAnalyses(lam);
  pb.crossRegisterProxies(lam, fam, cgam, mam);
  // NVPTX's callbacks add NVVMReflect, which settles libdevice's
  // __nvvm_reflect("__CUDA_FTZ") (no flush to zero: the module has no flag).
  llvm::ModulePassManager mpm = pb.buildPerModuleDefaultPipeline(llvm::OptimizationLevel::O3);
  mpm.run(mod, mam);

  llvm::SmallVector<char, 0> buf;
  llvm::raw_svector_ostream os(buf);
  llvm::legacy::PassManager pm;
  if (tm->addPassesToEmitFile(pm, os, nullptr, llvm::CodeGenFileType::AssemblyFile)) {
    return absl::InternalError("LLVM's NVPTX back end cannot emit PTX");
  }
  pm.run(mod);
  out.ptx.assign(buf.begin(), buf.end());
  out.compile_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

}  // namespace tunefarm::codegen
