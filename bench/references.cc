#include "bench/references.h"

#include <cblas.h>
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include "oneapi/dnnl/dnnl.hpp"

extern "C" void openblas_set_num_threads(int);

namespace tunefarm::bench {
namespace {

namespace v1 = ::tunefarm::v1;
using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// 24 independent FMA chains: enough to cover FMA latency x throughput.
__attribute__((target("avx512f"))) double FmaLoop512(int64_t iters) {
  __m512 acc[24];
  for (int i = 0; i < 24; ++i) acc[i] = _mm512_set1_ps(0.001f * i);
  const __m512 a = _mm512_set1_ps(0.9999f), b = _mm512_set1_ps(0.0001f);
  for (int64_t n = 0; n < iters; ++n) {
#pragma GCC unroll 24
    for (int i = 0; i < 24; ++i) acc[i] = _mm512_fmadd_ps(acc[i], a, b);
  }
  float sum = 0;
  for (int i = 0; i < 24; ++i) sum += _mm512_reduce_add_ps(acc[i]);
  return sum;
}

__attribute__((target("avx2,fma"))) double FmaLoop256(int64_t iters) {
  __m256 acc[16];
  for (int i = 0; i < 16; ++i) acc[i] = _mm256_set1_ps(0.001f * i);
  const __m256 a = _mm256_set1_ps(0.9999f), b = _mm256_set1_ps(0.0001f);
  for (int64_t n = 0; n < iters; ++n) {
#pragma GCC unroll 16
    for (int i = 0; i < 16; ++i) acc[i] = _mm256_fmadd_ps(acc[i], a, b);
  }
  alignas(32) float out[8];
  __m256 s = acc[0];
  for (int i = 1; i < 16; ++i) s = _mm256_add_ps(s, acc[i]);
  _mm256_store_ps(out, s);
  return out[0];
}

}  // namespace

double TimeIt(const std::function<void()>& fn, const Timing& timing) {
  const auto w0 = Clock::now();
  do fn();  // warm-up
  while (Seconds(w0, Clock::now()) * 1e3 < timing.warmup_ms);
  auto t0 = Clock::now();
  fn();
  double one = std::max(Seconds(t0, Clock::now()), 1e-7);
  int number = std::max(1, int(timing.min_ms / 1000.0 / one));
  std::vector<double> times;
  for (int r = 0; r < timing.repeats; ++r) {
    auto a = Clock::now();
    for (int i = 0; i < number; ++i) fn();
    times.push_back(Seconds(a, Clock::now()) / number);
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

double MeasurePeakGflops(int threads) {
  bool avx512 = __builtin_cpu_supports("avx512f");
  const int64_t iters = 20'000'000;
  double flops_per_iter = avx512 ? 24 * 16 * 2 : 16 * 8 * 2;
  std::vector<double> best(threads, 0);
  for (int rep = 0; rep < 3; ++rep) {
    std::vector<std::thread> ts;
    std::vector<double> secs(threads);
    for (int t = 0; t < threads; ++t) {
      ts.emplace_back([&, t] {
        auto a = Clock::now();
        volatile double sink = avx512 ? FmaLoop512(iters) : FmaLoop256(iters);
        (void)sink;
        secs[t] = Seconds(a, Clock::now());
      });
    }
    for (auto& th : ts) th.join();
    for (int t = 0; t < threads; ++t) best[t] = std::max(best[t], flops_per_iter * iters / secs[t] * 1e-9);
  }
  double total = 0;
  for (double g : best) total += g;
  return total;
}

std::optional<ReferenceRun> RunOpenBlas(const v1::Workload& w,
                                        const std::vector<std::vector<float>>& inputs, int threads,
                                        const Timing& timing) {
  if (w.op() != v1::OP_KIND_DENSE && w.op() != v1::OP_KIND_MATMUL) return std::nullopt;
  if (w.epilogue_size() > 0) return std::nullopt;
  bool ta = w.matmul().transpose_a(), tb = w.op() == v1::OP_KIND_DENSE || w.matmul().transpose_b();
  const auto& as = w.inputs(0).shape();
  const auto& bs = w.inputs(1).shape();
  int m = int(ta ? as[1] : as[0]), k = int(ta ? as[0] : as[1]), n = int(tb ? bs[0] : bs[1]);
  openblas_set_num_threads(threads);
  ReferenceRun run;
  run.output.assign(size_t(m) * n, 0);
  auto fn = [&] {
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n,
                k, 1.0f, inputs[0].data(), int(as[1]), inputs[1].data(), int(bs[1]), 0.0f,
                run.output.data(), n);
  };
  run.seconds = TimeIt(fn, timing);
  return run;
}

namespace {

using Inputs = std::vector<std::vector<float>>;

// A shape as oneDNN's dims.
template <typename Shape>
dnnl::memory::dims ToDims(const Shape& shape) {
  dnnl::memory::dims d;
  for (int64_t x : shape) d.push_back(x);
  return d;
}

// oneDNN's direct convolution of an NCHW conv2d (its bias and ReLU
// epilogues fused as oneDNN does); nullopt for any other epilogue.
std::optional<ReferenceRun> OneDnnConv(const v1::Workload& w, const Inputs& inputs,
                                       dnnl::engine& eng, dnnl::stream& strm,
                                       const Timing& timing) {
  using namespace dnnl;
  using dt = memory::data_type;
  using tag = memory::format_tag;
  ReferenceRun run;
  const auto& a = w.conv2d();
  bool bias = false, relu = false;
  for (const auto& e : w.epilogue()) {
    if (e.kind() == v1::EPILOGUE_KIND_BIAS_ADD) bias = true;
    else if (e.kind() == v1::EPILOGUE_KIND_RELU) relu = true;
    else return std::nullopt;
  }
  memory::dims src = ToDims(w.inputs(0).shape());
  memory::dims wts = ToDims(w.inputs(1).shape());
  int64_t g = a.groups(), k = wts[0];
  int64_t oh = (src[2] + a.pads(0) + a.pads(2) - a.dilations(0) * (wts[2] - 1) - 1) / a.strides(0) + 1;
  int64_t ow = (src[3] + a.pads(1) + a.pads(3) - a.dilations(1) * (wts[3] - 1) - 1) / a.strides(1) + 1;
  memory::dims dst = {src[0], k, oh, ow};
  memory::dims gwts = g == 1 ? wts : memory::dims{g, k / g, wts[1], wts[2], wts[3]};
  memory::desc src_any(src, dt::f32, tag::any), wts_any(gwts, dt::f32, tag::any),
      dst_any(dst, dt::f32, tag::any), bias_md({k}, dt::f32, tag::a);
  post_ops po;
  if (relu) po.append_eltwise(1.0f, algorithm::eltwise_relu, 0.0f, 0.0f);
  primitive_attr attr;
  attr.set_post_ops(po);
  convolution_forward::desc cd =
      bias ? convolution_forward::desc(prop_kind::forward_inference,
                                       algorithm::convolution_direct, src_any, wts_any, bias_md,
                                       dst_any, {a.strides(0), a.strides(1)},
                                       {a.dilations(0) - 1, a.dilations(1) - 1},
                                       {a.pads(0), a.pads(1)}, {a.pads(2), a.pads(3)})
           : convolution_forward::desc(prop_kind::forward_inference,
                                       algorithm::convolution_direct, src_any, wts_any, dst_any,
                                       {a.strides(0), a.strides(1)},
                                       {a.dilations(0) - 1, a.dilations(1) - 1},
                                       {a.pads(0), a.pads(1)}, {a.pads(2), a.pads(3)});
  convolution_forward::primitive_desc pd(cd, attr, eng);
  memory user_src({src, dt::f32, tag::nchw}, eng, const_cast<float*>(inputs[0].data()));
  memory user_wts({gwts, dt::f32, g == 1 ? tag::oihw : tag::goihw}, eng,
                  const_cast<float*>(inputs[1].data()));
  memory conv_src(pd.src_desc(), eng), conv_wts(pd.weights_desc(), eng), conv_dst(pd.dst_desc(), eng);
  reorder(user_src, conv_src).execute(strm, user_src, conv_src);
  reorder(user_wts, conv_wts).execute(strm, user_wts, conv_wts);
  std::unordered_map<int, memory> args = {
      {DNNL_ARG_SRC, conv_src}, {DNNL_ARG_WEIGHTS, conv_wts}, {DNNL_ARG_DST, conv_dst}};
  memory bias_mem;
  if (bias) {
    bias_mem = memory(bias_md, eng, const_cast<float*>(inputs[2].data()));
    args[DNNL_ARG_BIAS] = bias_mem;
  }
  convolution_forward conv(pd);
  run.seconds = TimeIt(
      [&] {
        conv.execute(strm, args);
        strm.wait();
      },
      timing);
  run.output.assign(size_t(dst[0] * dst[1] * dst[2] * dst[3]), 0);
  memory user_dst({dst, dt::f32, tag::nchw}, eng, run.output.data());
  reorder(conv_dst, user_dst).execute(strm, conv_dst, user_dst);
  strm.wait();
  return run;
}

// oneDNN's matmul of a dense, matmul or batch_matmul workload without
// epilogue.
std::optional<ReferenceRun> OneDnnMatmul(const v1::Workload& w, const Inputs& inputs,
                                         dnnl::engine& eng, dnnl::stream& strm,
                                         const Timing& timing) {
  using namespace dnnl;
  using dt = memory::data_type;
  using tag = memory::format_tag;
  ReferenceRun run;
  bool ta = w.matmul().transpose_a(), tb = w.op() == v1::OP_KIND_DENSE || w.matmul().transpose_b();
  const auto& as = w.inputs(0).shape();
  const auto& bs = w.inputs(1).shape();
  // batch_matmul: [B, M, K] x [B, K, N], both batches equal.
  const bool batch = w.op() == v1::OP_KIND_BATCH_MATMUL;
  const int o = batch ? 1 : 0;
  int64_t m = ta ? as[o + 1] : as[o], k = ta ? as[o] : as[o + 1], n = tb ? bs[o] : bs[o + 1];
  const int64_t nb = batch ? as[0] : 1;
  if (batch && bs[0] != nb) return std::nullopt;
  memory::desc a_md = batch ? memory::desc({nb, m, k}, dt::f32, ta ? tag::acb : tag::abc)
                            : memory::desc({m, k}, dt::f32, ta ? tag::ba : tag::ab);
  memory::desc b_md = batch ? memory::desc({nb, k, n}, dt::f32, tb ? tag::acb : tag::abc)
                            : memory::desc({k, n}, dt::f32, tb ? tag::ba : tag::ab);
  memory::desc c_md = batch ? memory::desc({nb, m, n}, dt::f32, tag::abc)
                            : memory::desc({m, n}, dt::f32, tag::ab);
  matmul::primitive_desc pd(matmul::desc(a_md, b_md, c_md), eng);
  run.output.assign(size_t(nb * m * n), 0);
  memory am(a_md, eng, const_cast<float*>(inputs[0].data()));
  memory bm(b_md, eng, const_cast<float*>(inputs[1].data()));
  memory cm(c_md, eng, run.output.data());
  matmul mm(pd);
  std::unordered_map<int, memory> args = {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}};
  run.seconds = TimeIt(
      [&] {
        mm.execute(strm, args);
        strm.wait();
      },
      timing);
  return run;
}

// oneDNN's reduction algorithm for `op` and its p (norms); false where it
// has none (log_sum, log_sum_exp).
bool ReductionAlgorithm(v1::ReduceOp op, dnnl::algorithm* alg, float* p) {
  using dnnl::algorithm;
  switch (op) {
    case v1::REDUCE_OP_SUM:
      *alg = algorithm::reduction_sum;
      return true;
    case v1::REDUCE_OP_MEAN:
      *alg = algorithm::reduction_mean;
      return true;
    case v1::REDUCE_OP_MAX:
      *alg = algorithm::reduction_max;
      return true;
    case v1::REDUCE_OP_MIN:
      *alg = algorithm::reduction_min;
      return true;
    case v1::REDUCE_OP_L1:
      *alg = algorithm::reduction_norm_lp_sum, *p = 1;
      return true;
    case v1::REDUCE_OP_L2:
      *alg = algorithm::reduction_norm_lp_sum, *p = 2;
      return true;
    case v1::REDUCE_OP_SUM_SQUARE:
      *alg = algorithm::reduction_norm_lp_power_p_sum, *p = 2;
      return true;
    case v1::REDUCE_OP_PROD:
      *alg = algorithm::reduction_mul;
      return true;
    default:
      return false;
  }
}

// oneDNN's reduction of a reduce workload without epilogue: [A, N, B] ->
// [A, 1, B]; nullopt for the ops it has no primitive for.
std::optional<ReferenceRun> OneDnnReduce(const v1::Workload& w, const Inputs& inputs,
                                         dnnl::engine& eng, dnnl::stream& strm,
                                         const Timing& timing) {
  using namespace dnnl;
  using dt = memory::data_type;
  using tag = memory::format_tag;
  ReferenceRun run;
  algorithm alg;
  float p = 0;
  if (!ReductionAlgorithm(w.reduce().op(), &alg, &p)) return std::nullopt;
  const auto& d = w.inputs(0).shape();
  const int64_t a = d[0], n = d[1], b = d.size() > 2 ? d[2] : 1;
  memory::desc src_md({1, a, n, b}, dt::f32, tag::nchw), dst_md({1, a, 1, b}, dt::f32, tag::nchw);
  reduction::primitive_desc pd(reduction::desc(alg, src_md, dst_md, p, 0.f), eng);
  run.output.assign(size_t(a * b), 0);
  memory sm(src_md, eng, const_cast<float*>(inputs[0].data()));
  memory dm(dst_md, eng, run.output.data());
  reduction r(pd);
  std::unordered_map<int, memory> args = {{DNNL_ARG_SRC, sm}, {DNNL_ARG_DST, dm}};
  run.seconds = TimeIt(
      [&] {
        r.execute(strm, args);
        strm.wait();
      },
      timing);
  return run;
}

// oneDNN's normalization of a normalize workload without epilogue: layer
// normalization over [A, N]'s rows; an instance normalization of one image
// is oneDNN's batch normalization of [1, A, N] (per channel over N), both
// computing their statistics. nullopt where the parameters do not cover
// the whole axis they follow.
std::optional<ReferenceRun> OneDnnNormalize(const v1::Workload& w, const Inputs& inputs,
                                            dnnl::engine& eng, dnnl::stream& strm,
                                            const Timing& timing) {
  using namespace dnnl;
  using dt = memory::data_type;
  using tag = memory::format_tag;
  ReferenceRun run;
  const auto& d = w.inputs(0).shape();
  const int64_t a = d[0], n = d[1];
  const bool per_row = w.normalize().per_row(), shift = w.inputs_size() > 2;
  // oneDNN's parameters cover the whole axis they follow.
  if (w.inputs(1).shape(0) != (per_row ? a : n)) return std::nullopt;
  const float eps = w.normalize().epsilon();
  normalization_flags flags = normalization_flags::use_scale;
  if (shift) flags = flags | normalization_flags::use_shift;
  memory::desc data_md = per_row ? memory::desc({1, a, n, 1}, dt::f32, tag::nchw)
                                 : memory::desc({a, n}, dt::f32, tag::ab);
  memory::desc param_md({per_row ? a : n}, dt::f32, tag::a);
  run.output.assign(size_t(a * n), 0);
  memory sm(data_md, eng, const_cast<float*>(inputs[0].data()));
  memory dm(data_md, eng, run.output.data());
  memory scale(param_md, eng, const_cast<float*>(inputs[1].data()));
  std::unordered_map<int, memory> args = {
      {DNNL_ARG_SRC, sm}, {DNNL_ARG_DST, dm}, {DNNL_ARG_SCALE, scale}};
  if (shift) args[DNNL_ARG_SHIFT] = memory(param_md, eng, const_cast<float*>(inputs[2].data()));
  primitive prim;
  if (per_row) {
    batch_normalization_forward::primitive_desc pd(
        batch_normalization_forward::desc(prop_kind::forward_inference, data_md, eps, flags),
        eng);
    prim = batch_normalization_forward(pd);
  } else {
    layer_normalization_forward::primitive_desc pd(
        layer_normalization_forward::desc(prop_kind::forward_inference, data_md, eps, flags),
        eng);
    prim = layer_normalization_forward(pd);
  }
  run.seconds = TimeIt(
      [&] {
        prim.execute(strm, args);
        strm.wait();
      },
      timing);
  return run;
}

}  // namespace

std::optional<ReferenceRun> RunOneDnn(const v1::Workload& w,
                                      const std::vector<std::vector<float>>& inputs, int threads,
                                      const Timing& timing) {
  omp_set_num_threads(threads);
  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  dnnl::stream strm(eng);
  if (w.op() == v1::OP_KIND_CONV2D && w.conv2d().layout() == v1::DATA_LAYOUT_NCHW)
    return OneDnnConv(w, inputs, eng, strm, timing);
  if ((w.op() == v1::OP_KIND_DENSE || w.op() == v1::OP_KIND_MATMUL ||
       w.op() == v1::OP_KIND_BATCH_MATMUL) &&
      w.epilogue_size() == 0)
    return OneDnnMatmul(w, inputs, eng, strm, timing);
  if (w.op() == v1::OP_KIND_REDUCE && w.epilogue_size() == 0)
    return OneDnnReduce(w, inputs, eng, strm, timing);
  if (w.op() == v1::OP_KIND_NORMALIZE && w.epilogue_size() == 0)
    return OneDnnNormalize(w, inputs, eng, strm, timing);
  return std::nullopt;
}

}  // namespace tunefarm::bench
