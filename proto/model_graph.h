// The model graph of the package format: nodes with their attributes and
// constant tensors, as the ONNX importer (compiler/frontend) reads them, the
// whole-model build (deploy) writes them into a package and the board's
// graph runtime and native operators (device_agent/runtime) take them.
// Plain data, no ONNX dependency.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace tunefarm::graph {

// A constant tensor: float data or int64 data (shape arithmetic), row-major.
struct Constant {
  std::vector<int64_t> shape;
  bool is_int = false;
  std::vector<float> floats;
  std::vector<int64_t> ints;
  // A 16-bit package's constant: the bits it stores (floats holds their
  // values), uploaded to a GPU as they are and then dropped.
  std::vector<uint16_t> bits16;
  int64_t size() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
};

struct Node {
  std::string op;                   // op_type, e.g. "Conv"
  std::string name;                 // the node's name, or "<op>#<index>" when it has none
  std::vector<std::string> inputs;  // "" for an omitted optional input
  std::vector<std::string> outputs;
  // Attributes, by name (ints, floats, strings; tensors become Constants).
  std::map<std::string, std::vector<int64_t>> ints;
  std::map<std::string, std::vector<float>> floats;
  std::map<std::string, std::string> strings;

  int64_t Int(const std::string& attr, int64_t fallback) const {
    auto it = ints.find(attr);
    return it == ints.end() || it->second.empty() ? fallback : it->second[0];
  }
  float Float(const std::string& attr, float fallback) const {
    auto it = floats.find(attr);
    return it == floats.end() || it->second.empty() ? fallback : it->second[0];
  }
  std::vector<int64_t> Ints(const std::string& attr) const {
    auto it = ints.find(attr);
    return it == ints.end() ? std::vector<int64_t>() : it->second;
  }
};

// Elements of a dense tensor of `shape` (1 for a scalar's empty shape).
inline int64_t Numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

}  // namespace tunefarm::graph
