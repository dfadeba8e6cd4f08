// Einsum, as the operators it is made of: per operand a ReduceSum of the
// labels only it has and the output lacks, then a Transpose and Reshape to
// [batch..., M, K] and [batch..., K, N], a MatMul (a tunable kernel like any
// other), and a Reshape and Transpose to the output's labels. One operand is
// a ReduceSum and a Transpose. Ellipses become labels of their own;
// repeated labels in one operand (diagonals) and more than two operands are
// refused with the reason.
#include <algorithm>
#include <cctype>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"
#include "compiler/frontend/op_context.h"
#include "compiler/frontend/op_registry.h"
#include "proto/onnx_forms.h"

namespace tunefarm::frontend {
namespace {

using absl::StrCat;

absl::Status EinsumError(const Node& n, const std::string& msg,
                         absl::StatusCode code = absl::StatusCode::kInvalidArgument) {
  return absl::Status(code, StrCat("Einsum node '", n.name, "': ", msg));
}

// The labels of k ellipsis dimensions: '0' for the last, '1' before it...
std::string EllipsisLabels(size_t k) {
  std::string labels;
  for (size_t i = 0; i < k; ++i) labels.push_back(char('0' + (k - 1 - i)));
  return labels;
}

// One operand's labels with its ellipsis replaced by `rank - letters` labels
// of their own (EllipsisLabels: counted from the right, so broadcast
// dimensions line up as in numpy).
absl::StatusOr<std::string> ExpandEllipsis(const Node& n, const std::string& term, size_t rank,
                                           size_t* ellipsis_rank) {
  const size_t dots = term.find("...");
  if (dots == std::string::npos) {
    if (term.size() != rank) {
      return EinsumError(
          n, StrCat("'", term, "' has ", term.size(), " labels for an input of rank ", rank));
    }
    return term;
  }
  const std::string before = term.substr(0, dots), after = term.substr(dots + 3);
  if (after.find('.') != std::string::npos) return EinsumError(n, "more than one ellipsis");
  const size_t letters = before.size() + after.size();
  if (letters > rank) {
    return EinsumError(n, StrCat("'", term, "' has more labels than its input's rank ", rank));
  }
  const size_t k = rank - letters;
  *ellipsis_rank = std::max(*ellipsis_rank, k);
  return before + EllipsisLabels(k) + after;
}

// Builds the nodes; each new value is named after the Einsum's output.
class Expander {
 public:
  Expander(Model* m, const Node& n) : m_(*m), n_(n) {}

  std::string Value(const std::string& what) {
    return StrCat(n_.outputs[0], "/einsum_", what, "_", counter_++);
  }
  std::string IntConstant(const std::vector<int64_t>& v) {
    return AddIntConstant(&m_, Value("const"), v);
  }
  Node Make(const std::string& op, std::vector<std::string> inputs, const std::string& out) {
    Node node;
    node.op = op;
    node.name = StrCat(n_.name, "/", op, counter_++);
    node.inputs = std::move(inputs);
    node.outputs = {out};
    return node;
  }
  // x with the labels not in `keep` summed away; `labels` follows.
  std::string SumOut(const std::string& x, std::string* labels, const std::string& keep) {
    std::vector<int64_t> axes;
    std::string left;
    for (size_t i = 0; i < labels->size(); ++i) {
      if (keep.find((*labels)[i]) == std::string::npos) {
        axes.push_back(int64_t(i));
      } else {
        left.push_back((*labels)[i]);
      }
    }
    if (axes.empty()) return x;
    const std::string out = Value("sum");
    Node r = Make("ReduceSum", {x}, out);
    r.ints["keepdims"] = {0};
    if (graph::ReduceAxesAreAnInput("ReduceSum", m_.opset)) {
      r.inputs.push_back(IntConstant(axes));
    } else {
      r.ints["axes"] = axes;
    }
    nodes_.push_back(std::move(r));
    *labels = left;
    return out;
  }
  // x permuted from `from` to `to` (the same labels).
  std::string Permute(const std::string& x, const std::string& from, const std::string& to) {
    if (from == to) return x;
    std::vector<int64_t> perm;
    for (char l : to) perm.push_back(int64_t(from.find(l)));
    const std::string out = Value("transpose");
    Node t = Make("Transpose", {x}, out);
    t.ints["perm"] = perm;
    nodes_.push_back(std::move(t));
    return out;
  }
  void Push(Node node) { nodes_.push_back(std::move(node)); }
  std::string Reshape(const std::string& x, const std::vector<int64_t>& shape) {
    const std::string out = Value("reshape");
    nodes_.push_back(Make("Reshape", {x, IntConstant(shape)}, out));
    return out;
  }
  // The last node writes the Einsum's output.
  std::vector<Node> Finish(const std::string& value) {
    if (nodes_.empty() || nodes_.back().outputs[0] != value) {
      nodes_.push_back(Make("Identity", {value}, n_.outputs[0]));
    } else {
      nodes_.back().outputs[0] = n_.outputs[0];
    }
    return std::move(nodes_);
  }

