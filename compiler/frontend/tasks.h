// Task extraction: the tunable workloads of an imported model (convolutions,
// dense/matmul layers) with what fuses into them (bias, BatchNormalization
// folded into the weights, activation, residual add), deduplicated, with
// their weights (occurrences in the model) and FLOPs.
#pragma once

#include <array>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "compiler/frontend/onnx_import.h"
#include "compiler/ir/target.h"
#include "tunefarm/v1/workload.pb.h"

namespace tunefarm::frontend {

struct ModelTask {
  v1::Workload workload;
  std::string key;  // canonical workload key
  std::string
      description;   // one line, e.g. "conv2d 1x64x56x56 * 64x64x3x3 s1,1 p1,1,1,1 +bias+relu"
  double flops = 0;  // one occurrence
  int weight = 0;    // occurrences in the model
  std::vector<std::string> nodes;  // the nodes of its first occurrence (anchor first)
};

// One place in the model where a task's kernel computes its nodes.
struct TaskOccurrence {
  int task = -1;           // index into TaskExtraction::tasks
  std::vector<int> nodes;  // indices into Model::nodes, anchor first, in fusion order
  // nodes[0, chain) are the anchor and its named epilogues; the rest are the
  // steps of its elementwise program (EPILOGUE_KIND_MAP), in model order,
  // whose extra inputs are the values `map_inputs`.
  size_t chain = 0;
  std::vector<std::string> map_inputs;
  // The kernel reads and writes channels-last (NHWC) activations: its
  // workload is the NHWC form of what the nodes compute in NCHW.
  bool nhwc = false;
};

struct TaskExtraction {
  std::vector<ModelTask> tasks;             // in order of first appearance
  std::vector<TaskOccurrence> occurrences;  // in model order
  double model_flops = 0;                   // every node of the model
  double task_flops = 0;                    // the tasks' share of it, weights counted
};

struct ExtractOptions {
  // One channels-last activation layout: convolutions whose output
  // channels are whole vectors of `lanes` become NHWC kernels, and pooling
  // and elementwise kernels read NHWC where an input was written so; every
  // other node keeps the model's NCHW (the package converts between the two
  // where they meet).
  bool channels_last = false;
  int64_t lanes = 8;
  // Channels-last 3x3 convolutions of stride 1 with constant weights and
  // an even output height and width take Winograd F(2x2, 3x3)
  // (Conv2dAttrs.winograd): the package stores their weights transformed.
  bool winograd = false;
  // Nodes with a kernel form become kernels however small (a GPU
  // package's every step is a kernel); otherwise small elementwise nodes
  // stay native (kMinKernelElements), as do small pooling and softmax
  // nodes (kMinReductionElements).
  bool small_kernels = false;
  // For a GPU: channels-last takes every convolution with whole channel
  // vectors, whatever its size (the size rules were measured on CPUs), and
  // there is no Winograd.
  bool gpu = false;
  // The dtype of every tensor of every kernel: DTYPE_FLOAT16 or
  // DTYPE_BFLOAT16 runs the model in 16 bits (float32 arithmetic inside
  // each kernel; CUDA targets only, the compiler refuses it elsewhere).
  // DTYPE_TF32 keeps float32 and makes every product a tf32 workload
  // (Workload.tf32: tensor cores round its factors).
  v1::DType precision = v1::DTYPE_FLOAT32;
};

// OK when a model runs in `precision` on `target`: float32 anywhere
// (DTYPE_UNSPECIFIED is float32); float16, bfloat16 and tf32 on cuda
// targets, bfloat16 and tf32 from sm_80. Otherwise InvalidArgument naming
// the precision and why ("bfloat16 models need sm_80 or newer (sm_75 has
// no bfloat16 conversions)"): ir::CheckFormatTarget's rule. The CLI,
// `BuildPackage` and model jobs ask it.
absl::Status CheckPrecision(v1::DType precision, const ir::Target& target);
// The precision a `--precision` word names ("fp32", "fp16", "bf16",
// "tf32"); nullopt for any other word.
std::optional<v1::DType> PrecisionNamed(const std::string& word);

// The options for kernels of `target`: channels-last on CPU targets (with
// the target's vector lanes), NCHW on GPUs; `channels_last` overrides.
// Winograd where channels-last and the CPU target has 8 or 16 lanes (AVX2,
// AVX-512); never on a GPU.
// Tuning jobs, `tune`, `tasks` and `build` all extract with these, so what
// is tuned is what is built.
ExtractOptions ExtractOptionsFor(const ir::Target& target,
                                 std::optional<bool> channels_last = std::nullopt,
                                 v1::DType precision = v1::DTYPE_FLOAT32);

absl::StatusOr<TaskExtraction> ExtractTasks(const Model& model, const ExtractOptions& options = {});

// A shape broadcast against a 4-D NCHW value (aligned at the innermost
// dimension), written with four dimensions: [C,1,1] -> [1,C,1,1].
std::vector<int64_t> Rank4(const std::vector<int64_t>& s);
// The same shape against the value's NHWC form: Rank4 permuted to N,H,W,C.
std::vector<int64_t> NhwcShape(const std::vector<int64_t>& s);
// Whether such a tensor's NHWC memory is its NCHW memory (one channel, or
// one pixel), so it needs no conversion.
bool SameInNhwc(const std::vector<int64_t>& s);
// The NHWC dimension of NCHW dimension `axis` of a 4-D value (-4 to 3).
int64_t NhwcAxis(int64_t axis);
// Whether value `v` of `model` can be read channels-last by a kernel: a
// constant (permuted at build time), 4-D (converted whole), or SameInNhwc.
bool HasChannelsLastForm(const Model& model, const std::string& v);
// Every elementwise program input of `w` shaped against the NHWC output
// (NhwcShape).
void MapInputsChannelsLast(v1::Workload* w);

// Whether Concat node `n` (an axis attribute, 4-D runtime inputs) reads a
// value of `nhwc_values` (written channels-last): a build then runs it
// channels-last (deploy's AddNhwcNode), so its output is channels-last for
// the kernels that read it, as a kernel's is (DenseNet's BatchNorm+ReLU
// after each concatenation).
bool ConcatKeepsChannelsLast(const Model& model, const Node& n,
                             const std::set<std::string>& nhwc_values);
// Such a Concat as a channels-last data mover (a rearrange): each input
// [N, H, W, Ck] read at its offset along the concatenated axis.
v1::Workload ChannelsLastConcat(const Model& model, const Node& n);

// The NHWC form of an NCHW conv2d or pool2d workload (data [N,H,W,C],
// conv weights HWIO, elementwise program inputs permuted alike), or of an
// upsampling conv2d_transpose (weights RSCK; the forms
// ir::Canonicalize takes); false for any other workload.
bool ToChannelsLast(v1::Workload* w);

// The order ToChannelsLast takes a weight's dimensions in (dimension k of
// the result is dimension order[k] of the NCHW workload's weight): OIHW ->
// HWIO, a transposed convolution's IOHW -> RSCK. The package permutes the
// weight's values the same way.
std::array<int, 4> ChannelsLastWeightOrder(v1::OpKind op);

// The Winograd F(2x2, 3x3) form of an NHWC 3x3 convolution of stride 1,
// dilation 1, one group, channels in multiples of 4 and an even output
// height and width: winograd = 2 and the weight [4, 4, C, K] (the package
// transforms it, ir::WinogradWeight); false, unchanged, for any other.
bool ToWinograd(v1::Workload* w);

}  // namespace tunefarm::frontend
