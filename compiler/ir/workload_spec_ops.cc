// The workload spec op table (Ops, Epilogues) and WorkloadSpecHelp, which
// lists it.
#include "compiler/ir/workload_spec.h"

#include <map>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "compiler/ir/map_program.h"
#include "compiler/ir/workload_spec_internal.h"

namespace tunefarm::ir {
namespace workload_spec_internal {

namespace v1 = ::tunefarm::v1;

const std::map<std::string, OpInfo>& Ops() {
  static const auto* ops = new std::map<std::string, OpInfo>{
      {"conv2d_nchw",
       {{"N", "C", "H", "W", "K", "R", "S"},
        {"stride", "stride_h", "stride_w", "pad", "pad_top", "pad_left", "pad_bottom", "pad_right",
         "dilation", "dilation_h", "dilation_w", "groups"},
        "2-D convolution, NCHW data, OIHW weights"}},
      {"conv2d_nhwc",
       {{"N", "C", "H", "W", "K", "R", "S"},
        {"stride", "stride_h", "stride_w", "pad", "pad_top", "pad_left", "pad_bottom", "pad_right",
         "dilation", "dilation_h", "dilation_w", "groups", "winograd"},
        "2-D convolution, NHWC data, HWIO weights (winograd=2: F(2x2,3x3), weights [4,4,C,K])"}},
      {"depthwise_conv2d_nchw",
       {{"N", "C", "H", "W", "R", "S"},
        {"stride", "stride_h", "stride_w", "pad", "pad_top", "pad_left", "pad_bottom", "pad_right",
         "dilation", "dilation_h", "dilation_w", "multiplier"},
        "depthwise convolution (groups = C)"}},
      {"conv2d_transpose_nchw",
       {{"N", "C", "H", "W", "K", "R", "S"},
        {"stride", "stride_h", "stride_w", "pad", "pad_top", "pad_left", "pad_bottom", "pad_right",
         "dilation", "dilation_h", "dilation_w", "groups"},
        "transposed convolution, weights [C, K/groups, R, S]"}},
      {"conv2d_transpose_nhwc",
       {{"N", "C", "H", "W", "K", "R", "S"},
        {"stride", "stride_h", "stride_w"},
        "transposed convolution, NHWC data, weights [R, S, C, K], kernel = stride"}},
      {"dense", {{"M", "N", "K"}, {}, "data [M,K] x weight [N,K]^T"}},
      {"matmul", {{"M", "N", "K"}, {"transpose_a", "transpose_b"}, "a [M,K] x b [K,N]"}},
      {"batch_matmul",
       {{"B", "M", "N", "K"}, {"transpose_a", "transpose_b"}, "a [B,M,K] x b [B,K,N]"}},
      {"max_pool2d_nchw",
       {{"N", "C", "H", "W", "R", "S"}, {"stride", "pad", "ceil_mode"}, "max pooling"}},
      {"avg_pool2d_nchw",
       {{"N", "C", "H", "W", "R", "S"},
        {"stride", "pad", "ceil_mode", "count_include_pad"},
        "average pooling"}},
      {"global_avg_pool2d_nchw", {{"N", "C", "H", "W"}, {}, "global average pooling"}},
      {"max_pool2d_nhwc",
       {{"N", "C", "H", "W", "R", "S"}, {"stride", "pad", "ceil_mode"}, "max pooling, NHWC data"}},
      {"avg_pool2d_nhwc",
       {{"N", "C", "H", "W", "R", "S"},
        {"stride", "pad", "ceil_mode", "count_include_pad"},
        "average pooling, NHWC data"}},
      {"global_avg_pool2d_nhwc", {{"N", "C", "H", "W"}, {}, "global average pooling, NHWC data"}},
      {"softmax", {{"A", "N"}, {"B"}, "softmax over N of [A, N, B] (B default 1)"}},
      {"log_softmax", {{"A", "N"}, {"B"}, "log of softmax over N of [A, N, B]"}},
      {"layer_norm",
       {{"A", "N"},
        {"eps", "bias", "P"},
        "each row of [A, N] normalized, scale and bias [P] repeating along the row (eps default "
        "1e-5; bias=0: none; P default N)"}},
      {"instance_norm",
       {{"A", "N"},
        {"eps", "bias", "P"},
        "each row of [A, N] normalized, scale and bias [P] repeating over the rows (channels of "
        "images; P default A)"}},
      {"reduce_sum", {{"A", "N"}, {"B"}, "sum over N of [A, N, B] into [A, B]"}},
      {"reduce_mean", {{"A", "N"}, {"B"}, "mean over N of [A, N, B]"}},
      {"reduce_max", {{"A", "N"}, {"B"}, "max over N of [A, N, B]"}},
      {"reduce_min", {{"A", "N"}, {"B"}, "min over N of [A, N, B]"}},
      {"reduce_l1", {{"A", "N"}, {"B"}, "sum of |x| over N of [A, N, B]"}},
      {"reduce_l2", {{"A", "N"}, {"B"}, "sqrt of the sum of x^2 over N of [A, N, B]"}},
      {"reduce_sum_square", {{"A", "N"}, {"B"}, "sum of x^2 over N of [A, N, B]"}},
      {"reduce_log_sum", {{"A", "N"}, {"B"}, "log of the sum over N of [A, N, B]"}},
      {"reduce_log_sum_exp", {{"A", "N"}, {"B"}, "log of the sum of exp(x) over N of [A, N, B]"}},
      {"reduce_prod", {{"A", "N"}, {"B"}, "product over N of [A, N, B]"}},
      {"add",
       {{"N", "C", "H", "W"},
        {"yN", "yC", "yH", "yW"},
        "elementwise x + y; y's dimensions default to x's, either broadcasts"}},
      {"sub", {{"N", "C", "H", "W"}, {"yN", "yC", "yH", "yW"}, "elementwise x - y"}},
      {"mul", {{"N", "C", "H", "W"}, {"yN", "yC", "yH", "yW"}, "elementwise x * y"}},
      {"div", {{"N", "C", "H", "W"}, {"yN", "yC", "yH", "yW"}, "elementwise x / y"}},
      {"clip", {{"N", "C", "H", "W", "min", "max"}, {}, "elementwise clamp to [min, max]"}},
      {"relu", {{"N", "C", "H", "W"}, {}, "elementwise relu"}},
      {"sigmoid", {{"N", "C", "H", "W"}, {}, "elementwise sigmoid"}},
      {"silu", {{"N", "C", "H", "W"}, {}, "elementwise x*sigmoid(x)"}},
      {"hardswish", {{"N", "C", "H", "W"}, {}, "elementwise hardswish"}},
      {"copy", {{"N", "C", "H", "W"}, {}, "elementwise y = x (with +map, a program over x)"}},
  };
  return *ops;
}

const std::map<std::string, v1::EpilogueKind>& Epilogues() {
  static const auto* e = new std::map<std::string, v1::EpilogueKind>{
      {"bias", v1::EPILOGUE_KIND_BIAS_ADD},      {"relu", v1::EPILOGUE_KIND_RELU},
      {"relu6", v1::EPILOGUE_KIND_RELU6},        {"clip", v1::EPILOGUE_KIND_CLIP},
      {"leaky_relu", v1::EPILOGUE_KIND_LEAKY_RELU}, {"sigmoid", v1::EPILOGUE_KIND_SIGMOID},
      {"silu", v1::EPILOGUE_KIND_SILU},          {"hardswish", v1::EPILOGUE_KIND_HARDSWISH},
      {"residual", v1::EPILOGUE_KIND_RESIDUAL_ADD}};
  return *e;
}

}  // namespace workload_spec_internal

std::string WorkloadSpecHelp() {
  using workload_spec_internal::Ops;
  std::string out = "workload specs: OP(ATTR=VALUE,...)[+EPILOGUE...]\n";
  for (const auto& [name, info] : Ops()) {
    absl::StrAppend(&out, "  ", name, "(", absl::StrJoin(info.required, ","));
    if (!info.optional.empty()) absl::StrAppend(&out, " [,", absl::StrJoin(info.optional, ","), "]");
    absl::StrAppend(&out, ")  ", info.help, "\n");
  }
  absl::StrAppend(
      &out,
      "  rearrange(out=SHAPE[,fill=F],x0=SHAPE[INDEX,...][,x1=...])  a data mover:\n"
      "  each output element is the first input's element at its INDEX (one per\n"
      "  input dimension: [MUL*]oD[+ADD][/DIV] of output dimension D, floored,\n"
      "  or a number) inside that input, else F (0); with linear=1 (one input) a\n"
      "  linear resize: (MUL*oD+ADD)/DIV is a real coordinate, interpolated\n"
      "  between its floor and the next index, both clamped into the input\n"
      "every op but rearrange also takes dtype=float16 or dtype=bfloat16 (every\n"
      "  tensor of that dtype, float32 arithmetic; cuda targets only, bfloat16 on\n"
      "  sm_80 and newer); products (conv2d[_transpose], dense, matmul, batch_matmul) take\n"
      "  dtype=tf32: float32 tensors, factors rounded to TF32 for the tensor cores\n"
      "  (cuda sm_80 and newer)\n");
  absl::StrAppend(&out,
                  "epilogues: +bias +relu +relu6 +clip(min=A,max=B) +leaky_relu(alpha=A) "
                  "+sigmoid +silu +hardswish +residual\n"
                  "  +map[SHAPE,...](FN(ARG,...),...): an elementwise program; SHAPEs are\n"
                  "  extra inputs broadcast to the output (64x1x1), ARG is %K (0: the value\n"
                  "  so far, K: step K's result), $K (extra input K) or a number; FN one of\n   ");
  for (const MapFnInfo& f : MapFns()) absl::StrAppend(&out, " ", std::string(f.name));
  absl::StrAppend(&out, "\n");
  return out;
}

}  // namespace tunefarm::ir
