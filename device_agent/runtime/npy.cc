#include "device_agent/runtime/npy.h"

#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace tunefarm::runtime {
namespace {

absl::Status Bad(const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("not a usable .npy file: ", what));
}

// The value text after 'key': in the header dict, up to the next top-level comma or '}'.
bool Field(absl::string_view header, absl::string_view key, std::string* value) {
  for (const char* q : {"'", "\""}) {
    std::string k = absl::StrCat(q, key, q);
    size_t at = header.find(k);
    if (at == absl::string_view::npos) continue;
    at = header.find(':', at + k.size());
    if (at == absl::string_view::npos) return false;
    size_t end = at + 1;
    int depth = 0;
    for (; end < header.size(); ++end) {
      char c = header[end];
      if (c == '(') ++depth;
      if (c == ')') --depth;
      if (depth == 0 && (c == ',' || c == '}')) break;
      if (depth < 0) return false;
    }
    *value = std::string(absl::StripAsciiWhitespace(header.substr(at + 1, end - at - 1)));
    return true;
  }
  return false;
}

}  // namespace

absl::StatusOr<NpyArray> ParseNpy(const std::string& bytes) {
  if (bytes.size() < 10 || bytes.compare(0, 6, "\x93NUMPY") != 0) return Bad("no NUMPY magic");
  const unsigned char major = static_cast<unsigned char>(bytes[6]);
  size_t header_len, at;
  if (major == 1) {
    header_len = size_t(uint8_t(bytes[8])) | size_t(uint8_t(bytes[9])) << 8;
    at = 10;
  } else if (major == 2 || major == 3) {
    if (bytes.size() < 12) return Bad("truncated header");
    header_len = 0;
    for (int i = 0; i < 4; ++i) header_len |= size_t(uint8_t(bytes[size_t(8 + i)])) << (8 * i);
    at = 12;
  } else {
    return Bad(absl::StrCat("format version ", int(major)));
  }
  if (header_len > bytes.size() - at) return Bad("truncated header");
  const absl::string_view header(bytes.data() + at, header_len);
  at += header_len;
  std::string descr, fortran, shape_text;
  if (!Field(header, "descr", &descr) || !Field(header, "fortran_order", &fortran) ||
      !Field(header, "shape", &shape_text))
    return Bad("the header lacks descr, fortran_order or shape");
  if (fortran != "False") return Bad("Fortran order (save a C-contiguous array)");
  descr = std::string(absl::StripAsciiWhitespace(descr));
  size_t width;
  if (descr == "'<f4'" || descr == "\"<f4\"") {
    width = 4;
  } else if (descr == "'<f8'" || descr == "\"<f8\"") {
    width = 8;
  } else {
    return Bad(absl::StrCat("element type ", descr, " (float32 or float64 only)"));
  }
  absl::string_view s = absl::StripAsciiWhitespace(shape_text);
  if (!absl::ConsumePrefix(&s, "(") || !absl::ConsumeSuffix(&s, ")")) return Bad("shape");
  NpyArray out;
  uint64_t n = 1;
  for (absl::string_view d : absl::StrSplit(s, ',', absl::SkipWhitespace())) {
    int64_t v = 0;
    if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(d), &v) || v < 0 || v > (int64_t(1) << 31))
      return Bad(absl::StrCat("shape dimension '", d, "'"));
    out.shape.push_back(v);
    n *= uint64_t(v);
    if (n > (uint64_t(1) << 31)) return Bad("too many elements");
  }
  if (bytes.size() - at != n * width)
    return Bad(
        absl::StrCat("the data holds ", bytes.size() - at, " bytes, the shape needs ", n * width));
  out.data.resize(n);
  if (width == 4) {
    std::memcpy(out.data.data(), bytes.data() + at, n * 4);
  } else {
    for (uint64_t i = 0; i < n; ++i) {
      double v;
      std::memcpy(&v, bytes.data() + at + i * 8, 8);
      out.data[i] = float(v);
    }
  }
  return out;
}

std::string NpyFileName(const std::string& value) {
  std::string name = value;
  for (char& c : name) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-' && c != '.')
      c = '_';
  }
  return name + ".npy";
}

std::string WriteNpy(const std::vector<int64_t>& shape, const std::vector<float>& data) {
  std::string dims;
  for (int64_t d : shape) absl::StrAppend(&dims, d, ",");
  if (shape.size() > 1) dims.pop_back();
  std::string header =
      absl::StrCat("{'descr': '<f4', 'fortran_order': False, 'shape': (", dims, "), }");
  const size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header += '\n';
  std::string out = "\x93NUMPY";
  out += char(1);
  out += char(0);
  out += char(header.size() & 0xff);
  out += char(header.size() >> 8);
  out += header;
  out.append(reinterpret_cast<const char*>(data.data()), data.size() * 4);
  return out;
}

}  // namespace tunefarm::runtime
