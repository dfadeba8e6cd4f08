// Internal to the native operators (ops.h); not API. What the operator
// families share:
// - Op<T>, one node's computation: the class every kernel is a member of,
//   declared here, each kernel defined in its family's file;
// - the small loops several families run (Strides, NextIndex, ParallelFor,
//   CopyRun, Op's Parallel* chunking): inline here, not in a .cc, so each
//   family's loops can inline them as when the operators were one file;
// - NativeOp, the table entry, and one function per family listing its
//   operators (ops.cc's NativeTable is their union).
// Included only by ops.cc (RunOp, the table) and the families beside it:
// ops_elementwise.cc, ops_nn.cc, ops_shape.cc, ops_resize.cc, ops_reduce.cc,
// ops_recurrent.cc.
// Each of those is compiled with -fvect-cost-model=dynamic (CMakeLists.txt);
// a new family needs the same, and a kernel is defined in the family that
// lists it (no family calls another's kernels).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "device_agent/runtime/ops.h"

namespace tunefarm::runtime::ops_internal {

using Shape = std::vector<int64_t>;
using absl::StrCat;

inline Shape Strides(const Shape& s) {
  Shape st(s.size(), 1);
  for (int i = int(s.size()) - 2; i >= 0; --i) st[size_t(i)] = st[size_t(i) + 1] * s[size_t(i) + 1];
  return st;
}

inline int64_t Axis(int64_t a, size_t rank) { return a < 0 ? a + int64_t(rank) : a; }

// Steps a row-major multi-index over `dims` to the next element.
inline void NextIndex(Shape* idx, const Shape& dims) {
  for (int d = int(dims.size()) - 1; d >= 0; --d) {
    if (++(*idx)[size_t(d)] < dims[size_t(d)]) return;
    (*idx)[size_t(d)] = 0;
  }
}

// f(begin, end) over [0, n): through `par` (the runtime's pool) in chunks,
// or serially (no pool, or n < 2).
template <typename F>
void ParallelFor(int32_t (*par)(void*, int64_t, void*, TFParallelBody), void* ctx, int64_t n, F f) {
  if (par == nullptr || n < 2) {
    f(int64_t(0), n);
    return;
  }
  par(ctx, n, &f, [](void* c, int64_t b, int64_t e) { (*static_cast<F*>(c))(b, e); });
}

// n elements from src to dst: a library call for long runs, inline for the
// few dozen of a channels-last pixel (a call each costs more than the copy).
template <typename T>
void CopyRun(T* dst, const T* src, int64_t n) {
  if (n >= 256) {
    std::memcpy(dst, src, size_t(n) * sizeof(T));
  } else {
    for (int64_t k = 0; k < n; ++k) dst[k] = src[k];
  }
}

enum class ReduceKind { kSum, kMean, kMax, kMin, kProd, kL1, kL2, kSumSquare, kLogSum, kLogSumExp };

// Resize's index tables (ops_resize.cc).
struct ResizePlan;

// One node's computation: the kernels the families' tables (NativeOp)
// name, over the node's arguments. Each kernel is defined in the ops_*.cc
// of the family that lists it.
template <typename T>
class Op {
 public:
  explicit Op(const OpArgs<T>& a) : a_(a), n_(*a.node) {}

  const Node& node() const { return n_; }
  absl::Status Error(const std::string& what) const {
    return absl::UnimplementedError(StrCat("node '", n_.name, "' (", n_.op, "): ", what));
  }
  // The checks every kernel relies on: an output, and data for every input.
  absl::Status CheckArgs() const;
  // For kernels other than copies: input 0 is a float tensor.
  absl::Status CheckDataInput() const;

  // y = f(x) element by element, computed in double.
  template <typename F>
  absl::Status Map(F f);
  // y = f(x) element by element, computed in T (float math in the runtime,
  // double in the reference interpreter).
  template <typename F>
  absl::Status MapInT(F f) {
    const T* x = In(0);
    T* y = Out();
    ParallelElements(Numel(OutShape()), [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) y[i] = f(x[i]);
    });
    return absl::OkStatus();
  }
  // Applies f to the broadcast inputs [first, first + count) elementwise;
  // kBinary: count is 2 and f reads v[0] and v[1] only.
  template <bool kBinary = false, typename F>
  absl::Status Broadcast(size_t first, size_t count, F f);
  // y = f(a, b) over two broadcast inputs, computed in T.
  template <typename F>
  absl::Status Zip(F f) {
    return Broadcast<true>(0, 2, [f](const T* v) { return T(f(v[0], v[1])); });
  }
  absl::Status Copy();
  absl::Status Dropout();
  absl::Status Clip();
  absl::Status Cast();
  absl::Status Gelu();
  absl::Status PRelu();
  absl::Status MinMax(bool max);
  absl::Status Pow();
  absl::Status Conv();
  absl::Status ConvTranspose();
  absl::Status Gemm();
  absl::Status MatMul();
  // ConvInteger (conv) or MatMulInteger: the float operator on the
  // operands less their zero points (8-bit integers held as T).
  absl::Status IntegerProduct(bool conv);
  absl::Status DynamicQuantize();
  absl::Status Dequantize();
  absl::Status Quantize();
  absl::Status BatchNorm();
  absl::Status InstanceNorm();
  absl::Status LayerNorm();
  absl::Status Lrn();
  // RNN, GRU and LSTM: time steps in order (reverse and bidirectional too),
  // gates as ONNX orders them, in double.
  absl::Status Recurrent();
  absl::Status MaxUnpool();
  absl::Status ReverseSequence();
  absl::Status Det();
  absl::Status Pool(bool global, bool is_max);
  // Any number of spatial dimensions, one output value at a time; MaxPool's
  // Indices output (the flat input index of each max) too.
  absl::Status PoolAnyRank(bool is_max, const Shape& k, const Shape& s, const Shape& d,
                           const Shape& pads);
  absl::Status Concat();
  absl::Status Split();
  absl::Status Slice();
  absl::Status Transpose();
  absl::Status Pad();
  absl::Status Resize(bool upsample);
  absl::Status GridSample();
  absl::Status Softmax(bool log);
  // Axes: an input or an attribute, as graph::ReduceAxesAreAnInput says.
  absl::Status Reduce(ReduceKind kind);
  absl::Status Gather();
  absl::Status GatherElements();
  absl::Status GatherND();
  // ScatterElements (and opset 9's Scatter) and ScatterND: the data with
  // the updates written (or combined by `reduction`) at the indices.
  absl::Status ScatterElements();
  absl::Status ScatterND();
  absl::Status Expand();
  absl::Status Tile();
  absl::Status ArgReduce(bool max);
  absl::Status TopK();
  absl::Status OneHot();
  absl::Status Trilu();

