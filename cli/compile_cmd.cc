#include "cli/compile_cmd.h"

#include <fstream>
#include <map>
#include <optional>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cli/command_util.h"
#include "cli/flags.h"
#include "compiler/codegen/build.h"
#include "compiler/codegen/cuda_codegen.h"
#include "compiler/codegen/llvm_codegen.h"
#include "compiler/codegen/llvm_target.h"
#include "compiler/codegen/nvptx_codegen.h"
#include "compiler/ir/compute.h"
#include "compiler/ir/workload_spec.h"
#include "compiler/schedule/gpu_tensor_core.h"
#include "compiler/schedule/gpu_tiling.h"
#include "compiler/schedule/handwritten.h"
#include "compiler/schedule/schedule.h"
#include "compiler/schedule/tiling.h"
#include "google/protobuf/text_format.h"
#include "google/protobuf/util/json_util.h"

namespace tunefarm::cli {
namespace {

constexpr const char* kHelp =
    R"(usage: tunefarm compile --workload SPEC --target T [--schedule FILE|default|handwritten]
                        --emit ir|llvm|asm|obj|so|cuda|ptx|cubin|schedule [-o FILE]

  --workload  the workload, e.g. 'conv2d_nchw(N=1,C=64,H=56,W=56,K=64,R=3,S=3,stride=1,pad=1)+bias+relu'
  --target    e.g. 'llvm -mtriple=aarch64-linux-gnu -mcpu=cortex-a78' ('host' for this machine),
              'cuda -arch=sm_87' (no GPU needed: NVRTC compiles here)
  --schedule  a tunefarm.v1.Schedule as JSON or text format; default: the default schedule;
              handwritten: the hand-written register-tiled schedule (conv2d only);
              a schedule with a sketch_id and decisions but no steps is built from
              that sketch (the decisions `tunefarm-bench search --trace` prints)
  --emit      ir: the lowered loop program; llvm: LLVM IR after O3 (llvm-noopt: before);
              asm; obj: ELF object;
              so: shared object; schedule: the schedule used, as JSON;
              cuda targets: cuda: the generated CUDA C; ptx; cubin (needs -o);
              ptx and cubin print each kernel's launch and resources on stderr
  -o          output file (default: stdout; obj and so need -o)

)";

// The flags of one compile, checked: the workload parsed, the target known.
struct CompileFlags {
  v1::Workload workload;
  ir::Target target;
  std::optional<std::string> schedule;  // --schedule as given (absent: the default)
  std::string emit;
  std::optional<std::string> output;    // -o
};

// Parses and checks compile's flags into `cf`. Returns the exit code when the
// command ends here (0 after --help, 2 for bad usage), else nullopt.
std::optional<int> ParseCompileFlags(const std::vector<std::string>& args, std::ostream& out,
                                     std::ostream& err, CompileFlags* cf) {
  absl::StatusOr<Flags> parsed =
      ParseFlags(args, FlagSpec{{"workload", "target", "schedule", "emit", "o"}, {}}, "compile");
  if (!parsed.ok()) return Fail(err, 2, std::string(parsed.status().message()));
  if (parsed->help()) {
    out << kHelp << ir::WorkloadSpecHelp();
    return 0;
  }
  if (!parsed->positional().empty()) {
    return Fail(err, 2, absl::StrCat("compile: unexpected argument '", parsed->positional()[0],
                                     "' (see --help)"));
  }
  std::map<std::string, std::string> flags;
  for (const auto& [name, values] : parsed->given()) flags[name] = values.back();
  for (const char* required : {"workload", "target", "emit"}) {
    if (!flags.count(required)) return Fail(err, 2, absl::StrCat("compile needs --", required));
  }
  auto workload = ir::ParseWorkloadSpec(flags["workload"]);
  if (!workload.ok()) return Fail(err, 2, std::string(workload.status().message()));
  absl::StatusOr<ir::Target> parsed_target = ParseTargetFlag(flags["target"]);
  if (!parsed_target.ok()) return Fail(err, 2, std::string(parsed_target.status().message()));
  if (!parsed_target->is_gpu()) {
    if (absl::Status s = codegen::CheckLLVMTarget(*parsed_target); !s.ok()) {
      return Fail(err, 2, std::string(s.message()));
    }
  }
  cf->workload = *std::move(workload);
  cf->target = *parsed_target;
  if (flags.count("schedule")) cf->schedule = flags["schedule"];
  cf->emit = flags["emit"];
  if (flags.count("o")) cf->output = flags["o"];
  return std::nullopt;
}

// Builds the steps of `schedule` (read from `path`: a sketch id and its
// decisions, no steps) on the sketch for `target`. Returns the exit code on
// failure (2, with the message on `err`), else nullopt.
std::optional<int> BuildFromDecisions(const std::string& path, const ir::ComputeDAG& dag,
                                      const ir::Target& target, std::ostream& err,
                                      schedule::Trace* schedule) {
  const absl::Span<const int64_t> d(schedule->decisions);
  absl::StatusOr<schedule::Trace> built;
  if (schedule->sketch_id == schedule::kTilingSketchId && !target.is_gpu()) {
    built = schedule::BuildTiledSchedule(dag, target, d);
  } else if (schedule->sketch_id == schedule::kGpuTilingSketchId && target.is_gpu()) {
    built = schedule::BuildGpuTiledSchedule(dag, target, d);
  } else if (schedule->sketch_id == ir::kGpuTensorCoreSketchId && target.is_gpu()) {
    std::optional<schedule::TensorCoreTiling> t = schedule::TensorCoreTiling::Decode(d, dag.tf32);
    built = t ? schedule::TensorCoreSchedule(dag, target, *t)
              : absl::InvalidArgumentError(absl::StrCat(
                    "a tensor-core schedule has ", schedule::TensorCoreTiling{}.Encode().size(),
                    " decisions (one more with wgmma), not ", d.size()));
  } else {
    return Fail(
        err, 2,
        absl::StrCat(path, ": decisions of sketch ", schedule->sketch_id,
                     " do not build on target ", target.ToString(), " (sketch ",
                     target.is_gpu() ? schedule::kGpuTilingSketchId : schedule::kTilingSketchId, " does)"));
  }
  if (!built.ok()) return Fail(err, 2, absl::StrCat(path, ": ", built.status().message()));
  *schedule = *std::move(built);
  return std::nullopt;
}

// Reads the schedule file `path` (JSON or text; steps, or a sketch's
// decisions that are built here). Returns the exit code on failure, else nullopt.
std::optional<int> ReadScheduleFile(const std::string& path, const ir::ComputeDAG& dag,
                                    const ir::Target& target, std::ostream& err,
                                    schedule::Trace* schedule) {
  std::ifstream in(path);
  if (!in) return Fail(err, 2, absl::StrCat("cannot read ", path));
  std::stringstream ss;
  ss << in.rdbuf();
  v1::Schedule wire;
  if (!google::protobuf::util::JsonStringToMessage(ss.str(), &wire).ok() &&
      !google::protobuf::TextFormat::ParseFromString(ss.str(), &wire)) {
    return Fail(err, 2, absl::StrCat(path, " is not a Schedule (JSON or text)"));
  }
  absl::StatusOr<schedule::Trace> trace = schedule::TraceFromProto(wire);
  if (!trace.ok()) return Fail(err, 1, absl::StrCat("schedule: ", trace.status().message()));
  *schedule = *std::move(trace);
  if (schedule->steps.empty() && !schedule->decisions.empty()) {
    return BuildFromDecisions(path, dag, target, err, schedule);
  }
  return std::nullopt;
}

// The schedule --schedule names: the default, the hand-written one, or a
// file. Returns the exit code on failure, else nullopt.
std::optional<int> ChooseSchedule(const CompileFlags& cf, const ir::ComputeDAG& dag,
                                  std::ostream& err, schedule::Trace* schedule) {
  if (!cf.schedule || *cf.schedule == "default") {
    *schedule = schedule::DefaultSchedule(dag, cf.target);
  } else if (*cf.schedule == "handwritten") {
    auto hw = schedule::HandwrittenConv2dSchedule(dag, cf.target,
                                                  schedule::PickConvTile(dag, cf.target));
    if (!hw.ok())
      return Fail(err, 1, absl::StrCat("handwritten schedule: ", hw.status().message()));
    *schedule = *std::move(hw);
  } else {
    return ReadScheduleFile(*cf.schedule, dag, cf.target, err, schedule);
  }
  return std::nullopt;
}

// What --emit produces: the text (or bytes) and whether it is binary.
struct Emitted {
  std::string text;
  bool binary = false;
};

// --emit cuda, ptx or cubin: CUDA C, or PTX/cubin (through NVRTC, or PTX
// through LLVM's NVPTX back end for an arch NVRTC does not build); each
// kernel's launch on `err`. Returns the exit code on failure, else nullopt.
std::optional<int> EmitGpu(const CompileFlags& cf, const schedule::ScheduleState& state,
                           const ir::Stmt& program, std::ostream& err, Emitted* e) {
  const std::string& emit = cf.emit;
  const ir::Target& target = cf.target;
  if (emit == "ptx" && target.is_gpu() &&
      codegen::RouteFor(target.arch()) == codegen::GpuRoute::kLlvmPtx) {
    // An arch NVRTC does not build: PTX through LLVM's NVPTX back end.
    auto art = codegen::CompileCudaWithLlvm(state.dag(), program, target);
    if (!art.ok()) return Fail(err, 1, std::string(art.status().message()));
    err << "PTX through LLVM's NVPTX back end (this NVRTC does not build " << target.arch()
        << ")\n";
    for (const codegen::GpuKernel& k : art->program.kernels) {
      err << k.name << ": grid " << absl::StrJoin(k.grid, "x") << ", block "
          << absl::StrJoin(k.block, "x") << ", " << k.shared_bytes << " B shared\n";
    }
    e->text = art->ptx;
    return std::nullopt;
  }
  if (!target.is_gpu()) {
    return Fail(err, 2, absl::StrCat("--emit ", emit, " needs a cuda target, e.g. 'cuda -arch=sm_87'"));
  }
  auto program_or = codegen::EmitCuda(state.dag(), program, target);
  if (!program_or.ok()) return Fail(err, 1, std::string(program_or.status().message()));
  if (emit == "cuda") {
    e->text = program_or->source;
    return std::nullopt;
  }
  codegen::CudaCompileOptions o;
  o.cubin = emit == "cubin";
  o.ptx = emit == "ptx";
  auto art = codegen::CompileCuda(*program_or, target, o);
  if (!art.ok()) return Fail(err, 1, std::string(art.status().message()));
  e->text = emit == "ptx" ? art->ptx : art->cubin;
  e->binary = emit == "cubin";
  for (const codegen::GpuKernel& k : art->program.kernels) {
    err << k.name << ": grid " << absl::StrJoin(k.grid, "x") << ", block "
        << absl::StrJoin(k.block, "x") << ", " << k.shared_bytes << " B shared"
        << (k.dynamic_shared ? " (dynamic)" : "");
    if (k.registers >= 0) {
      err << ", " << k.registers << " registers, " << k.spill_store_bytes
          << " B spill stores, " << k.spill_load_bytes << " B spill loads";
    }
    err << "\n";
  }
  return std::nullopt;
}

// --emit llvm, llvm-noopt, asm, obj or so for an llvm target. Returns the
// exit code on failure, else nullopt.
std::optional<int> EmitCpu(const CompileFlags& cf, const schedule::ScheduleState& state,
                           const ir::Stmt& program, std::ostream& err, Emitted* e) {
  const std::string& emit = cf.emit;
  codegen::CpuCompileOptions o;
  o.keep_llvm_ir = emit == "llvm" || emit == "llvm-noopt";
  o.optimize = emit != "llvm-noopt";
  o.keep_assembly = emit == "asm";
  o.link = emit == "so";
  auto art = codegen::CompileCpu(state.dag(), program, cf.target, o);
  if (!art.ok()) return Fail(err, 1, std::string(art.status().message()));
  e->text = o.keep_llvm_ir  ? art->llvm_ir
            : emit == "asm" ? art->assembly
            : emit == "obj" ? art->object
                            : art->shared_object;
  e->binary = emit == "obj" || emit == "so";
  return std::nullopt;
}

// What --emit asks for, of the scheduled and lowered program. Returns the
// exit code on failure (2: an --emit the target does not take), else nullopt.
std::optional<int> Emit(const CompileFlags& cf, const schedule::Trace& schedule,
                        const schedule::ScheduleState& state, const ir::Stmt& program,
                        std::ostream& err, Emitted* e) {
  const std::string& emit = cf.emit;
  if (emit == "ir") {
    std::vector<std::string> names = state.dag().TensorNames();
    e->text = ir::ToString(program, &names);
  } else if (emit == "schedule") {
    google::protobuf::util::JsonPrintOptions o;
    o.add_whitespace = true;
    (void)google::protobuf::util::MessageToJsonString(schedule::ToProto(schedule), &e->text, o);
  } else if (emit == "cuda" || emit == "ptx" || emit == "cubin") {
    return EmitGpu(cf, state, program, err, e);
  } else if (cf.target.is_gpu()) {
    return Fail(err, 2, absl::StrCat("--emit ", emit, " is for llvm targets; a cuda target emits cuda, ptx or cubin"));
  } else if (emit == "llvm" || emit == "llvm-noopt" || emit == "asm" || emit == "obj" ||
             emit == "so") {
    return EmitCpu(cf, state, program, err, e);
  } else {
    return Fail(err, 2, absl::StrCat("--emit ", emit,
                                     " is not one of ir, llvm, asm, obj, so, cuda, ptx, cubin, "
                                     "schedule"));
  }
  return std::nullopt;
}

// Writes `e` to -o, or to `out` when there is none (binary output needs -o).
// Returns the exit code.
int WriteEmitted(const CompileFlags& cf, const Emitted& e, std::ostream& out, std::ostream& err) {
  if (!cf.output) {
    if (e.binary) return Fail(err, 2, absl::StrCat("--emit ", cf.emit, " needs -o FILE"));
    out << e.text;
    return 0;
  }
  std::ofstream f(*cf.output, std::ios::binary);
  f << e.text;
  if (!f) return Fail(err, 1, absl::StrCat("cannot write ", *cf.output));
  return 0;
}

}  // namespace

int RunCompile(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  CompileFlags cf;
  if (std::optional<int> code = ParseCompileFlags(args, out, err, &cf)) return *code;
  auto dag = ir::BuildComputeDAG(cf.workload);
  if (!dag.ok()) return Fail(err, 1, std::string(dag.status().message()));
  schedule::Trace schedule;
  if (std::optional<int> code = ChooseSchedule(cf, *dag, err, &schedule)) return *code;
  auto state = schedule::ScheduleState::Replay(*dag, schedule, cf.target);
  if (!state.ok()) return Fail(err, 1, absl::StrCat("schedule: ", state.status().message()));
  ir::Stmt program = schedule::Lower(*state);
  Emitted e;
  if (std::optional<int> code = Emit(cf, schedule, *state, program, err, &e)) return *code;
  return WriteEmitted(cf, e, out, err);
}

}  // namespace tunefarm::cli
