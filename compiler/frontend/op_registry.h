// The ONNX operator registry: one entry per operator type the importer
// reads, holding everything the frontend knows about it: the opsets it is
// read at, the attributes the generic conversion does not read, its shape
// inference and constant folding, whether the graph runtime computes it
// natively (runtime::NativeOps), its role in fusion and, for an anchor, the
// tunable workload it becomes.
//
// Adding an operator is one OpDef in one of the family files
// (ops_nn.cc: convolution, pooling, dense, normalization; ops_elementwise.cc;
// ops_shape.cc: layout, shape and constant operators; ops_reduce.cc;
// ops_einsum.cc); when it runs natively,
// also one entry in the runtime's table (device_agent/runtime/ops.cc), which
// tests/compiler/frontend/op_registry_test.cc checks.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "compiler/frontend/onnx_import.h"
#include "tunefarm/v1/workload.pb.h"

namespace tunefarm::frontend {

// The opsets of the default ("" / "ai.onnx") domain a model may import at.
// An operator's entry reads its forms from kDefaultMinOpset on unless it
// says otherwise: before opset 6 many took forms since dropped
// (consumed_inputs, Reshape's shape attribute, legacy broadcasts); the
// entries whose form has not changed since opset 1 say so.
inline constexpr int64_t kMinOpset = 1, kMaxOpset = 18;
inline constexpr int64_t kDefaultMinOpset = 6;

class ShapeContext;  // compiler/frontend/op_context.h

// What an operator does when task extraction fuses nodes into kernels.
enum class FusionRole {
  kNone,        // never fused: a graph step of its own (or folded at import)
  kAnchor,      // a tunable kernel when `anchor` accepts the node's form
  kActivation,  // the one activation after an anchor, as `activation` says
  kAffine,      // folded into the weights and bias of an anchor that has `scale_weights`
  kAdd,         // a per-output-channel bias (constant) or a residual (same shape)
  kGateMul,     // y * g(y), with g a node of an op whose `gated` is set (SiLU)
};

struct OpDef {
  std::string_view name;  // op_type
  // Opsets of the default domain whose form of the operator the entry reads.
  int64_t min_opset = kDefaultMinOpset;
  int64_t max_opset = kMaxOpset;

  // Reads a `value` tensor attribute (already converted; nullptr when the
  // node has none) into the node or the model's constants. Set for the
  // operators that have one; other operators' tensor attributes are ignored.
  absl::Status (*read_value)(const Constant* value, Node* n, Model* m) = nullptr;
  // Rewrites an old form of the node into the one `infer` reads, before
  // shape inference (opset < 7 broadcast with an axis).
  absl::Status (*normalize)(Model* m, Node* n) = nullptr;
  // Rewrites the node as nodes of other operators, each then imported through
  // its own entry (shapes and constants of the inputs are known); the node
  // itself is dropped. Set for operators that are compositions (Einsum) or
  // have forms that are (reductions over axes apart); a node already in the
  // form `infer` reads comes back alone, as it is.
  absl::StatusOr<std::vector<Node>> (*expand)(Model* m, const Node& n) = nullptr;
  // Computes the node's outputs at import when it can (its inputs are
  // constant, or only their shapes matter) and sets *folded; the node is then
  // dropped from the graph. A folded output left without a shape gets it
  // from `infer`.
  absl::Status (*fold)(ShapeContext& c, const Node& n, bool* folded) = nullptr;
  // Checks the node's attributes and input shapes and sets the shape of each
  // of its outputs; an error names the node. nullptr: `fold` always folds.
  absl::Status (*infer)(ShapeContext& c, const Node& n) = nullptr;
  // Whether the graph runtime computes a node of this op that import keeps
  // (runtime::RunOp). false only for operators `fold` always removes.
  bool native = true;

  FusionRole fusion = FusionRole::kNone;
  // kAnchor: the node's workload without epilogues; false when the node's
  // form is not tunable (it then runs natively).
  bool (*anchor)(const Model& m, const Node& n, v1::Workload* w) = nullptr;
  // kAnchor: the input holding a bias added per output channel, or -1.
  int bias_input = -1;
  // kAnchor: the dimension of the output that is the output channel (-1: the last).
  int channel_axis = -1;
  // kAnchor: multiplies output channel c of the anchor's weight (of shape
  // `wshape`) by scale[c]; nullptr when the weight cannot absorb a
  // per-channel scale (then kAffine nodes do not fuse into it).
  void (*scale_weights)(const Node& anchor, const std::vector<int64_t>& wshape,
                        const std::vector<double>& scale, std::vector<float>* weight) = nullptr;
  // kActivation: the epilogue the node fuses as; false when this node's form
  // does not fuse (e.g. Clip bounds that are not constant).
  bool (*activation)(const Model& m, const Node& n, v1::Epilogue* e) = nullptr;
  // The epilogue y * op(y) fuses as, with a kGateMul node (Sigmoid: SiLU);
  // EPILOGUE_KIND_UNSPECIFIED when none.
  v1::EpilogueKind gated = v1::EPILOGUE_KIND_UNSPECIFIED;

  // A node of this op that no anchor fused: its workload as a kernel of its
  // own (elementwise), without epilogues; false when its form has none (it
  // then runs natively).
  bool (*alone)(const Model& m, const Node& n, v1::Workload* w) = nullptr;
  // The node as one step of a fused elementwise program (EPILOGUE_KIND_MAP):
  // sets the function and appends its literal operands (attributes, constant
  // bounds or exponents); the node's first ir::MapFnInfo::tensors inputs are
  // the step's tensor operands. false when this node's form is not one.
  bool (*map)(const Model& m, const Node& n, v1::MapStep* step) = nullptr;

  // Floating-point operations of one node; nullptr: one per output element.
  double (*flops)(const Model& m, const Node& n) = nullptr;
};

// The entry for `op`, or nullptr when the importer does not know it.
const OpDef* FindOp(std::string_view op);

// Every entry, sorted by name (case-insensitively).
const std::vector<const OpDef*>& AllOps();

// The role of `op` in fusion (kNone for an unknown operator).
FusionRole FusionRoleOf(std::string_view op);

// Below this many output elements an elementwise node that no kernel fused
// stays a native step on a CPU (a kernel call then costs more than the
// loop); below kMinReductionElements input elements, a pooling or softmax
// node. GPU packages make kernels of any size (ExtractOptions::small_kernels).
inline constexpr double kMinKernelElements = 64;
inline constexpr double kMinReductionElements = 4096;

// The 4-dimensional form of an elementwise kernel over `out` whose operands
// have `shapes` (numpy broadcast, aligned at the innermost dimension):
// fewer dimensions get leading 1s, more merge neighbouring dimensions that
// every operand either spans whole or broadcasts, which leaves the
// contiguous data as it is. Rewrites `out` and `shapes`; false when no
// merge keeps every broadcast.
bool ElementwiseForm(std::vector<int64_t>* out, std::vector<std::vector<int64_t>>* shapes);

}  // namespace tunefarm::frontend
