// What a registry entry's shape inference and folding see of the model under
// import: the shapes and constants known so far, and the helpers every
// operator uses to read its inputs and set its outputs. Internal to the
// frontend (the ops_*.cc families and onnx_import.cc).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "compiler/frontend/onnx_import.h"
#include "compiler/frontend/op_registry.h"

namespace tunefarm::frontend {

using Shape = std::vector<int64_t>;

// The registry's families, defined in ops_*.cc; AllOps() is their union.
const std::vector<OpDef>& NnOps();
const std::vector<OpDef>& ElementwiseOps();
const std::vector<OpDef>& ShapeOps();
const std::vector<OpDef>& IndexOps();
const std::vector<OpDef>& ReduceOps();
const std::vector<OpDef>& EinsumOps();

// The largest dimension a shape (or a --shape override) may have.
inline constexpr int64_t kMaxDim = int64_t{1} << 31;

std::string ShapeText(const Shape& s);
double Elements(const Shape& s);
// A float32 workload input of shape `s`.
v1::TensorSpec FloatSpec(const Shape& s);
// The runs of neighbouring `reduced` dimensions of `x` of extent > 1
// (dimensions of extent 1 neither count nor separate), each as its
// dimensions.
std::vector<std::vector<int64_t>> ReducedRuns(const Shape& x, const std::vector<bool>& reduced);
// `x` as [A, N, B] around its one run of reduced dimensions (B dropped when
// 1): a reduction's workload input. nullopt when there is no run or more
// than one.
std::optional<Shape> ReduceRunForm(const Shape& x, const std::vector<bool>& reduced);
// A shape the importer accepts: dimensions in [0, 2^31], rank <= 8, at most
// 1e12 elements; the error names `what`.
absl::Status CheckShape(const Shape& s, const std::string& what);

// Adds constant `c` (its shape too) named `name` to the model; returns the
// name.
std::string AddConstant(Model* m, const std::string& name, Constant c);
// Adds a 1-D int64 constant `values` named `name` to the model; returns
// the name.
std::string AddIntConstant(Model* m, const std::string& name, const std::vector<int64_t>& values);
// A node of `parent`'s expansion: `op` on `inputs`, writing `output`, named
// "<parent>/<op>_<output>".
Node ExpandedNode(const Node& parent, const std::string& op, std::vector<std::string> inputs,
                  std::string output);
// `op` over all of `parent`'s inputs in order as a chain of binary
// nodes appended to `nodes`, the last writing `output`; returns the value
// holding the result: the one input itself, with no node, when there is one.
std::string BinaryChain(const Node& parent, const std::string& op, const std::string& output,
                        std::vector<Node>* nodes);
// Element i of a constant, as a double.
double ConstValue(const Constant& c, int64_t i);
// Appends v to a constant's values (int64 or float, as the constant is).
void PushValue(Constant* c, double v);
// Whether an ONNX element type (TensorProto.DataType) is a floating-point
// one (float, double, float16, bfloat16); every other type holds integers.
bool IsFloatElementType(int64_t type);
// The number of values a constant holds.
int64_t ValueCount(const Constant& c);
// Whether a tensor of shape `s` broadcast against `out` varies only along
// dimension `axis` (a bias per channel), e.g. [C,1,1] against [N,C,H,W].
bool PerChannel(Shape s, const Shape& out, size_t axis);
// The largest constant (in elements) that folding computes at import; a
// larger result stays a node the runtime computes.
inline constexpr double kMaxFoldElements = double(1 << 22);

class ShapeContext {
 public:
  explicit ShapeContext(Model* m) : m_(*m) {}

  int64_t opset() const { return m_.opset; }

  // An error naming the node: "<op> node '<name>': <msg>".
  absl::Status Error(const Node& n, const std::string& msg) const;
  bool Has(const Node& n, size_t i) const { return i < n.inputs.size() && !n.inputs[i].empty(); }
  // The shape of input i; an error when it is missing or unknown.
  absl::StatusOr<Shape> In(const Node& n, size_t i) const;
  // The constant behind input i, or nullptr.
  const Constant* Const(const Node& n, size_t i) const;
  // Whether every given input is a constant.
  bool InputsConstant(const Node& n) const;
  // An input that decides a shape: it must be constant.
  absl::StatusOr<std::vector<int64_t>> ConstInts(const Node& n, size_t i) const;
  absl::StatusOr<std::vector<float>> ConstFloats(const Node& n, size_t i) const;
  // `axis` in [-rank, rank), made non-negative.
  absl::StatusOr<int64_t> Axis(const Node& n, int64_t axis, size_t rank) const;
  // The numpy broadcast of two shapes.
  absl::StatusOr<Shape> Broadcast(const Node& n, const Shape& a, const Shape& b) const;
  // Folds an element-wise node: output 0 (of shape `out`) is f over the
  // constants behind inputs `inputs`, broadcast numpy-style, element by
  // element in double; an int constant when `to_int`. Sets *folded; does
  // nothing when an input is not constant or the output is over
  // kMaxFoldElements.
  absl::Status FoldBroadcast(const Node& n, const std::vector<size_t>& inputs, const Shape& out,
                             bool to_int, double (*f)(const double*), bool* folded);

  // Sets the shape of output `out` (nothing for an omitted output).
  absl::Status Set(const Node& n, size_t out, Shape s);
  // Sets output `out` to a constant (and its shape).
  absl::Status SetConst(const Node& n, size_t out, Constant c);
  // Sets output 0's values, leaving its shape to the op's inference.
  void SetValues(const Node& n, Constant c);
  bool HasShape(const std::string& value) const { return m_.shapes.count(value) > 0; }
  // The constant named `value`, or nullptr.
  const Constant* Value(const std::string& value) const {
    auto it = m_.constants.find(value);
    return it == m_.constants.end() ? nullptr : &it->second;
  }

 private:
  Model& m_;
};

}  // namespace tunefarm::frontend
