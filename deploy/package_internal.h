// Internal to deploy/: the parts BuildPackage (package_build.cc) puts
// together, one file per concern: the kernel of each task and its steps
// (package_kernels.cc), constants folded into kernels (package_constants.cc),
// the channels-last values and their transposes (package_layouts.cc), and the
// package's values in one arena (memory_plan.cc).
#pragma once

#include <array>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "compiler/frontend/op_context.h"
#include "compiler/frontend/tasks.h"
#include "compiler/ir/compute.h"
#include "compiler/ir/target.h"
#include "deploy/package_build.h"
#include "proto/kernel_signature.h"

namespace tunefarm::deploy {

namespace v1 = ::tunefarm::v1;
using absl::StrCat;
using frontend::Model;
using frontend::ModelTask;
using frontend::TaskExtraction;
using frontend::TaskOccurrence;
using graph::Constant;
using graph::Node;
using graph::Numel;
using Shape = std::vector<int64_t>;

struct Built {
  ir::ComputeDAG original;  // before scheduling (argument names)
  std::string shared_object;
  v1::Schedule schedule;  // what was replayed, as the package stores it
  v1::KernelSignature signature;
};

absl::StatusOr<Built> Compile(const v1::Workload& workload, const v1::Schedule* schedule,
                              const ir::Target& target);

// Median seconds of a kernel on random inputs, on this machine: the one
// kernel Measure, in the sandbox, as the search times candidates.
absl::StatusOr<double> TimeHere(const Built& b, int threads);

void PutFloats(v1::PackageTensor* t, const Shape& shape, const std::vector<float>& data);

void PutNode(const Node& n, v1::PackageNode* p);

bool RunsHere(const ir::Target& target);

// The kernel of one task: the tuned schedule's where it builds and is
// faster than the default (by its records' times on the device, or timed
// here with `compare_locally`), else the default schedule's; `choice` says
// which and why.
absl::StatusOr<Built> ChooseKernel(const ModelTask& task, const ir::Target& target,
                                   const BuildOptions& options, KernelChoice* choice);

// The constants the package's steps reference, by name.
class PackageConstants {
 public:
  explicit PackageConstants(const frontend::Model& model) : model_(model) {}

  bool Has(const std::string& name) const { return out_.count(name) > 0; }
  // Model constant `name`, stored as the model has it.
  void Use(const std::string& name) {
    if (out_.count(name)) return;
    const graph::Constant& c = model_.constants.at(name);
    v1::PackageTensor t;
    t.set_name(name);
    if (c.is_int) {
      for (int64_t d : c.shape) t.add_shape(d);
      t.set_is_int(true);
      for (int64_t v : c.ints) t.add_i64(v);
    } else {
      PutFloats(&t, c.shape, c.floats);
    }
    out_[name] = std::move(t);
  }
  // A constant the build derived (folded weights, packed operands).
  void Put(const std::string& name, const Shape& shape, const std::vector<float>& data) {
    v1::PackageTensor t;
    t.set_name(name);
    PutFloats(&t, shape, data);
    out_[name] = std::move(t);
  }
  void PutInts(const std::string& name, const Shape& shape, const std::vector<int64_t>& data) {
    v1::PackageTensor t;
    t.set_name(name);
    for (int64_t d : shape) t.add_shape(d);
    t.set_is_int(true);
    for (int64_t v : data) t.add_i64(v);
    out_[name] = std::move(t);
  }
  // Model constant `name` as floats.
  std::vector<float> Floats(const std::string& name) const {
    const graph::Constant& c = model_.constants.at(name);
    if (!c.is_int) return c.floats;
    return std::vector<float>(c.ints.begin(), c.ints.end());
  }
  void MoveInto(v1::ModelPackage* pkg) {
    for (auto& [name, t] : out_) *pkg->add_constants() = std::move(t);
  }

