// Einsum imports as ReduceSum, Transpose, Reshape and MatMul nodes: every
// form below, run by the float64 interpreter on random inputs, matches a
// direct sum over all its labels; forms it does not cover are refused with
// the reason.
#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "compiler/frontend/onnx_import.h"
#include "deploy/interpreter.h"
#include "gtest/gtest.h"
#include "onnx/onnx_pb.h"

namespace tunefarm::frontend {
namespace {

using Shape = std::vector<int64_t>;

std::string EinsumModel(const std::string& equation, const std::vector<Shape>& inputs,
                        int64_t opset) {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(opset);
  onnx::GraphProto* g = m.mutable_graph();
  onnx::NodeProto* n = g->add_node();
  n->set_op_type("Einsum");
  n->set_name("e");
  for (size_t i = 0; i < inputs.size(); ++i) {
    onnx::ValueInfoProto* v = g->add_input();
    v->set_name("x" + std::to_string(i));
    auto* t = v->mutable_type()->mutable_tensor_type();
    t->set_elem_type(onnx::TensorProto::FLOAT);
    t->mutable_shape();
    for (int64_t d : inputs[i]) t->mutable_shape()->add_dim()->set_dim_value(d);
    n->add_input(v->name());
  }
  n->add_output("y");
  onnx::AttributeProto* a = n->add_attribute();
  a->set_name("equation");
  a->set_type(onnx::AttributeProto::STRING);
  a->set_s(equation);
  g->add_output()->set_name("y");
  return m.SerializeAsString();
}

// The einsum of `terms` (labels per operand, ellipses spelled out as upper
// case labels by the caller) into `out`, by enumerating every label value.
std::vector<double> Reference(const std::vector<std::string>& terms, const std::string& out,
                              const std::vector<Shape>& shapes,
                              const std::vector<std::vector<double>>& values) {
  std::map<char, int64_t> size;
  for (size_t i = 0; i < terms.size(); ++i) {
    for (size_t d = 0; d < terms[i].size(); ++d)
      size[terms[i][d]] = std::max(size[terms[i][d]], shapes[i][d]);
  }
  std::vector<char> labels;
  for (const auto& [l, s] : size) labels.push_back(l);
  int64_t out_n = 1;
  for (char l : out) out_n *= size[l];
  std::vector<double> y(size_t(out_n), 0);
  std::map<char, int64_t> at;
  std::function<void(size_t)> walk = [&](size_t k) {
    if (k == labels.size()) {
      double p = 1;
      for (size_t i = 0; i < terms.size(); ++i) {
        int64_t flat = 0;
        for (size_t d = 0; d < terms[i].size(); ++d) {
          const int64_t idx = shapes[i][d] == 1 ? 0 : at[terms[i][d]];  // size 1 broadcasts
          flat = flat * shapes[i][d] + idx;
        }
        p *= values[i][size_t(flat)];
      }
      int64_t o = 0;
      for (char l : out) o = o * size[l] + at[l];
      y[size_t(o)] += p;
      return;
    }
    for (int64_t v = 0; v < size[labels[k]]; ++v) {
      at[labels[k]] = v;
      walk(k + 1);
    }
  };
  walk(0);
  return y;
}

struct Case {
  std::string equation;            // as the model has it
  std::vector<Shape> shapes;       // of the inputs
  std::vector<std::string> terms;  // the reference's labels (ellipses spelled out)
  std::string out;                 // the reference's output labels
  bool matmul;                     // expected to import as a MatMul
};

TEST(Einsum, MatmulLikeFormsMatchADirectSum) {
  const std::vector<Case> cases = {
      {"ij,jk->ik", {{3, 4}, {4, 5}}, {"ij", "jk"}, "ik", true},
      {"bij,bjk->bik", {{2, 3, 4}, {2, 4, 5}}, {"bij", "bjk"}, "bik", true},
      {"bhqd,bhkd->bhqk", {{2, 3, 4, 5}, {2, 3, 6, 5}}, {"bhqd", "bhkd"}, "bhqk", true},
      {"bij,jk", {{2, 3, 4}, {4, 5}}, {"bij", "jk"}, "bik", true},    // implicit output
      {"i,i", {{7}, {7}}, {"i", "i"}, "", true},                      // inner product
      {"ij,kl->ijkl", {{2, 3}, {4, 2}}, {"ij", "kl"}, "ijkl", true},  // outer product
      {"bij,bj->bi", {{2, 3, 4}, {2, 4}}, {"bij", "bj"}, "bi", true},
      {"ijk,jl->li", {{2, 3, 4}, {3, 5}}, {"ijk", "jl"}, "li", true},  // k summed first
      {"...ij,...jk->...ik", {{2, 3, 4}, {4, 5}}, {"Aij", "jk"}, "Aik", true},
      {"...ij,...jk->...ik", {{2, 1, 3, 4}, {5, 4, 2}}, {"BAij", "Ajk"}, "BAik", true},
      {"jbi,bjk->kbi", {{3, 2, 4}, {2, 3, 5}}, {"jbi", "bjk"}, "kbi", true},  // 3-cycles
      {"ij->ji", {{3, 4}}, {"ij"}, "ji", false},
      {"ijk->kij", {{2, 3, 4}}, {"ijk"}, "kij", false},
      {"ij->i", {{3, 4}}, {"ij"}, "i", false},
      {"ijk->", {{2, 3, 4}}, {"ijk"}, "", false},
  };
  std::mt19937_64 rng(5);
  std::uniform_real_distribution<double> u(-1, 1);
  for (int64_t opset : {12, 13}) {
    for (const Case& c : cases) {
      SCOPED_TRACE(c.equation + " at opset " + std::to_string(opset));
      absl::StatusOr<Model> m = ImportOnnx(EinsumModel(c.equation, c.shapes, opset));
      ASSERT_TRUE(m.ok()) << m.status();
      bool matmul = false;
      for (const auto& n : m->nodes) {
        EXPECT_NE(n.op, "Einsum");
        matmul |= n.op == "MatMul";
      }
      EXPECT_EQ(matmul, c.matmul);
      deploy::Values<double> in;
      std::vector<std::vector<double>> values;
      for (size_t i = 0; i < c.shapes.size(); ++i) {
        int64_t n = 1;
        for (int64_t d : c.shapes[i]) n *= d;
        std::vector<double> v(static_cast<size_t>(n), 0.0);
        for (double& x : v) x = u(rng);
        in["x" + std::to_string(i)] = v;
        values.push_back(v);
      }
      absl::StatusOr<deploy::Values<double>> got = deploy::Interpret(*m, in);
      ASSERT_TRUE(got.ok()) << got.status();
      const std::vector<double> want = Reference(c.terms, c.out, c.shapes, values);
      const std::vector<double>& y = got->at("y");
      ASSERT_EQ(y.size(), want.size());
      for (size_t i = 0; i < y.size(); ++i) ASSERT_NEAR(y[i], want[i], 1e-9) << i;
      std::vector<int64_t> want_shape;
      std::map<char, int64_t> size;
      for (size_t i = 0; i < c.terms.size(); ++i) {
        for (size_t d = 0; d < c.terms[i].size(); ++d)
          size[c.terms[i][d]] = std::max(size[c.terms[i][d]], c.shapes[i][d]);
      }
      for (char l : c.out) want_shape.push_back(size[l]);
      EXPECT_EQ(m->shapes.at("y"), want_shape);
    }
  }
}

TEST(Einsum, OtherFormsAreRefusedWithTheReason) {
  const std::vector<std::pair<Case, std::string>> refused = {
      {{"ii->i", {{3, 3}}, {}, "", false}, "label 'i' repeats in operand 0 (a diagonal"},
      {{"ij,jk,kl->il", {{2, 3}, {3, 4}, {4, 5}}, {}, "", false}, "3 operands"},
      {{"ij,jk->ik", {{2, 3}, {4, 5}}, {}, "", false}, "label 'j' is 3 in one operand and 4"},
      {{"ij->ik", {{2, 3}}, {}, "", false}, "output label 'k' is in no operand"},
      {{"ijk->i", {{2, 3}}, {}, "", false}, "3 labels for an input of rank 2"},
      {{"i1,i->", {{2, 2}, {2}}, {}, "", false}, "'1' in the equation is not a label"},
  };
  for (const auto& [c, message] : refused) {
    absl::StatusOr<Model> m = ImportOnnx(EinsumModel(c.equation, c.shapes, 13));
    ASSERT_FALSE(m.ok()) << c.equation;
    EXPECT_TRUE(absl::StrContains(m.status().message(), "Einsum node 'e'")) << m.status();
    EXPECT_TRUE(absl::StrContains(m.status().message(), message)) << m.status();
  }
}

}  // namespace
}  // namespace tunefarm::frontend