 private:
  Model& m_;
  const Node& n_;
  std::vector<Node> nodes_;
  int counter_ = 0;
};

// Sets `equation` to n's equation without spaces and `terms` to its operands'
// labels as written; an error unless it is well formed for n's inputs and one output.
absl::Status ParseEquation(const Node& n, std::string* equation, std::vector<std::string>* terms) {
  auto eq = n.strings.find("equation");
  if (eq == n.strings.end() || eq->second.empty()) return EinsumError(n, "no equation");
  equation->clear();
  for (char ch : eq->second) {
    if (ch != ' ') equation->push_back(ch);
  }
  if (n.outputs.size() != 1 || n.outputs[0].empty()) return EinsumError(n, "one output expected");
  const size_t arrow = equation->find("->");
  const std::string lhs = equation->substr(0, arrow);
  *terms = absl::StrSplit(lhs, ',');
  if (terms->size() != n.inputs.size()) {
    return EinsumError(n, StrCat("the equation names ", terms->size(), " operands for ",
                                 n.inputs.size(), " inputs"));
  }
  if (terms->size() > 2) {
    return EinsumError(
        n, StrCat(terms->size(), " operands (one or two are supported; split it into pairs)"),
        absl::StatusCode::kUnimplemented);
  }
  for (char ch : *equation) {
    if (!std::isalpha(static_cast<unsigned char>(ch)) && ch != ',' && ch != '.' && ch != '-' &&
        ch != '>') {
      return EinsumError(n, StrCat("'", std::string(1, ch), "' in the equation is not a label"));
    }
  }
  return absl::OkStatus();
}

// Appends each input's shape to `shapes` and expands each term's ellipsis
// (ExpandEllipsis); `ellipsis_rank` becomes the widest. Errors on a missing shape.
absl::Status ResolveOperands(const Model& m, const Node& n, std::vector<std::string>* terms,
                             std::vector<Shape>* shapes, size_t* ellipsis_rank) {
  for (size_t i = 0; i < terms->size(); ++i) {
    auto s = m.shapes.find(n.inputs[i]);
    if (s == m.shapes.end()) return EinsumError(n, StrCat("input ", i, " has no shape"));
    shapes->push_back(s->second);
    TF_ASSIGN_OR_RETURN((*terms)[i],
                        ExpandEllipsis(n, (*terms)[i], s->second.size(), ellipsis_rank));
  }
  return absl::OkStatus();
}

// Each label's size; a label of size 1 broadcasts against the other operand's.
// Refuses a label repeated in one operand and sizes that do not broadcast.
absl::StatusOr<std::map<char, int64_t>> LabelSizes(const Node& n,
                                                   const std::vector<std::string>& terms,
                                                   const std::vector<Shape>& shapes) {
  std::map<char, int64_t> size;
  for (size_t i = 0; i < terms.size(); ++i) {
    for (size_t d = 0; d < terms[i].size(); ++d) {
      const char l = terms[i][d];
      if (terms[i].find(l) != d) {
        return EinsumError(n,
                           StrCat("label '", std::string(1, l), "' repeats in operand ", i,
                                  " (a diagonal; not supported)"),
                           absl::StatusCode::kUnimplemented);
      }
      auto [it, fresh] = size.emplace(l, shapes[i][d]);
      if (!fresh && it->second != shapes[i][d]) {
        if (it->second != 1 && shapes[i][d] != 1) {
          return EinsumError(n, StrCat("label '", std::string(1, l), "' is ", it->second,
                                       " in one operand and ", shapes[i][d], " in another"));
        }
        it->second = std::max(it->second, shapes[i][d]);
      }
    }
  }
  return size;
}

// The output's labels: the equation's after "->" with the ellipsis expanded
// (each in some operand, once), or if none the implicit numpy output.
absl::StatusOr<std::string> OutputLabels(const Node& n, const std::string& equation,
                                         const std::vector<std::string>& terms,
                                         size_t ellipsis_rank,
                                         const std::map<char, int64_t>& size) {
  const size_t arrow = equation.find("->");
  std::string out;
  if (arrow == std::string::npos) {
    // Implicit output: the ellipsis, then the labels seen once, sorted.
    out = EllipsisLabels(ellipsis_rank);
    std::map<char, int> count;
    for (const std::string& t : terms) {
      for (char l : t) {
        if (std::isalpha(static_cast<unsigned char>(l))) ++count[l];
      }
    }
    for (const auto& [l, c] : count) {
      if (c == 1) out.push_back(l);
    }
    return out;
  }
  const std::string rhs = equation.substr(arrow + 2);
  const size_t dots = rhs.find("...");
  out = dots == std::string::npos
            ? rhs
            : rhs.substr(0, dots) + EllipsisLabels(ellipsis_rank) + rhs.substr(dots + 3);
  for (size_t d = 0; d < out.size(); ++d) {
    if (!size.count(out[d])) {
      return EinsumError(n, StrCat("output label '", std::string(1, out[d]), "' is in no operand"));
    }
    if (out.find(out[d]) != d) {
      return EinsumError(n, StrCat("output label '", std::string(1, out[d]), "' repeats"));
    }
  }
  return out;
}

// The nodes of a two-operand Einsum (labels `terms`, expanded, and `shapes`)
// as ReduceSums, Transposes and Reshapes around one MatMul, ending at `out`.
std::vector<Node> ExpandPair(Model* m, const Node& n, const std::vector<std::string>& terms,
                             const std::vector<Shape>& shapes,
                             const std::map<char, int64_t>& size, const std::string& out) {
  Expander x(m, n);
  // Sum away what only one has and the output lacks.
  std::string la = terms[0], lb = terms[1];
  std::string a = x.SumOut(n.inputs[0], &la, out + lb);
  std::string b = x.SumOut(n.inputs[1], &lb, out + la);
  std::string batch, free_a, free_b, contract;
  for (char l : la) {
    const bool in_b = lb.find(l) != std::string::npos, in_out = out.find(l) != std::string::npos;
    if (in_b && in_out) {
      batch.push_back(l);
    } else if (in_b) {
      contract.push_back(l);
    } else {
      free_a.push_back(l);
    }
  }
  for (char l : lb) {
    if (la.find(l) == std::string::npos) free_b.push_back(l);
  }
  auto product = [&](const std::string& labels) {
    int64_t p = 1;
    for (char l : labels) p *= size.at(l);
    return p;
  };
  // The dimensions of `labels`, read from an operand labelled `from`.
  auto shape_of = [](const std::string& labels, const std::string& from, const Shape& s) {
    Shape d;
    for (char l : labels) d.push_back(s[from.find(l)]);
    return d;
  };
  // The summed operands' shapes: their remaining labels' sizes.
  const Shape sa = shape_of(la, terms[0], shapes[0]), sb = shape_of(lb, terms[1], shapes[1]);
  const int64_t mm = product(free_a), kk = product(contract), nn = product(free_b);
  // Batch dimensions keep each operand's own size (1 broadcasts in MatMul).
  Shape ra, rb;
  for (char l : batch) ra.push_back(sa[la.find(l)]), rb.push_back(sb[lb.find(l)]);
  ra.push_back(mm);
  ra.push_back(kk);
  rb.push_back(kk);
  rb.push_back(nn);
  // Reshapes copy: only where the dimensions really merge or split.
  const std::string pa = batch + free_a + contract, pb = batch + contract + free_b;
  a = x.Permute(a, la, pa);
  if (shape_of(pa, la, sa) != ra) a = x.Reshape(a, ra);
  b = x.Permute(b, lb, pb);
  if (shape_of(pb, lb, sb) != rb) b = x.Reshape(b, rb);
  std::string c = x.Value("matmul");
  x.Push(x.Make("MatMul", {a, b}, c));
  Shape mm_shape, rc;
  for (char l : batch) mm_shape.push_back(size.at(l)), rc.push_back(size.at(l));
  mm_shape.push_back(mm);
  mm_shape.push_back(nn);
  for (char l : free_a) rc.push_back(size.at(l));
  for (char l : free_b) rc.push_back(size.at(l));
  if (rc != mm_shape) c = x.Reshape(c, rc);
  return x.Finish(x.Permute(c, batch + free_a + free_b, out));
}

absl::StatusOr<std::vector<Node>> ExpandEinsum(Model* m, const Node& n) {
  std::string equation;
  std::vector<std::string> terms;
  TF_RETURN_IF_ERROR(ParseEquation(n, &equation, &terms));
  size_t ellipsis_rank = 0;
  std::vector<Shape> shapes;
  TF_RETURN_IF_ERROR(ResolveOperands(*m, n, &terms, &shapes, &ellipsis_rank));
  TF_ASSIGN_OR_RETURN(const auto size, LabelSizes(n, terms, shapes));
  TF_ASSIGN_OR_RETURN(const std::string out,
                      OutputLabels(n, equation, terms, ellipsis_rank, size));
  if (terms.size() == 2) return ExpandPair(m, n, terms, shapes, size, out);
  // One operand: sum away the labels the output lacks, then permute.
  Expander x(m, n);
  std::string labels = terms[0];
  std::string v = x.SumOut(n.inputs[0], &labels, out);
  return x.Finish(x.Permute(v, labels, out));
}

}  // namespace

const std::vector<OpDef>& EinsumOps() {
  static const auto* ops = new std::vector<OpDef>{
      {.name = "Einsum", .min_opset = 12, .expand = ExpandEinsum, .native = false},
  };
  return *ops;
}

}  // namespace tunefarm::frontend
