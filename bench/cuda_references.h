// cuBLAS sgemm and cuDNN convolution, timed on this machine's GPU beside our
// CUDA kernels: strict fp32 (no TF32 tensor cores: cuBLAS's default math,
// cuDNN's FMA math), inputs copied up once, each timed run preceded by a
// write over twice the L2 (outside the timed span), CUDA events around the
// call, the median of repeats. Each returns its output so the bench checks
// it against the float64 reference where that is affordable.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tunefarm/v1/workload.pb.h"

namespace tunefarm::bench {

struct GpuReferenceRun {
  std::string library;        // "cublas", "cudnn (algo N)"
  double seconds = 0;         // median of one run
  std::vector<float> output;  // in the workload's own layout
};

// Whether this build has cuBLAS and cuDNN (the CUDA toolkit's, found at configure time).
bool HaveCudaReferences();

// cuBLAS sgemm for matmul/dense without epilogue; cuDNN forward convolution
// for NCHW conv2d (groups too: depthwise). Float16 workloads: float16
// tensors with float32 accumulation, tensor cores allowed (cublasGemmEx,
// cuDNN's fastest algorithm of any math). NotFound for other workloads.
absl::StatusOr<GpuReferenceRun> RunCudaReference(const ::tunefarm::v1::Workload& w,
                                                 const std::vector<std::vector<float>>& inputs);

}  // namespace tunefarm::bench
