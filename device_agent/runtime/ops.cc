#include "device_agent/runtime/ops.h"

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "common/status_macros.h"
#include "device_agent/runtime/ops_internal.h"

// RunOp and the table of native operators. The kernels are members of
// Op<T> (ops_internal.h), defined by family: ops_elementwise.cc, ops_nn.cc,
// ops_shape.cc, ops_resize.cc, ops_reduce.cc, ops_recurrent.cc.
namespace tunefarm::runtime {
namespace ops_internal {

template <typename T>
absl::Status Op<T>::CheckArgs() const {
  // A recurrent layer's sequence output (output 0) is optional: its last
  // states may be all a model reads.
  const bool first_optional = n_.op == "RNN" || n_.op == "GRU" || n_.op == "LSTM";
  bool any = false;
  for (T* out : a_.out) any = any || out != nullptr;
  if (!any || (!first_optional && Out() == nullptr)) return Error("no output");
  for (size_t i = 0; i < n_.inputs.size(); ++i) {
    if (Has(i) && a_.in[i] == nullptr && a_.in_const[i] == nullptr)
      return Error(StrCat("input '", n_.inputs[i], "' has no data"));
  }
  return absl::OkStatus();
}

template <typename T>
absl::Status Op<T>::CheckDataInput() const {
  if (Has(0) && In(0) == nullptr) return Error("the data input is not a float tensor");
  return absl::OkStatus();
}

}  // namespace ops_internal

namespace {

using absl::StrCat;
using ops_internal::NativeOp;
using ops_internal::Op;

// Every operator RunOp computes, by name: the families' lists, joined. The
// frontend's registry marks the same set native
// (tests/compiler/frontend/op_registry_test.cc).
const std::vector<NativeOp>& NativeTable() {
  static const auto* table = [] {
    auto* all = new std::vector<NativeOp>;
    for (std::vector<NativeOp> (*family)() :
         {ops_internal::ShapeOps, ops_internal::ElementwiseOps, ops_internal::NnOps,
          ops_internal::ResizeOps, ops_internal::ReduceOps, ops_internal::RecurrentOps}) {
      const std::vector<NativeOp> ops = family();
      all->insert(all->end(), ops.begin(), ops.end());
    }
    return all;
  }();
  return *table;
}

const NativeOp* FindNative(const std::string& op) {
  static const auto* by_name = [] {
    auto* m = new std::map<std::string, const NativeOp*>;
    for (const NativeOp& k : NativeTable()) m->emplace(k.name, &k);
    return m;
  }();
  auto it = by_name->find(op);
  return it == by_name->end() ? nullptr : it->second;
}

absl::Status Call(const NativeOp& k, Op<float>& o) { return k.f32(o); }
absl::Status Call(const NativeOp& k, Op<double>& o) { return k.f64(o); }

}  // namespace

bool IsCopyOp(const std::string& op) {
  const NativeOp* k = FindNative(op);
  return k != nullptr && k->copies_input;
}

bool IsViewOp(const std::string& op) { return op != "Dropout" && IsCopyOp(op); }

std::vector<std::string> NativeOps() {
  std::vector<std::string> names;
  for (const NativeOp& k : NativeTable()) names.emplace_back(k.name);
  std::sort(names.begin(), names.end());
  return names;
}

template <typename T>
absl::Status RunOp(const OpArgs<T>& args) {
  if (args.node == nullptr) return absl::InvalidArgumentError("no node");
  if (args.in.size() != args.node->inputs.size() || args.in_const.size() != args.in.size() ||
      args.in_shapes.size() != args.in.size() || args.out.size() != args.out_shapes.size())
    return absl::InvalidArgumentError(
        StrCat("node '", args.node->name, "': argument counts do not match"));
  Op<T> op(args);
  TF_RETURN_IF_ERROR(op.CheckArgs());
  const NativeOp* k = static_cast<const NativeOp*>(args.resolved);
  if (k == nullptr) k = FindNative(args.node->op);
  if (k == nullptr) return op.Error("not an operator the runtime computes");
  args.resolved = k;
  if (!k->copies_input) TF_RETURN_IF_ERROR(op.CheckDataInput());
  return Call(*k, op);
}

template absl::Status RunOp<float>(const OpArgs<float>&);
template absl::Status RunOp<double>(const OpArgs<double>&);

}  // namespace tunefarm::runtime