 private:
  bool Has(size_t i) const { return i < n_.inputs.size() && !n_.inputs[i].empty(); }
  // y = f(x, scale, zero point) per element, the scale and zero point
  // (inputs 1 and 2) per tensor or per index of `axis`.
  template <typename F>
  absl::Status PerAxisAffine(F f);
  const T* In(size_t i) const { return a_.in[i]; }
  const Shape& InShape(size_t i) const { return a_.in_shapes[i]; }
  T* Out(size_t i = 0) const { return i < a_.out.size() ? a_.out[i] : nullptr; }
  const Shape& OutShape(size_t i = 0) const { return a_.out_shapes[i]; }
  // An input read as parameters: an integer or float constant, or a runtime
  // value (converted).
  bool Params(size_t i, std::vector<double>* v) const {
    v->clear();
    if (!Has(i)) return false;
    if (const Constant* c = a_.in_const[i]; c != nullptr) {
      if (c->is_int) {
        v->assign(c->ints.begin(), c->ints.end());
      } else {
        v->assign(c->floats.begin(), c->floats.end());
      }
      return true;
    }
    if (a_.in[i] == nullptr) return false;
    int64_t n = Numel(a_.in_shapes[i]);
    for (int64_t k = 0; k < n; ++k) v->push_back(double(a_.in[i][k]));
    return true;
  }
  template <typename F>
  void Parallel(int64_t n, F f) const {
    ParallelFor(a_.parallel, a_.parallel_ctx, n, f);
  }
  // f over [0, n) element ranges, in chunks of kElementChunk: fewer
  // elements run on the calling thread (waking the pool costs more).
  static constexpr int64_t kElementChunk = 4096;
  template <typename F>
  void ParallelElements(int64_t n, F f) const {
    Parallel((n + kElementChunk - 1) / kElementChunk,
             [&](int64_t b, int64_t e) { f(b * kElementChunk, std::min(n, e * kElementChunk)); });
  }

  // f over [first, last) ranges of `rows` rows of `width` elements, in
  // chunks of about kElementChunk elements (ParallelElements by whole rows).
  template <typename F>
  void ParallelRows(int64_t rows, int64_t width, F f) const {
    const int64_t per_chunk = std::max<int64_t>(1, kElementChunk / std::max<int64_t>(width, 1));
    Parallel((rows + per_chunk - 1) / per_chunk,
             [&](int64_t b, int64_t e) { f(b * per_chunk, std::min(rows, e * per_chunk)); });
  }

  // Spatial pads [begin..., end...] of a conv or pool node with `sp` spatial dims.
  absl::Status SpatialPads(const Shape& in, const Shape& out, const Shape& k, const Shape& s,
                           const Shape& d, Shape* pads) const;

  // Resize's steps (ops_resize.cc): the node's index tables, then whole
  // source rows through the last dimension's table (nearest, or linear
  // with whole weights) or a weighted sum per element.
  absl::Status PlanResize(bool upsample, ResizePlan* plan) const;
  void ResizeRows(const ResizePlan& plan) const;
  void ResizeInterpolate(const ResizePlan& plan) const;
  void ResizeCubic(const ResizePlan& plan) const;

  const OpArgs<T>& a_;
  const Node& n_;
};

//===--- The native operators ---------------------------------------------===//

// One operator the runtime computes: its kernel for each element type.
struct NativeOp {
  const char* name;
  absl::Status (*f32)(Op<float>&);
  absl::Status (*f64)(Op<double>&);
  bool copies_input = false;  // output 0 is a copy of input 0 (IsCopyOp)
};

// `kernel` is a generic lambda [](auto& op) -> absl::Status.
template <typename K>
NativeOp Kernel(const char* name, K kernel) {
  return {name, kernel, kernel};
}

// The families' operators, one function each in its ops_*.cc.
std::vector<NativeOp> ElementwiseOps();  // ops_elementwise.cc
std::vector<NativeOp> NnOps();           // ops_nn.cc
std::vector<NativeOp> ShapeOps();        // ops_shape.cc
std::vector<NativeOp> ResizeOps();       // ops_resize.cc
std::vector<NativeOp> RecurrentOps();    // ops_recurrent.cc
std::vector<NativeOp> ReduceOps();       // ops_reduce.cc

}  // namespace tunefarm::runtime::ops_internal
