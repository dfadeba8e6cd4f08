#include "bench/cuda_references.h"

#include <algorithm>
#include <array>
#include <functional>
#include <optional>

#include "absl/strings/str_cat.h"
#include "common/float16.h"
#include "common/status_macros.h"
#include "proto/kernel_signature.h"

#ifdef TF_HAVE_CUDA_REFS
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>
#endif

namespace tunefarm::bench {

namespace v1 = ::tunefarm::v1;

#ifndef TF_HAVE_CUDA_REFS

bool HaveCudaReferences() { return false; }

absl::StatusOr<GpuReferenceRun> RunCudaReference(const v1::Workload&,
                                                 const std::vector<std::vector<float>>&) {
  return absl::UnavailableError("this build has no cuBLAS/cuDNN (CUDA toolkit not found)");
}

#else

namespace {

absl::Status Check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": ", cudaGetErrorString(e)));
}
absl::Status Check(cublasStatus_t e, const char* what) {
  if (e == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": cuBLAS status ", int(e)));
}
absl::Status Check(cudnnStatus_t e, const char* what) {
  if (e == CUDNN_STATUS_SUCCESS) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": ", cudnnGetErrorString(e)));
}

#define TF_CUDA_REF(expr)                                   \
  do {                                                      \
    if (absl::Status _s = Check((expr), #expr); !_s.ok()) { \
      return _s;                                            \
    }                                                       \
  } while (0)

// Device buffers freed on every path.
class DeviceBuffers {
 public:
  ~DeviceBuffers() {
    for (void* p : ptrs_) cudaFree(p);
  }
  absl::StatusOr<float*> Upload(const std::vector<float>& host) {
    TF_ASSIGN_OR_RETURN(void* p, Alloc(host.size() * sizeof(float)));
    TF_CUDA_REF(cudaMemcpy(p, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice));
    return static_cast<float*>(p);
  }
  // `host` in 16-bit format `k` on the device.
  absl::StatusOr<void*> UploadHalf(const std::vector<float>& host, HalfKind k) {
    const std::vector<uint16_t> bits = ToHalfBits(host.data(), int64_t(host.size()), k);
    TF_ASSIGN_OR_RETURN(void* p, Alloc(bits.size() * 2));
    TF_CUDA_REF(cudaMemcpy(p, bits.data(), bits.size() * 2, cudaMemcpyHostToDevice));
    return p;
  }
  absl::StatusOr<void*> Alloc(size_t bytes) {
    void* p = nullptr;
    TF_CUDA_REF(cudaMalloc(&p, std::max<size_t>(bytes, 4)));
    ptrs_.push_back(p);
    return p;
  }

 private:
  std::vector<void*> ptrs_;
};

// `count` floats, or 16-bit values (format `half`) widened to floats, from
// the device into `out`.
absl::Status Download(const void* device, size_t count, std::optional<HalfKind> half,
                      std::vector<float>* out) {
  if (!half) {
    out->resize(count);
    return Check(cudaMemcpy(out->data(), device, count * 4, cudaMemcpyDeviceToHost), "cudaMemcpy");
  }
  std::vector<uint16_t> bits(count);
  TF_CUDA_REF(cudaMemcpy(bits.data(), device, count * 2, cudaMemcpyDeviceToHost));
  out->resize(count);
  FromHalfBits(bits.data(), int64_t(count), *half, out->data());
  return absl::OkStatus();
}

// Median seconds of `launch`, each run after an untimed write over twice the L2.
absl::StatusOr<double> TimeGpu(const std::function<absl::Status()>& launch, DeviceBuffers* mem) {
  int device = 0, l2 = 0;
  TF_CUDA_REF(cudaGetDevice(&device));
  TF_CUDA_REF(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, device));
  const size_t flush_bytes = size_t(std::max(l2, 1 << 20)) * 2;
  TF_ASSIGN_OR_RETURN(void* flush, mem->Alloc(flush_bytes));
  for (int i = 0; i < 3; ++i) TF_RETURN_IF_ERROR(launch());
  TF_CUDA_REF(cudaDeviceSynchronize());
  cudaEvent_t start, stop;
  TF_CUDA_REF(cudaEventCreate(&start));
  TF_CUDA_REF(cudaEventCreate(&stop));
  std::vector<double> times;
  double total = 0;
  absl::Status s;
  while (s.ok() && (times.size() < 5 || (total < 0.2 && times.size() < 200))) {
    s = Check(cudaMemsetAsync(flush, int(times.size() & 0xff), flush_bytes), "flush L2");
    if (s.ok()) s = Check(cudaEventRecord(start), "cudaEventRecord");
    if (s.ok()) s = launch();
    if (s.ok()) s = Check(cudaEventRecord(stop), "cudaEventRecord");
    if (s.ok()) s = Check(cudaEventSynchronize(stop), "cudaEventSynchronize");
    float ms = 0;
    if (s.ok()) s = Check(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
    times.push_back(ms * 1e-3);
    total += ms * 1e-3;
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  TF_RETURN_IF_ERROR(s);
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

// A matmul or dense layer as cuBLAS takes it (row-major operands).
struct GemmShape {
  bool ta = false, tb = false;
  int m = 0, k = 0, n = 0, lda = 0, ldb = 0;
};

GemmShape GemmShapeOf(const v1::Workload& w) {
  GemmShape g;
  g.ta = w.op() == v1::OP_KIND_MATMUL && w.matmul().transpose_a();
  g.tb = w.op() == v1::OP_KIND_DENSE || w.matmul().transpose_b();
  const auto& as = w.inputs(0).shape();
  const auto& bs = w.inputs(1).shape();
  g.m = int(g.ta ? as[1] : as[0]);
  g.k = int(g.ta ? as[0] : as[1]);
  g.n = int(g.tb ? bs[0] : bs[1]);
  g.lda = int(as[1]);
  g.ldb = int(bs[1]);
  return g;
}

// cuBLAS on the workload's dtype: sgemm with its default math (strict
// fp32), cublasGemmEx on float32 with CUBLAS_COMPUTE_32F_FAST_TF32 for a
// tf32 workload, or cublasGemmEx on float16 or bfloat16 A, B and C with
// float32 accumulation (tensor cores: cuBLAS's default for them), the
// output widened back.
absl::StatusOr<GpuReferenceRun> CuBlas(const v1::Workload& w,
                                       const std::vector<std::vector<float>>& inputs) {
  const std::optional<HalfKind> half = HalfKindOf(w.inputs(0).dtype());
  const cudaDataType_t type = half == HalfKind::kBFloat16 ? CUDA_R_16BF : CUDA_R_16F;
  const GemmShape g = GemmShapeOf(w);
  DeviceBuffers mem;
  TF_ASSIGN_OR_RETURN(void* a, half ? mem.UploadHalf(inputs[0], *half) : mem.Upload(inputs[0]));
  TF_ASSIGN_OR_RETURN(void* b, half ? mem.UploadHalf(inputs[1], *half) : mem.Upload(inputs[1]));
  const size_t count = size_t(g.m) * g.n;
  TF_ASSIGN_OR_RETURN(void* c, mem.Alloc(count * (half ? 2 : 4)));
  cublasHandle_t h;
  TF_CUDA_REF(cublasCreate(&h));
  // Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T.
  const cublasOperation_t op_a = g.ta ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = g.tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  const float one = 1, zero = 0;
  auto launch = [&]() -> absl::Status {
    if (half) {
      return Check(cublasGemmEx(h, op_b, op_a, g.n, g.m, g.k, &one, b, type, g.ldb, a, type, g.lda,
                                &zero, c, type, g.n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                   "cublasGemmEx");
    }
    if (w.tf32()) {
      return Check(cublasGemmEx(h, op_b, op_a, g.n, g.m, g.k, &one, b, CUDA_R_32F, g.ldb, a,
                                CUDA_R_32F, g.lda, &zero, c, CUDA_R_32F, g.n,
                                CUBLAS_COMPUTE_32F_FAST_TF32, CUBLAS_GEMM_DEFAULT),
                   "cublasGemmEx (tf32)");
    }
    return Check(
        cublasSgemm(h, op_b, op_a, g.n, g.m, g.k, &one, static_cast<const float*>(b), g.ldb,
                    static_cast<const float*>(a), g.lda, &zero, static_cast<float*>(c), g.n),
        "cublasSgemm");
  };
  GpuReferenceRun run;
  run.library = half == HalfKind::kBFloat16 ? "cublas bf16"
                : half                      ? "cublas fp16"
                : w.tf32()                  ? "cublas tf32"
                                            : "cublas";
  absl::Status s = Check(cublasSetMathMode(h, CUBLAS_DEFAULT_MATH), "cublasSetMathMode");
  absl::StatusOr<double> t = s.ok() ? TimeGpu(launch, &mem) : absl::StatusOr<double>(s);
  if (t.ok()) {
    run.seconds = *t;
    s = Download(c, count, half, &run.output);
  }
  cublasDestroy(h);
  if (!t.ok()) return t.status();
  TF_RETURN_IF_ERROR(s);
  return run;
}

// cuDNN on an NCHW layer (OIHW weights), or an NHWC one (HWIO weights,
// handed to cuDNN as KRSC: its NHWC filter layout).
absl::StatusOr<GpuReferenceRun> CuDnn(const v1::Workload& w,
                                      const std::vector<std::vector<float>>& inputs) {
  const v1::Conv2dAttrs& c = w.conv2d();
  const bool nhwc = c.layout() == v1::DATA_LAYOUT_NHWC;
  const auto& x_shape = w.inputs(0).shape();  // N C H W, or N H W C
  const auto& w_shape = w.inputs(1).shape();  // K C/g R S, or R S C/g K
  // The same dimensions in NCHW and KCRS order, whatever the layout.
  const std::array<int64_t, 4> xs =
      nhwc ? std::array<int64_t, 4>{x_shape[0], x_shape[3], x_shape[1], x_shape[2]}
           : std::array<int64_t, 4>{x_shape[0], x_shape[1], x_shape[2], x_shape[3]};
  const std::array<int64_t, 4> ws =
      nhwc ? std::array<int64_t, 4>{w_shape[3], w_shape[2], w_shape[0], w_shape[1]}
           : std::array<int64_t, 4>{w_shape[0], w_shape[1], w_shape[2], w_shape[3]};
  const cudnnTensorFormat_t format = nhwc ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
  std::vector<float> weights = inputs[1];
  if (nhwc) {  // HWIO -> KRSC
    const int64_t K = ws[0], C = ws[1], R = ws[2], S = ws[3];
    for (int64_t r = 0; r < R; ++r)
      for (int64_t q = 0; q < S; ++q)
        for (int64_t ch = 0; ch < C; ++ch)
          for (int64_t k = 0; k < K; ++k)
            weights[size_t(((k * R + r) * S + q) * C + ch)] =
                inputs[1][size_t(((r * S + q) * C + ch) * K + k)];
  }
  auto at = [](const auto& v, int i, int64_t d) { return v.size() > i ? int(v[i]) : int(d); };
  const int groups = std::max<int>(1, int(c.groups()));
  // 16-bit layers: float16 or bfloat16 tensors, float32 accumulation,
  // tensor cores allowed.
  const std::optional<HalfKind> half = HalfKindOf(w.inputs(0).dtype());
  const cudnnDataType_t dtype = !half                         ? CUDNN_DATA_FLOAT
                                : half == HalfKind::kBFloat16 ? CUDNN_DATA_BFLOAT16
                                                              : CUDNN_DATA_HALF;
  const size_t element = half ? 2 : 4;
  cudnnHandle_t h;
  TF_CUDA_REF(cudnnCreate(&h));
  cudnnTensorDescriptor_t xd = nullptr, yd = nullptr;
  cudnnFilterDescriptor_t wd = nullptr;
  cudnnConvolutionDescriptor_t cd = nullptr;
  DeviceBuffers mem;
  GpuReferenceRun run;
  auto body = [&]() -> absl::Status {
    TF_CUDA_REF(cudnnCreateTensorDescriptor(&xd));
    TF_CUDA_REF(cudnnCreateTensorDescriptor(&yd));
    TF_CUDA_REF(cudnnCreateFilterDescriptor(&wd));
    TF_CUDA_REF(cudnnCreateConvolutionDescriptor(&cd));
    TF_CUDA_REF(cudnnSetTensor4dDescriptor(xd, format, dtype, int(xs[0]), int(xs[1]), int(xs[2]),
                                           int(xs[3])));
    TF_CUDA_REF(cudnnSetFilter4dDescriptor(wd, dtype, format, int(ws[0]), int(ws[1]), int(ws[2]),
                                           int(ws[3])));
    // Pads [top, left, bottom, right]: cuDNN takes one pad per side pair.
    if (at(c.pads(), 0, 0) != at(c.pads(), 2, at(c.pads(), 0, 0)) ||
        at(c.pads(), 1, 0) != at(c.pads(), 3, at(c.pads(), 1, 0))) {
      return absl::UnimplementedError("cuDNN takes symmetric padding only");
    }
    TF_CUDA_REF(cudnnSetConvolution2dDescriptor(cd, at(c.pads(), 0, 0), at(c.pads(), 1, 0),
                                                at(c.strides(), 0, 1), at(c.strides(), 1, 1),
                                                at(c.dilations(), 0, 1), at(c.dilations(), 1, 1),
                                                CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    TF_CUDA_REF(cudnnSetConvolutionGroupCount(cd, groups));
    // Tensor cores for 16-bit and tf32 layers; strict fp32 otherwise.
    const bool tensor_ops = half.has_value() || w.tf32();
    TF_CUDA_REF(
        cudnnSetConvolutionMathType(cd, tensor_ops ? CUDNN_TENSOR_OP_MATH : CUDNN_FMA_MATH));
    int n = 0, k = 0, oh = 0, ow = 0;
    TF_CUDA_REF(cudnnGetConvolution2dForwardOutputDim(cd, xd, wd, &n, &k, &oh, &ow));
    TF_CUDA_REF(cudnnSetTensor4dDescriptor(yd, format, dtype, n, k, oh, ow));
    TF_ASSIGN_OR_RETURN(void* x, half ? mem.UploadHalf(inputs[0], *half) : mem.Upload(inputs[0]));
    TF_ASSIGN_OR_RETURN(void* wt, half ? mem.UploadHalf(weights, *half) : mem.Upload(weights));
    TF_ASSIGN_OR_RETURN(void* y, mem.Alloc(size_t(n) * k * oh * ow * element));
    // cuDNN's own pick: every algorithm it has, timed by it; the fastest that succeeded.
    constexpr int kMaxAlgos = 16;
    cudnnConvolutionFwdAlgoPerf_t perf[kMaxAlgos];
    int found = 0;
    TF_CUDA_REF(cudnnFindConvolutionForwardAlgorithm(h, xd, wd, cd, yd, kMaxAlgos, &found, perf));
    // The fastest that ran in strict fp32 (FMA math: no TF32 tensor cores);
    // for 16-bit and tf32 layers, the fastest.
    int pick = -1;
    for (int i = 0; i < found && pick < 0; ++i) {
      if (perf[i].status == CUDNN_STATUS_SUCCESS &&
          (tensor_ops || (perf[i].mathType != CUDNN_TENSOR_OP_MATH &&
                          perf[i].mathType != CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION))) {
        pick = i;
      }
    }
    if (pick < 0)
      return absl::InternalError("cuDNN found no fp32 forward algorithm for this layer");
    const cudnnConvolutionFwdAlgo_t algo = perf[pick].algo;
    TF_CUDA_REF(cudnnSetConvolutionMathType(cd, perf[pick].mathType));
    size_t ws_bytes = 0;
    TF_CUDA_REF(cudnnGetConvolutionForwardWorkspaceSize(h, xd, wd, cd, yd, algo, &ws_bytes));
    TF_ASSIGN_OR_RETURN(void* work, mem.Alloc(ws_bytes));
    const float one = 1, zero = 0;
    auto launch = [&]() -> absl::Status {
      return Check(
          cudnnConvolutionForward(h, &one, xd, x, wd, wt, cd, algo, work, ws_bytes, &zero, yd, y),
          "cudnnConvolutionForward");
    };
    TF_ASSIGN_OR_RETURN(run.seconds, TimeGpu(launch, &mem));
    run.library = absl::StrCat("cudnn (algo ", int(algo), ")");
    return Download(y, size_t(n) * k * oh * ow, half, &run.output);
  };
  absl::Status s = body();
  if (cd) cudnnDestroyConvolutionDescriptor(cd);
  if (wd) cudnnDestroyFilterDescriptor(wd);
  if (yd) cudnnDestroyTensorDescriptor(yd);
  if (xd) cudnnDestroyTensorDescriptor(xd);
  cudnnDestroy(h);
  TF_RETURN_IF_ERROR(s);
  return run;
}

}  // namespace

bool HaveCudaReferences() { return true; }

absl::StatusOr<GpuReferenceRun> RunCudaReference(const v1::Workload& w,
                                                 const std::vector<std::vector<float>>& inputs) {
  if (w.epilogue_size() > 0) return absl::NotFoundError("no library reference with an epilogue");
  absl::StatusOr<GpuReferenceRun> run =
      absl::NotFoundError("no cuBLAS/cuDNN reference for this op");
  if (w.op() == v1::OP_KIND_DENSE || w.op() == v1::OP_KIND_MATMUL) {
    run = CuBlas(w, inputs);
  } else if (w.op() == v1::OP_KIND_CONV2D && w.conv2d().winograd() == 0) {
    run = CuDnn(w, inputs);
  }
  // No context of this process stays on the GPU while the next workload's
  // kernels run in runner processes (an exclusive-process GPU would refuse them).
  cudaDeviceReset();
  return run;
}

#endif

}  // namespace tunefarm::bench
