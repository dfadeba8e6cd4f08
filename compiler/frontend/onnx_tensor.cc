#include "compiler/frontend/onnx_tensor.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/float16.h"
#include "common/status_macros.h"
#include "compiler/frontend/op_context.h"

namespace tunefarm::frontend {

using absl::InvalidArgumentError;
using absl::StrCat;

absl::StatusOr<Constant> FromTensor(const onnx::TensorProto& t, const std::string& what) {
  Constant c;
  for (int64_t d : t.dims()) c.shape.push_back(d);
  TF_RETURN_IF_ERROR(CheckShape(c.shape, what));
  const int64_t n = c.size();
  if (t.has_data_location() && t.data_location() == onnx::TensorProto::EXTERNAL) {
    return InvalidArgumentError(StrCat(what, ": external data is not supported"));
  }
  const std::string& raw = t.raw_data();
  auto need = [&](size_t got, size_t want) -> absl::Status {
    if (got != want) {
      return InvalidArgumentError(StrCat(what, ": ", got, " values for shape ", ShapeText(c.shape),
                                         " (", want, " needed)"));
    }
    return absl::OkStatus();
  };
  switch (t.data_type()) {
    case onnx::TensorProto::FLOAT:
      if (!raw.empty()) {
        TF_RETURN_IF_ERROR(need(raw.size(), size_t(n) * 4));
        c.floats.resize(size_t(n));
        std::memcpy(c.floats.data(), raw.data(), raw.size());
      } else {
        TF_RETURN_IF_ERROR(need(size_t(t.float_data_size()), size_t(n)));
        c.floats.assign(t.float_data().begin(), t.float_data().end());
      }
      return c;
    case onnx::TensorProto::DOUBLE:
      if (!raw.empty()) {
        TF_RETURN_IF_ERROR(need(raw.size(), size_t(n) * 8));
        for (int64_t i = 0; i < n; ++i) {
          double v;
          std::memcpy(&v, raw.data() + 8 * i, 8);
          c.floats.push_back(float(v));
        }
      } else {
        TF_RETURN_IF_ERROR(need(size_t(t.double_data_size()), size_t(n)));
        for (double v : t.double_data()) c.floats.push_back(float(v));
      }
      return c;
    case onnx::TensorProto::FLOAT16:
    case onnx::TensorProto::BFLOAT16: {
      // Held as floats: a 16-bit model computes in float32, each value
      // exactly the 16-bit one it was stored as.
      const bool half = t.data_type() == onnx::TensorProto::FLOAT16;
      auto widen = [half](uint16_t bits) {
        return half ? HalfBitsToFloat(bits) : BFloat16BitsToFloat(bits);
      };
      if (!raw.empty()) {
        TF_RETURN_IF_ERROR(need(raw.size(), size_t(n) * 2));
        for (int64_t i = 0; i < n; ++i) {
          uint16_t bits;
          std::memcpy(&bits, raw.data() + 2 * i, 2);
          c.floats.push_back(widen(bits));
        }
      } else {
        // int32_data holds one 16-bit pattern per element.
        TF_RETURN_IF_ERROR(need(size_t(t.int32_data_size()), size_t(n)));
        for (int32_t bits : t.int32_data()) c.floats.push_back(widen(uint16_t(bits)));
      }
      return c;
    }
    case onnx::TensorProto::INT64:
      c.is_int = true;
      if (!raw.empty()) {
        TF_RETURN_IF_ERROR(need(raw.size(), size_t(n) * 8));
        c.ints.resize(size_t(n));
        std::memcpy(c.ints.data(), raw.data(), raw.size());
      } else {
        TF_RETURN_IF_ERROR(need(size_t(t.int64_data_size()), size_t(n)));
        c.ints.assign(t.int64_data().begin(), t.int64_data().end());
      }
      return c;
    case onnx::TensorProto::INT32:
    case onnx::TensorProto::INT8:
    case onnx::TensorProto::UINT8:
    case onnx::TensorProto::BOOL:
      c.is_int = true;
      if (!raw.empty()) {
        const size_t width = t.data_type() == onnx::TensorProto::INT32 ? 4 : 1;
        TF_RETURN_IF_ERROR(need(raw.size(), size_t(n) * width));
        for (int64_t i = 0; i < n; ++i) {
          if (width == 4) {
            int32_t v;
            std::memcpy(&v, raw.data() + 4 * i, 4);
            c.ints.push_back(v);
          } else if (t.data_type() == onnx::TensorProto::INT8) {
            c.ints.push_back(int8_t(raw[size_t(i)]));
          } else {
            c.ints.push_back(uint8_t(raw[size_t(i)]));
          }
        }
      } else {
        TF_RETURN_IF_ERROR(need(size_t(t.int32_data_size()), size_t(n)));
        c.ints.assign(t.int32_data().begin(), t.int32_data().end());
      }
      return c;
    default:
      return InvalidArgumentError(StrCat(what, ": element type ", t.data_type(),
                                         " is not supported (float, float16, bfloat16, double "
                                         "and integers are)"));
  }
}

}  // namespace tunefarm::frontend
