// GPU code generation through LLVM's NVPTX back end: the kernels EmitCuda
// makes (gpu_launch.h's plan, one kernel per nest at the root, the same
// parameters and launches), emitted as LLVM IR and compiled to PTX by LLVM
// itself. The route for archs this build's NVRTC no longer builds (CUDA 13
// builds sm_75 and newer; Jetson Xavier is sm_72): the board's driver
// compiles the PTX when it loads it. Index math is 32-bit where every
// tensor has fewer than 2^31 elements, as in the CUDA C back end. exp, log and tanh come from the
// CUDA toolkit's libdevice (LibdevicePath); a program that needs them fails to build without it.
//
//   TF_ASSIGN_OR_RETURN(GpuArtifact a, CompileCudaWithLlvm(dag, Lower(state), target));
//   // a.ptx: ".target sm_72" PTX; a.program: the kernels and their launches
//
// Thread safe: each call owns its LLVMContext.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "compiler/codegen/cuda_codegen.h"
#include "compiler/ir/compute.h"
#include "compiler/ir/stmt.h"
#include "compiler/ir/target.h"

namespace tunefarm::codegen {

// PTX for `program` (a GPU-lowered program of `dag`) for the target's arch.
// The launch limits are checked as EmitCuda checks them (InvalidArgument
// naming the kernel); an arch LLVM does not know is InvalidArgument;
// FailedPrecondition when the program calls a math function and no
// libdevice is found. Kernels' registers and spills are unknown (-1): the
// driver allocates them.
absl::StatusOr<GpuArtifact> CompileCudaWithLlvm(const ir::ComputeDAG& dag, const ir::Stmt& program,
                                                const ir::Target& target);

// The archs LLVM builds PTX for ("sm_50" ... "sm_90").
std::vector<std::string> LlvmCudaArchs();

// libdevice.10.bc: $TUNEFARM_LIBDEVICE, else under $CUDA_HOME, the toolkit
// this was built with, or /usr/local/cuda; "" when none exists.
std::string LibdevicePath();

}  // namespace tunefarm::codegen