 private:
  const frontend::Model& model_;
  std::map<std::string, v1::PackageTensor> out_;
};

// The anchor's weight and bias with everything linear before the
// activation folded in (batch normalization into both, constant adds into
// the bias), and the residual a fused Add reads.
struct FoldedParameters {
  bool const_weight = false;
  std::vector<float> weight, bias;
  Shape wshape;
  std::string residual;
};

absl::StatusOr<FoldedParameters> Fold(const Model& model, const ModelTask& task,
                                      const TaskOccurrence& oc, const PackageConstants& consts);

// Data of a 4-D tensor shaped `s` with its dimensions taken in `order`
// (dimension k of the result is dimension order[k] of `s`).
std::vector<float> Permute4(const std::vector<float>& x, const Shape& s,
                            const std::array<int, 4>& order);

// Data of a tensor shaped `s` (frontend::Rank4) reordered NCHW -> NHWC.
std::vector<float> ToNhwc(const std::vector<float>& x, const Shape& s);

// Where each runtime value of the package is: its NCHW form under its own
// name, its NHWC form (written by a channels-last kernel) under
// name + "@nhwc". Asking for a form the value lacks appends a Transpose
// step that makes it, once.
class Layouts {
 public:
  Layouts(const Model& model, v1::ModelPackage* pkg) : model_(model), pkg_(pkg) {}

  void WroteNchw(const std::string& v) { nchw_.insert(v); }
  std::string WroteNhwc(const std::string& v) {
    nhwc_.insert(v);
    shapes_[NhwcName(v)] = frontend::NhwcShape(model_.shapes.at(v));
    return NhwcName(v);
  }
  // The name of `v`'s NCHW form (a constant's own name).
  std::string Nchw(const std::string& v) {
    if (v.empty() || model_.constants.count(v) || nchw_.count(v) || !nhwc_.count(v)) return v;
    Convert(NhwcName(v), v, {0, 3, 1, 2});
    nchw_.insert(v);
    return v;
  }
  // The name of runtime value `v`'s NHWC form: 4-D, or one whose NHWC
  // memory is its NCHW memory (frontend::SameInNhwc; then its own name).
  std::string Nhwc(const std::string& v) {
    if (nhwc_.count(v)) return NhwcName(v);
    if (frontend::SameInNhwc(model_.shapes.at(v))) return Nchw(v);
    Convert(Nchw(v), NhwcName(v), {0, 2, 3, 1});
    WroteNhwc(v);
    return NhwcName(v);
  }
  // Whether runtime value `v` exists only in its NHWC form so far.
  bool OnlyNhwc(const std::string& v) const { return nhwc_.count(v) && !nchw_.count(v); }
  // Shapes of the values the model does not have.
  const std::map<std::string, Shape>& shapes() const { return shapes_; }
  bool any_nhwc() const { return !nhwc_.empty(); }

 private:
  static std::string NhwcName(const std::string& v) { return StrCat(v, "@nhwc"); }
  void Convert(const std::string& from, const std::string& to, std::vector<int64_t> perm) {
    Node t;
    t.op = "Transpose";
    t.name = StrCat(to, "/transpose");
    t.inputs = {from};
    t.outputs = {to};
    t.ints["perm"] = std::move(perm);
    PutNode(t, pkg_->add_steps()->mutable_node());
  }
  const Model& model_;
  v1::ModelPackage* pkg_;
  std::set<std::string> nchw_, nhwc_;
  std::map<std::string, Shape> shapes_;
};


// A native node that reads a value only written channels-last, run
// channels-last where its meaning survives permuting its axis attribute and
// per-axis constants: Concat of 4-D values, Resize (opset >= 11, no axes
// attribute), and elementwise operators (those with a map form) whose
// runtime operands all have the output's shape, with constants permuted.
// Its output is then NHWC too, so no Transpose is made on either side.
// false: the node is not one of those (it then runs NCHW).
bool AddNhwcNode(const Model& model, const Node& n, PackageConstants* consts, Layouts* layouts,
                 v1::ModelPackage* pkg);

// The kernel step of one occurrence of a task: its arguments bound to the
// model's values (in the layout the kernel reads), and the derived
// constants (folded, packed, permuted) stored.
absl::Status AddKernelStep(const Model& model, const TaskExtraction& ex, const TaskOccurrence& oc,
                           const Built& b, PackageConstants* consts, Layouts* layouts,
                           v1::ModelPackage* pkg);

// The ops ViewOffsets can place as views (where their shapes allow).
bool MayBeView(const std::string& op);

// The package's runtime values and their places in one arena. Inputs are
// defined before step 0, outputs live past the last step.
absl::Status PlanValues(const Model& model, const PackageConstants& consts,
                        const std::map<std::string, Shape>& extra_shapes, v1::ModelPackage* pkg);

// A package kernel: the built code of `workload` and why its schedule.
void PutKernel(const std::string& key, const std::string& description, const v1::Workload& workload,
               const Built& b, const KernelChoice& choice, v1::PackageKernel* k);

}  // namespace tunefarm::deploy
