// The native runtime's broadcasting elementwise kernels against a direct
// per-element computation: random shapes of rank 0 to 5, inputs that
// broadcast along any set of dimensions (per channel, per row, scalar,
// leading ones missing), two to four inputs, float and double.
#include "device_agent/runtime/ops.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace tunefarm::runtime {
namespace {

using Shape = std::vector<int64_t>;

// The offset in an input of shape `in` (right-aligned to `out`) of output
// element `i`.
int64_t SourceIndex(const Shape& out, const Shape& in, int64_t i) {
  int64_t off = 0, stride = 1;
  for (size_t k = 0; k < in.size(); ++k) {  // innermost dimension first
    const int64_t extent = out[out.size() - 1 - k];
    const int64_t idx = i % extent;
    i /= extent;
    const int64_t dim = in[in.size() - 1 - k];
    off += (dim == 1 ? 0 : idx) * stride;
    stride *= dim;
  }
  return off;
}

template <typename T>
struct Case {
  std::string op;
  std::function<T(const std::vector<T>&)> f;
  int inputs;
};

template <typename T>
void RandomBroadcasts(uint64_t seed) {
  const std::vector<Case<T>> cases = {
      {"Add", [](const std::vector<T>& v) { return T(v[0] + v[1]); }, 2},
      {"Sub", [](const std::vector<T>& v) { return T(v[0] - v[1]); }, 2},
      {"Mul", [](const std::vector<T>& v) { return T(v[0] * v[1]); }, 2},
      {"Div", [](const std::vector<T>& v) { return T(v[0] / v[1]); }, 2},
      {"Max", [](const std::vector<T>& v) { return std::max(std::max(v[0], v[1]), v[2]); }, 3},
      {"Min",
       [](const std::vector<T>& v) { return std::min(std::min(std::min(v[0], v[1]), v[2]), v[3]); },
       4},
      {"PRelu", [](const std::vector<T>& v) { return v[0] < 0 ? T(v[0] * v[1]) : v[0]; }, 2},
  };
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> value(-2, 2);
  int checked = 0, broadcast = 0;
  for (int trial = 0; trial < 400; ++trial) {
    const Case<T>& c = cases[trial % cases.size()];
    const int rank = int(rng() % 6);
    Shape out(rank);
    for (int64_t& d : out) d = 1 + int64_t(rng() % 7);
    if (rank > 0 && rng() % 3 == 0) out.back() = 16 + int64_t(rng() % 40);  // a long inner row
    std::vector<Shape> shapes;
    std::vector<std::vector<T>> data;
    for (int k = 0; k < c.inputs; ++k) {
      // A suffix of the output's shape, some dimensions 1; PRelu's data is whole.
      Shape s(out.begin() + (k == 0 && c.op == "PRelu" ? 0 : int(rng() % (rank + 1))), out.end());
      if (!(k == 0 && c.op == "PRelu")) {
        for (int64_t& d : s) {
          if (rng() % 2 == 0) d = 1;
        }
      }
      broadcast += s != out;
      std::vector<T> v(size_t(Numel(s)));
      for (T& x : v) x = T(value(rng));
      if (c.op == "Div" && k == 1) {
        for (T& x : v) x = x < 0 ? x - T(0.5) : x + T(0.5);
      }
      shapes.push_back(s);
      data.push_back(std::move(v));
    }
    // The output's shape needs an input of full size in each dimension.
    for (int d = 0; d < rank; ++d) {
      bool full = false;
      for (const Shape& s : shapes) {
        const int k = int(s.size()) - (rank - d);
        full |= k >= 0 && s[size_t(k)] == out[size_t(d)];
      }
      if (!full) out[size_t(d)] = 1;
    }
    Node n;
    n.op = c.op;
    n.name = "n";
    n.outputs = {"y"};
    OpArgs<T> args;
    args.node = &n;
    args.opset = 13;
    for (int k = 0; k < c.inputs; ++k) {
      n.inputs.push_back("x" + std::to_string(k));
      args.in.push_back(data[size_t(k)].data());
      args.in_shapes.push_back(shapes[size_t(k)]);
      args.in_const.push_back(nullptr);
    }
    std::vector<T> y(size_t(Numel(out)), T(-777));
    args.out = {y.data()};
    args.out_shapes = {out};
    absl::Status s = RunOp(args);
    ASSERT_TRUE(s.ok()) << c.op << ": " << s;
    std::vector<T> v(size_t(c.inputs));
    for (int64_t i = 0; i < Numel(out); ++i) {
      for (int k = 0; k < c.inputs; ++k)
        v[size_t(k)] = data[size_t(k)][size_t(SourceIndex(out, shapes[size_t(k)], i))];
      ASSERT_EQ(y[size_t(i)], c.f(v)) << c.op << " element " << i << " of trial " << trial;
      ++checked;
    }
  }
  EXPECT_GT(checked, 10000);
  EXPECT_GT(broadcast, 200);
}

TEST(NativeOps, BroadcastingElementwiseMatchesDirectIndexingFloat) { RandomBroadcasts<float>(1); }
TEST(NativeOps, BroadcastingElementwiseMatchesDirectIndexingDouble) { RandomBroadcasts<double>(2); }

// Transpose over every permutation of 4-D shapes (the NCHW <-> NHWC pair
// takes a blocked path: shapes with ragged 16-element blocks, one
// channel, one pixel; three channels to NHWC an interleaving one: two
// images of more than one 4096-pixel chunk, ragged vector tails) against
// direct indexing, y[i...] = x[i[perm]...].
TEST(NativeOps, TransposeMatchesDirectIndexing) {
  std::mt19937_64 rng(3);
  const std::vector<Shape> shapes = {{1, 3, 5, 7},  {2, 17, 4, 9},   {1, 64, 3, 3}, {1, 1, 33, 2},
                                     {3, 20, 1, 1}, {1, 40, 17, 19}, {2, 3, 70, 61}};
  int checked = 0;
  for (const Shape& xs : shapes) {
    std::vector<float> x(size_t(Numel(xs)));
    for (float& v : x) v = float(rng() % 100000) / 7.0f;
    std::vector<int64_t> perm = {0, 1, 2, 3};
    do {
      Node n;
      n.op = "Transpose";
      n.name = "t";
      n.inputs = {"x"};
      n.outputs = {"y"};
      n.ints["perm"] = perm;
      Shape ys(4);
      for (size_t d = 0; d < 4; ++d) ys[d] = xs[size_t(perm[d])];
      std::vector<float> y(x.size(), -777.0f);
      OpArgs<float> args;
      args.node = &n;
      args.opset = 13;
      args.in = {x.data()};
      args.in_shapes = {xs};
      args.in_const = {nullptr};
      args.out = {y.data()};
      args.out_shapes = {ys};
      ASSERT_TRUE(RunOp(args).ok());
      std::vector<int64_t> idx(4);
      for (int64_t i = 0; i < Numel(ys); ++i) {
        int64_t rem = i;
        for (int d = 3; d >= 0; --d) {
          idx[size_t(d)] = rem % ys[size_t(d)];
          rem /= ys[size_t(d)];
        }
        std::vector<int64_t> src(4);
        for (size_t d = 0; d < 4; ++d) src[size_t(perm[d])] = idx[d];
        const int64_t off = ((src[0] * xs[1] + src[1]) * xs[2] + src[2]) * xs[3] + src[3];
        ASSERT_EQ(y[size_t(i)], x[size_t(off)])
            << "shape " << xs[0] << "x" << xs[1] << "x" << xs[2] << "x" << xs[3] << " perm "
            << perm[0] << perm[1] << perm[2] << perm[3] << " element " << i;
        ++checked;
      }
    } while (std::next_permutation(perm.begin(), perm.end()));
  }
  EXPECT_GT(checked, 100000);
}

}  // namespace
}  // namespace tunefarm::runtime
