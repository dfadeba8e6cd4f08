// The ONNX backend tests from Debian's libonnx-testdata (node/, with the
// *_expanded chains; pytorch-converted/; pytorch-operator/): every case is
// imported with its input shapes, built for this machine with default
// schedules, run by the graph runtime and compared with the expected outputs.
// A case we do not support must be refused with a clear error (import, build
// or an operator form the runtime does not compute); a case that builds must
// match. The list of passing and refused cases is kept in
// docs/onnx-node-tests.md; set TF_WRITE_NODE_TEST_DOC=1 to regenerate it.
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "common/float16.h"
#include "compiler/codegen/llvm_target.h"
#include "device_agent/runtime/graph_runtime.h"
#include "deploy/package_build.h"
#include "gtest/gtest.h"
#include "onnx/onnx_pb.h"
#include "tests/testing/skip.h"
#include "tests/testing/temp_dir.h"

namespace tunefarm::deploy {

using frontend::ImportOnnx;
using frontend::ImportOptions;
using frontend::Model;

using runtime::GraphRuntime;
namespace {

namespace fs = std::filesystem;
constexpr const char* kData = "/usr/share/libonnx-testdata/data";

std::string Read(const fs::path& p) { return testing::ReadFileOrEmpty(p.string()); }

// A tensor as doubles; false for element types we do not read. The 16-bit
// float types are read from their bit patterns, and so is a UINT16 tensor
// whose value is `declared` BFLOAT16 (the test data stores bfloat16 that
// way).
bool ToDoubles(const onnx::TensorProto& t, std::vector<double>* out, int declared = 0) {
  out->clear();
  const std::string& raw = t.raw_data();
  auto from_raw = [&](auto sample) {
    using E = decltype(sample);
    for (size_t i = 0; i + sizeof(E) <= raw.size(); i += sizeof(E)) {
      E v;
      std::memcpy(&v, raw.data() + i, sizeof(E));
      out->push_back(double(v));
    }
  };
  // Types of 32 bits or fewer keep their values in int32_data without raw data.
  auto raw_or_int32 = [&](auto sample) {
    if (!raw.empty()) {
      from_raw(sample);
    } else {
      out->assign(t.int32_data().begin(), t.int32_data().end());
    }
    return true;
  };
  switch (t.data_type()) {
    case onnx::TensorProto::FLOAT:
      if (!raw.empty()) {
        from_raw(float());
      } else {
        out->assign(t.float_data().begin(), t.float_data().end());
      }
      return true;
    case onnx::TensorProto::DOUBLE:
      if (!raw.empty()) {
        from_raw(double());
      } else {
        out->assign(t.double_data().begin(), t.double_data().end());
      }
      return true;
    case onnx::TensorProto::INT64:
      if (!raw.empty()) {
        from_raw(int64_t());
      } else {
        out->assign(t.int64_data().begin(), t.int64_data().end());
      }
      return true;
    case onnx::TensorProto::BOOL:
    case onnx::TensorProto::UINT8:
      return raw_or_int32(uint8_t());
    case onnx::TensorProto::INT8:
      return raw_or_int32(int8_t());
    case onnx::TensorProto::INT32:
      return raw_or_int32(int32_t());
    case onnx::TensorProto::INT16:
      return raw_or_int32(int16_t());
    case onnx::TensorProto::UINT16:
    case onnx::TensorProto::FLOAT16:
    case onnx::TensorProto::BFLOAT16: {
      raw_or_int32(uint16_t());
      const bool bfloat16 = t.data_type() == onnx::TensorProto::BFLOAT16 ||
                            declared == onnx::TensorProto::BFLOAT16;
      for (double& v : *out) {
        const uint16_t bits = uint16_t(int32_t(v));
        if (t.data_type() == onnx::TensorProto::FLOAT16) {
          v = HalfBitsToFloat(bits);
        } else if (bfloat16) {
          v = BFloat16BitsToFloat(bits);
        }
      }
      return true;
    }
    default:
      return false;
  }
}

struct Outcome {
  enum Kind { kPass, kRefused, kFail } kind = kFail;
  std::string why;
  // Every input was bound as a constant: the build folds the whole graph,
  // so a pass checks the constant folder, not a kernel.
  bool constant_only = false;
};

// Cases whose expected outputs follow a rule newer ONNX releases changed.
const std::map<std::string, std::string>& OutdatedCases() {
  static const auto* cases = [] {
    const std::string truncates =
        "the expected output truncates float32 to bfloat16 (ONNX 1.12's data); the build rounds "
        "to nearest even, as ONNX 1.14's reference and ONNX Runtime do";
    return new std::map<std::string, std::string>{
        {"test_cast_FLOAT_to_BFLOAT16", truncates},
        {"test_castlike_FLOAT_to_BFLOAT16", truncates},
        {"test_castlike_FLOAT_to_BFLOAT16_expanded", truncates},
    };
  }();
  return *cases;
}

Outcome RunCase(const fs::path& dir) {
  if (auto it = OutdatedCases().find(dir.filename().string()); it != OutdatedCases().end())
    return {Outcome::kRefused, it->second};
  const fs::path data = dir / "test_data_set_0";
  const std::string bytes = Read(dir / "model.onnx");
  onnx::ModelProto mp;
  if (!mp.ParseFromString(bytes)) return {Outcome::kRefused, "model does not parse"};
  // Inputs in the order of the graph's non-initializer inputs.
  std::vector<std::string> names;
  std::map<std::string, int> declared;
  {
    std::set<std::string> inits;
    for (const auto& i : mp.graph().initializer()) inits.insert(i.name());
    for (const auto& i : mp.graph().input())
      if (!inits.count(i.name())) names.push_back(i.name());
    for (const auto& i : mp.graph().input())
      declared[i.name()] = i.type().tensor_type().elem_type();
  }
  std::vector<onnx::TensorProto> given;
  for (size_t k = 0;; ++k) {
    fs::path f = data / absl::StrCat("input_", k, ".pb");
    if (!fs::exists(f)) break;
    onnx::TensorProto t;
    if (!t.ParseFromString(Read(f))) return {Outcome::kFail, "input does not parse"};
    if (k >= names.size()) return {Outcome::kRefused, "more inputs than the graph declares"};
    given.push_back(std::move(t));
  }
  // Float tensors of 32 bits or fewer (the runtime computes in float32;
  // float64 values can lie outside its range) and 8- and 16-bit integer
  // tensors (quantized data, exact as floats) are runtime inputs. 32- and 64-bit integer and boolean inputs (shapes,
  // indices, axes, conditions) and float and 8-bit scalars (zero points)
  // are parameters:
  // they are bound as initializers with the test's values, as a deployment
  // would fix them. `bind_floats` also binds the float inputs after the
  // first (a Resize's scales given as an input, ...).
  auto attempt = [&](bool bind_floats, ImportOptions* io,
                     std::map<std::string, std::vector<float>>* inputs) -> absl::StatusOr<Model> {
    onnx::ModelProto copy = mp;
    for (size_t k = 0; k < given.size(); ++k) {
      const onnx::TensorProto& t = given[k];
      const int type = t.data_type();
      const bool is_float =
          type == onnx::TensorProto::FLOAT || type == onnx::TensorProto::FLOAT16 ||
          type == onnx::TensorProto::BFLOAT16 || type == onnx::TensorProto::UINT8 || type == onnx::TensorProto::INT8 ||
          type == onnx::TensorProto::UINT16 || type == onnx::TensorProto::INT16;
      const bool param = t.data_type() == onnx::TensorProto::INT64 ||
                         t.data_type() == onnx::TensorProto::INT32 ||
                         t.data_type() == onnx::TensorProto::BOOL ||
                         (is_float && (t.dims_size() == 0 || (bind_floats && k > 0)));
      if (param) {
        onnx::TensorProto* init = copy.mutable_graph()->add_initializer();
        *init = t;
        init->set_name(names[k]);
        continue;
      }
      if (!is_float) {
        return absl::UnimplementedError(
            absl::StrCat("input of element type ",
                         onnx::TensorProto::DataType_Name(
                             static_cast<onnx::TensorProto::DataType>(t.data_type()))));
      }
      std::vector<double> v;
      ToDoubles(t, &v, declared[names[k]]);
      io->input_shapes[names[k]].assign(t.dims().begin(), t.dims().end());
      (*inputs)[names[k]].assign(v.begin(), v.end());
    }
    return ImportOnnx(copy.SerializeAsString(), *io);
  };
  ImportOptions io;
  std::map<std::string, std::vector<float>> inputs;
  absl::StatusOr<Model> m = attempt(false, &io, &inputs);
  if (!m.ok() && absl::StrContains(m.status().message(), "must be constant")) {
    io = {};
    inputs.clear();
    m = attempt(true, &io, &inputs);
  }
  if (!m.ok()) return {Outcome::kRefused, std::string(m.status().message())};
  if (m->inputs.size() != inputs.size()) return {Outcome::kRefused, "optional inputs left out"};
  absl::StatusOr<v1::ModelPackage> pkg = BuildPackage(*m, codegen::HostTarget());
  if (!pkg.ok()) {
    return {pkg.status().code() == absl::StatusCode::kUnimplemented ? Outcome::kRefused
                                                                    : Outcome::kFail,
            absl::StrCat("build: ", pkg.status().message())};
  }
  absl::StatusOr<std::unique_ptr<GraphRuntime>> rt = GraphRuntime::Load(*pkg, {});
  if (!rt.ok()) return {Outcome::kFail, absl::StrCat("load: ", rt.status().message())};
  std::map<std::string, std::vector<float>> outputs;
  if (absl::Status s = (*rt)->Run(inputs, &outputs); !s.ok()) {
    return {s.code() == absl::StatusCode::kUnimplemented ? Outcome::kRefused : Outcome::kFail,
            absl::StrCat("run: ", s.message())};
  }
  const bool constant_only = inputs.empty();
  for (size_t k = 0; k < m->outputs.size(); ++k) {
    fs::path f = data / absl::StrCat("output_", k, ".pb");
    onnx::TensorProto t;
    if (!t.ParseFromString(Read(f))) return {Outcome::kFail, "expected output does not parse"};
    std::vector<double> want;
    const int declared_out = int(k) < mp.graph().output_size()
                                 ? mp.graph().output(int(k)).type().tensor_type().elem_type()
                                 : 0;
    if (!ToDoubles(t, &want, declared_out))
      return {Outcome::kRefused, absl::StrCat("output of element type ", t.data_type())};
    // The shape too: a wrong one with the right values in order (a Flatten
    // split at the wrong axis) is a wrong result a later Reshape refuses.
    const std::vector<int64_t> want_shape(t.dims().begin(), t.dims().end());
    if (auto it = m->shapes.find(m->outputs[k]); it != m->shapes.end() && it->second != want_shape)
      return {Outcome::kFail, absl::StrCat("output ", k, " has shape ", absl::StrJoin(it->second, "x"),
                                           ", expected ", absl::StrJoin(want_shape, "x"))};
    const std::vector<float>& got = outputs[m->outputs[k]];
    if (got.size() != want.size())
      return {Outcome::kFail,
              absl::StrCat("output ", k, " has ", got.size(), " values, expected ", want.size())};
    for (size_t i = 0; i < want.size(); ++i) {
      const double g = got[i], w = want[i];
      if (std::isnan(w) && std::isnan(g)) continue;
      if (std::isinf(w) && g == w) continue;
      if (!(std::fabs(g - w) <= 1e-3 * std::fabs(w) + 1e-4))
        return {Outcome::kFail, absl::StrFormat("output %d[%d] = %.7g, expected %.7g", k, i, g, w)};
    }
  }
  return {Outcome::kPass, "", constant_only};
}

// Today's floor per suite: cases that pass with at least one input run
// through a kernel (the constant-only ones are counted apart). Raise it
// when cases start to pass; a case that passed and no longer does fails
// its suite's test by name (docs/onnx-node-tests.md lists them).
const std::map<std::string, int> kKernelPassFloor = {
    {"node", 704}, {"pytorch-converted", 73}, {"pytorch-operator", 29}};

const char* kDocHeader =
    "# ONNX backend tests (libonnx-testdata 1.12)\n\n"
    "Generated by `TF_WRITE_NODE_TEST_DOC=1 build/tests/onnx_node_test`; each suite's test fails\n"
    "when its section and the build disagree. Each case is imported, built for the host with\n"
    "default schedules, run by the graph runtime and compared with the expected outputs: their\n"
    "shapes, and their values (|got - want| <= 1e-3 |want| + 1e-4). Integer and boolean inputs and float scalars are\n"
    "parameters (shapes, indices, axes): they are bound as initializers with the test's values,\n"
    "as a deployment fixes them. A case whose inputs are all bound that way is folded whole at\n"
    "build time: its pass checks the constant folder, and it is listed apart. Refused cases end\n"
    "with a clear error.\n\n";

std::string DocPath() { return std::string(TF_SOURCE_DIR) + "/docs/onnx-node-tests.md"; }

// The section of `doc` about `suite`: from its "## suite:" line up to the
// next section (empty when there is none).
std::string Section(const std::string& doc, const std::string& suite) {
  const size_t at = doc.find("## " + suite + ":");
  if (at == std::string::npos) return "";
  const size_t next = doc.find("\n## ", at);
  return doc.substr(at, next == std::string::npos ? std::string::npos : next + 1 - at);
}

// The cases a section lists as passing (either list).
std::set<std::string> PassingIn(const std::string& section) {
  std::set<std::string> out;
  for (absl::string_view line : absl::StrSplit(section, '\n')) {
    for (absl::string_view prefix : {"Passing: ", "Passing with every input constant: "}) {
      if (!absl::StartsWith(line, prefix)) continue;
      for (absl::string_view n : absl::StrSplit(line.substr(prefix.size()), ", "))
        if (!n.empty()) out.insert(std::string(n));
    }
  }
  return out;
}

std::string SectionOf(const std::string& suite, const std::map<std::string, Outcome>& r) {
  int pass = 0, constant = 0;
  std::string passed, folded, refused;
  for (const auto& [n, o] : r) {
    if (o.kind == Outcome::kPass) {
      ++pass;
      constant += o.constant_only;
      std::string& list = o.constant_only ? folded : passed;
      absl::StrAppend(&list, list.empty() ? "" : ", ", n);
      continue;
    }
    std::string why = o.why.substr(0, 150);
    for (char& c : why)
      if (c == '\n' || c == '|') c = ' ';
    absl::StrAppend(&refused, "- ", n, ": ", why, "\n");
  }
  return absl::StrCat("## ", suite, ": ", pass, " of ", r.size(), " pass (", constant,
                      " with every input constant)\n\nPassing: ", passed,
                      "\n\nPassing with every input constant: ", folded, "\n\nRefused:\n\n",
                      refused, "\n");
}

// Runs every case of `suite`: none may compute a wrong value, no case the
// docs list as passing may stop passing, the kernel passes stay at or above
// the floor, and the docs section must agree (TF_WRITE_NODE_TEST_DOC=1
// rewrites it instead).
void CheckSuite(const std::string& suite) {
  if (!fs::exists(kData)) TF_SKIP("no-package") << "libonnx-testdata is not installed (" << kData << ")";
  const fs::path root = fs::path(kData) / suite;
  std::vector<fs::path> cases;
  for (const auto& e : fs::directory_iterator(root))
    if (fs::exists(e.path() / "model.onnx")) cases.push_back(e.path());
  std::sort(cases.begin(), cases.end());
  int pass = 0, constant = 0, refused = 0, fail = 0;
  std::map<std::string, Outcome> results;
  for (const fs::path& c : cases) {
    Outcome o = RunCase(c);
    results[c.filename().string()] = o;
    pass += o.kind == Outcome::kPass && !o.constant_only;
    constant += o.kind == Outcome::kPass && o.constant_only;
    refused += o.kind == Outcome::kRefused;
    if (o.kind == Outcome::kFail) {
      ++fail;
      ADD_FAILURE() << suite << "/" << c.filename().string() << ": " << o.why;
    }
  }
  std::printf("%s: %d cases, %d pass through kernels, %d pass with every input constant, "
              "%d refused with a reason, %d fail\n",
              suite.c_str(), int(cases.size()), pass, constant, refused, fail);
  const std::string doc = Read(DocPath());
  for (const std::string& n : PassingIn(Section(doc, suite))) {
    auto it = results.find(n);
    if (it == results.end()) {
      ADD_FAILURE() << suite << "/" << n << " passed (docs/onnx-node-tests.md) and is gone";
    } else if (it->second.kind != Outcome::kPass) {
      ADD_FAILURE() << suite << "/" << n << " passed (docs/onnx-node-tests.md) and now "
                    << (it->second.kind == Outcome::kRefused ? "is refused: " : "fails: ")
                    << it->second.why;
    }
  }
  EXPECT_GE(pass, kKernelPassFloor.at(suite)) << suite << ": fewer cases pass than the floor";
  const std::string section = SectionOf(suite, results);
  if (getenv("TF_WRITE_NODE_TEST_DOC") != nullptr) {
    const size_t first = doc.find("## ");
    std::string body = first == std::string::npos ? "" : doc.substr(first);
    const std::string old = Section(body, suite);
    if (old.empty()) {
      absl::StrAppend(&body, section);
    } else {
      body.replace(body.find(old), old.size(), section);
    }
    const std::string out = kDocHeader + body;
    std::ofstream(DocPath()) << out;
    std::printf("wrote the %s section of %s\n", suite.c_str(), DocPath().c_str());
    return;
  }
  const std::string listed = Section(doc, suite);
  if (listed != section) {
    // The lines that differ, not the whole section (its lists are long).
    std::vector<std::string> was = absl::StrSplit(listed, '\n'), now = absl::StrSplit(section, '\n');
    std::string diff;
    for (size_t i = 0; i < std::max(was.size(), now.size()); ++i) {
      const std::string a = i < was.size() ? was[i] : "", b = i < now.size() ? now[i] : "";
      if (a != b) absl::StrAppend(&diff, "\n  docs:  ", a.substr(0, 200), "\n  build: ", b.substr(0, 200));
    }
    ADD_FAILURE() << DocPath() << " is out of date for " << suite
                  << " (TF_WRITE_NODE_TEST_DOC=1 build/tests/onnx_node_test regenerates it):" << diff;
  }
}

TEST(OnnxNodeTest, NodeSuiteMatchesOrRefusesAndKeepsEveryPass) { CheckSuite("node"); }
TEST(OnnxNodeTest, PytorchConvertedSuiteMatchesOrRefusesAndKeepsEveryPass) {
  CheckSuite("pytorch-converted");
}
TEST(OnnxNodeTest, PytorchOperatorSuiteMatchesOrRefusesAndKeepsEveryPass) {
  CheckSuite("pytorch-operator");
}

}  // namespace
}  // namespace tunefarm::deploy
