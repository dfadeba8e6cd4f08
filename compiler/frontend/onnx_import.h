// ONNX import: a model file becomes a graph of nodes in topological order
// with every value's static shape, and the constant tensors (initializers,
// Constant nodes, and shape arithmetic folded once the input shapes are
// fixed: Shape -> Gather/Slice -> Concat -> Reshape).
//
//   frontend::ImportOptions o;
//   o.input_shapes["images"] = {1, 3, 640, 640};  // for dynamic dimensions
//   TF_ASSIGN_OR_RETURN(frontend::Model m, frontend::ImportOnnxFile("yolo.onnx", o));
//
// Errors name what is wrong: a file that is not an ONNX model, an IR
// version or opset outside what is supported, an unsupported operator (with
// the node and the opset), a dynamic dimension without an override (with the
// input and dimension), a value nothing produces, a cycle, a shape that does
// not work out. Never a crash: the importer is fuzzed.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/model_graph.h"

namespace onnx {
class NodeProto;
}

namespace tunefarm::frontend {

using graph::Constant;
using graph::Node;

struct Model {
  int64_t ir_version = 0;
  int64_t opset = 0;  // of the default ("" / "ai.onnx") domain
  std::string producer;
  std::vector<std::string> inputs;  // graph inputs that are not initializers
  std::vector<std::string> outputs;
  std::vector<Node> nodes;  // topological order; folded constants removed
  std::map<std::string, std::vector<int64_t>> shapes;  // every value
  std::map<std::string, Constant> constants;
  // Consumers of each value (node indices), for fusion passes.
  std::map<std::string, std::vector<int>> consumers;
  // Values computed from the outputs of an If whose condition is only known
  // at run time, each with that If's name: import errors about a value that
  // must be constant name the If and the way out (--value).
  std::map<std::string, std::string> decided_at_run_time;
};

struct ImportOptions {
  // Shapes for graph inputs (overriding what the model says; required for
  // dimensions the model leaves symbolic).
  std::map<std::string, std::vector<int64_t>> input_shapes;
  // Graph inputs fixed to values (e.g. a sample rate the model branches
  // on): each becomes a constant of the input's shape and element type and
  // is no longer an input of the imported model.
  std::map<std::string, std::vector<double>> input_values;
};

absl::StatusOr<Model> ImportOnnx(const std::string& bytes, const ImportOptions& options = {});
absl::StatusOr<Model> ImportOnnxFile(const std::string& path, const ImportOptions& options = {});

// "1x3x224x224" -> {1, 3, 224, 224}; "name=1x3x224x224" splits at '='.
absl::StatusOr<std::pair<std::string, std::vector<int64_t>>> ParseShapeOverride(
    const std::string& text);

// "sr=16000" or "mask=1,0,1" -> {"sr", {16000}}: an input's values.
absl::StatusOr<std::pair<std::string, std::vector<double>>> ParseValueOverride(
    const std::string& text);

// The operators the importer understands (for error messages and docs).
const std::vector<std::string>& SupportedOps();

}  // namespace tunefarm::frontend
