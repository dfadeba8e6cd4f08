// NVRTC: CUDA C -> cubin (SASS for sm_XX) and/or PTX, with ptxas's
// per-kernel report (registers, stack, spills) read from the log.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <cstdio>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/status_macros.h"
#include "compiler/codegen/cuda_codegen.h"
#include "compiler/codegen/nvrtc_info.h"

#ifdef TUNEFARM_HAVE_CUDA
#include <nvrtc.h>
#endif

namespace tunefarm::codegen {

#ifdef TUNEFARM_HAVE_CUDA
namespace {

using absl::StrCat;

// Reads "ptxas info : Compiling entry function 'NAME' for 'sm_XX'", then
// "N bytes stack frame, N bytes spill stores, N bytes spill loads" and
// "Used N registers, ..." into the kernel named.
void ApplyPtxasReport(const std::string& log, std::vector<GpuKernel>* kernels) {
  GpuKernel* current = nullptr;
  for (absl::string_view line : absl::StrSplit(log, '\n')) {
    size_t at = line.find("Compiling entry function '");
    if (at != absl::string_view::npos) {
      absl::string_view rest = line.substr(at + strlen("Compiling entry function '"));
      absl::string_view name = rest.substr(0, rest.find('\''));
      current = nullptr;
      for (GpuKernel& k : *kernels) {
        if (k.name == name) current = &k;
      }
      continue;
    }
    if (current == nullptr) continue;
    long long a = 0, b = 0, c = 0;
    std::string text(line);
    if (const char* p = strstr(text.c_str(), "bytes stack frame");
        p != nullptr &&
        std::sscanf(text.c_str() + text.find('.') + 1, "%lld bytes stack frame, %lld bytes spill stores, %lld bytes spill loads", &a, &b, &c) == 3) {
      current->stack_bytes = a, current->spill_store_bytes = b, current->spill_load_bytes = c;
      continue;
    }
    size_t used = text.find("Used ");
    if (used != std::string::npos && std::sscanf(text.c_str() + used, "Used %lld registers", &a) == 1) {
      current->registers = int(a);
    }
  }
}

struct Program {
  nvrtcProgram p = nullptr;
  ~Program() {
    if (p != nullptr) nvrtcDestroyProgram(&p);
  }
};

absl::StatusOr<std::string> CompileOnce(const std::string& source, const std::string& arch,
                                        bool cubin, std::string* log) {
  Program prog;
  if (nvrtcCreateProgram(&prog.p, source.c_str(), "tunefarm.cu", 0, nullptr, nullptr) !=
      NVRTC_SUCCESS) {
    return absl::InternalError("nvrtcCreateProgram failed");
  }
  std::string arch_opt = StrCat("--gpu-architecture=", arch);
  // 177: a bound index some kernel does not use.
  std::vector<const char*> opts = {arch_opt.c_str(), "--std=c++17", "--diag-suppress=177"};
  if (cubin) {
    opts.push_back("--ptxas-options=-v");
    // From NVRTC 12.9 a compile can be served from the driver's compute
    // cache, and then ptxas prints no report: every kernel's registers and
    // spills would be unknown. The report is part of the build result.
    int major = 0, minor = 0;
    if (nvrtcVersion(&major, &minor) == NVRTC_SUCCESS && (major > 12 || (major == 12 && minor >= 9)))
      opts.push_back("--no-cache");
  }
  nvrtcResult r = nvrtcCompileProgram(prog.p, int(opts.size()), opts.data());
  size_t n = 0;
  nvrtcGetProgramLogSize(prog.p, &n);
  std::string text(n, '\0');
  if (n > 0) nvrtcGetProgramLog(prog.p, text.data());
  while (!text.empty() && (text.back() == '\0' || text.back() == '\n')) text.pop_back();
  *log += text;
  if (r != NVRTC_SUCCESS) {
    return absl::InternalError(
        StrCat("NVRTC rejected the generated CUDA C for ", arch, ": ", nvrtcGetErrorString(r),
               "\n", text));
  }
  std::string out;
  if (cubin) {
    if (nvrtcGetCUBINSize(prog.p, &n) != NVRTC_SUCCESS || n == 0)
      return absl::InternalError("NVRTC made no cubin for " + arch);
    out.resize(n);
    nvrtcGetCUBIN(prog.p, out.data());
  } else {
    if (nvrtcGetPTXSize(prog.p, &n) != NVRTC_SUCCESS || n == 0)
      return absl::InternalError("NVRTC made no PTX for " + arch);
    out.resize(n);
    nvrtcGetPTX(prog.p, out.data());
    while (!out.empty() && out.back() == '\0') out.pop_back();
  }
  return out;
}

}  // namespace

absl::StatusOr<GpuArtifact> CompileCuda(const GpuProgram& program, const ir::Target& target,
                                        const CudaCompileOptions& options) {
  if (!target.is_gpu()) return absl::InvalidArgumentError("not a cuda target: " + target.ToString());
  std::string sm = target.arch();
  std::vector<std::string> archs = NvrtcSupportedArchs();
  if (std::find(archs.begin(), archs.end(), sm) == archs.end()) {
    return absl::FailedPreconditionError(
        StrCat("NVRTC ", NvrtcVersion(), " cannot build ", sm, " (it builds ",
               absl::StrJoin(archs, ", "), "); use a worker with a CUDA toolkit that supports ",
               sm));
  }
  auto start = std::chrono::steady_clock::now();
  GpuArtifact out;
  out.program = program;
  const char* suffix = program.arch_specific ? "a" : "";
  if (options.cubin) {
    TF_ASSIGN_OR_RETURN(out.cubin, CompileOnce(program.source, sm + suffix, true, &out.log));
    ApplyPtxasReport(out.log, &out.program.kernels);
  }
  if (options.ptx) {
    std::string compute = StrCat("compute_", target.sm, suffix);
    TF_ASSIGN_OR_RETURN(out.ptx, CompileOnce(program.source, compute, false, &out.log));
  }
  out.compile_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  if (target.max_registers_per_thread > 0) {
    for (const GpuKernel& k : out.program.kernels) {
      if (k.registers > target.max_registers_per_thread) {
        return absl::InvalidArgumentError(
            StrCat(k.name, " uses ", k.registers, " registers per thread, above the target's ",
                   target.max_registers_per_thread, " (-max-registers-per-thread)"));
      }
    }
  }
  return out;
}

#else

absl::StatusOr<GpuArtifact> CompileCuda(const GpuProgram&, const ir::Target&,
                                        const CudaCompileOptions&) {
  return absl::UnavailableError("this build has no CUDA toolkit (NVRTC); GPU code cannot be built");
}

#endif

}  // namespace tunefarm::codegen
