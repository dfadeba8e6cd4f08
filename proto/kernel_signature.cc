#include "proto/kernel_signature.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/float16.h"
#include "common/random_fill.h"

namespace tunefarm {

int64_t LogicalElements(const v1::KernelArgument& arg) {
  int64_t n = 1;
  for (int64_t e : arg.shape()) n *= e;
  return n;
}

std::vector<int64_t> KernelShape(const v1::KernelArgument& arg) {
  if (arg.pack_block_size() == 0) return {arg.shape().begin(), arg.shape().end()};
  std::vector<int64_t> shape;
  for (int d = 0; d < arg.shape_size(); ++d) {
    const int64_t b = arg.pack_block(d);
    shape.push_back(b == 0 ? arg.shape(d) : (arg.shape(d) + b - 1) / b);
  }
  for (int d : arg.pack_inner()) shape.push_back(arg.pack_block(d));
  return shape;
}

int64_t KernelElements(const v1::KernelArgument& arg) {
  int64_t n = 1;
  for (int64_t e : KernelShape(arg)) n *= e;
  return n;
}

absl::Status CheckSignature(const v1::KernelSignature& signature, int64_t max_elements) {
  if (signature.args_size() < 1) return absl::InvalidArgumentError("the kernel has no arguments");
  int64_t total = 0;
  for (int i = 0; i < signature.args_size(); ++i) {
    const v1::KernelArgument& a = signature.args(i);
    auto bad = [&](const std::string& why) {
      return absl::InvalidArgumentError(absl::StrCat("kernel argument ", i, ": ", why));
    };
    if (a.dtype() != v1::DTYPE_FLOAT32 && a.dtype() != v1::DTYPE_FLOAT16 &&
        a.dtype() != v1::DTYPE_BFLOAT16)
      return bad("only float32, float16 and bfloat16 arguments are supported");
    if (a.shape_size() == 0 || a.shape_size() > 8) return bad("rank must be 1 to 8");
    int64_t n = 1;
    for (int64_t e : a.shape()) {
      if (e <= 0 || e > max_elements || n > max_elements / e) return bad("bad or too large shape");
      n *= e;
    }
    if (a.pack_block_size() != 0) {
      if (a.pack_block_size() != a.shape_size()) return bad("pack_block needs one entry per dimension");
      std::vector<bool> named(size_t(a.shape_size()), false);
      int split = 0;
      for (int d = 0; d < a.shape_size(); ++d) {
        if (a.pack_block(d) < 0 || a.pack_block(d) > max_elements) return bad("bad block");
        if (a.pack_block(d) > 0) ++split;
      }
      if (a.pack_inner_size() != split) return bad("pack_inner must name each split dimension");
      for (int d : a.pack_inner()) {
        if (d < 0 || d >= a.shape_size() || a.pack_block(d) == 0 || named[size_t(d)])
          return bad("pack_inner must name each split dimension once");
        named[size_t(d)] = true;
      }
      // Blocks round extents up: bound the packed size as well.
      int64_t packed = 1;
      for (int64_t e : KernelShape(a)) {
        if (packed > max_elements / e) return bad("packed size too large");
        packed *= e;
      }
      n = std::max(n, packed);
    } else if (a.pack_inner_size() != 0) {
      return bad("pack_inner without pack_block");
    }
    if (total > max_elements - n) return absl::InvalidArgumentError("the kernel's arguments are too large");
    total += n;
  }
  return absl::OkStatus();
}

std::vector<float> PackArgument(const v1::KernelArgument& arg, const std::vector<float>& logical) {
  if (arg.pack_block_size() == 0) return logical;
  const std::vector<int64_t> packed_shape = KernelShape(arg);
  const int rank = arg.shape_size();
  std::vector<float> out(size_t(KernelElements(arg)), 0.0f);
  std::vector<int64_t> idx(size_t(rank), 0);
  std::vector<int64_t> at(packed_shape.size(), 0);
  for (int64_t flat = 0; flat < int64_t(logical.size()); ++flat) {
    int64_t rest = flat;
    for (int d = rank - 1; d >= 0; --d) {
      idx[size_t(d)] = rest % arg.shape(d);
      rest /= arg.shape(d);
    }
    for (int d = 0; d < rank; ++d) {
      const int64_t b = arg.pack_block(d);
      at[size_t(d)] = b == 0 ? idx[size_t(d)] : idx[size_t(d)] / b;
    }
    for (int j = 0; j < arg.pack_inner_size(); ++j) {
      const int d = arg.pack_inner(j);
      at[size_t(rank + j)] = idx[size_t(d)] % arg.pack_block(d);
    }
    int64_t offset = 0;
    for (size_t d = 0; d < packed_shape.size(); ++d) offset = offset * packed_shape[d] + at[d];
    out[size_t(offset)] = logical[size_t(flat)];
  }
  return out;
}

std::vector<float> RandomInput(const v1::KernelSignature& signature, int index, uint64_t seed) {
  std::vector<float> v(size_t(LogicalElements(signature.args(index))));
  FillUniform(seed, uint64_t(index), v.data(), int64_t(v.size()));
  if (std::optional<HalfKind> k = HalfKindOf(signature.args(index).dtype())) {
    // The values a 16-bit tensor can hold, still never zero.
    for (float& x : v) {
      x = RoundToHalf(x, *k);
      if (x == 0.0f) x = 0.5f;
    }
  } else if (signature.tf32()) {
    // TF32 factors: the kernel's products are exact, as the reference's.
    for (float& x : v) {
      x = RoundToTf32(x);
      if (x == 0.0f) x = 0.5f;
    }
  }
  return v;
}

std::vector<std::vector<float>> RandomInputs(const v1::KernelSignature& signature, uint64_t seed) {
  std::vector<std::vector<float>> inputs;
  for (int i = 0; i + 1 < signature.args_size(); ++i) {
    inputs.push_back(RandomInput(signature, i, seed));
  }
  return inputs;
}

}  // namespace tunefarm
