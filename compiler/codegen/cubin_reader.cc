// ReadCubin (cuda_codegen.h): a cubin's ELF sections read for each
// kernel's resources.
#include <cstring>

#include "absl/strings/str_cat.h"
#include "compiler/codegen/cuda_codegen.h"

namespace tunefarm::codegen {

using absl::StrCat;

namespace {

template <typename T>
bool ReadAt(const std::string& data, uint64_t offset, T* out) {
  if (offset > data.size() || data.size() - offset < sizeof(T)) return false;
  std::memcpy(out, data.data() + offset, sizeof(T));
  return true;
}

}  // namespace

absl::StatusOr<std::vector<CubinKernelInfo>> ReadCubin(const std::string& cubin) {
  auto bad = [](const char* what) {
    return absl::InvalidArgumentError(StrCat("not a readable cubin: ", what));
  };
  if (cubin.size() < 64 || std::memcmp(cubin.data(), "\x7f" "ELF", 4) != 0) return bad("no ELF header");
  if (cubin[4] != 2 || cubin[5] != 1) return bad("not 64-bit little-endian");
  uint64_t shoff = 0;
  uint16_t shentsize = 0, shnum = 0, shstrndx = 0;
  if (!ReadAt(cubin, 0x28, &shoff) || !ReadAt(cubin, 0x3a, &shentsize) ||
      !ReadAt(cubin, 0x3c, &shnum) || !ReadAt(cubin, 0x3e, &shstrndx) || shentsize < 64 ||
      shstrndx >= shnum) {
    return bad("section table");
  }
  struct Section {
    uint32_t name;
    uint32_t info;
    uint64_t offset, size;
  };
  std::vector<Section> sections(shnum);
  for (uint16_t i = 0; i < shnum; ++i) {
    uint64_t at = shoff + uint64_t(i) * shentsize;
    Section& s = sections[i];
    if (!ReadAt(cubin, at, &s.name) || !ReadAt(cubin, at + 0x18, &s.offset) ||
        !ReadAt(cubin, at + 0x20, &s.size) || !ReadAt(cubin, at + 0x2c, &s.info)) {
      return bad("section header past the end");
    }
  }
  const Section& names = sections[shstrndx];
  if (names.offset > cubin.size() || cubin.size() - names.offset < names.size) {
    return bad("section names past the end");
  }
  auto name_of = [&](const Section& s) -> std::string {
    if (s.name >= names.size) return "";
    const char* p = cubin.data() + names.offset + s.name;
    return std::string(p, strnlen(p, names.size - s.name));
  };
  // Register counts: the top byte of .text.NAME's sh_info (sm_75..sm_89);
  // newer cubins keep sh_info = the function's symbol and the count in
  // .nv.info as EIATTR_REGCOUNT (format 4, attribute 0x2f: symbol, count).
  std::map<uint32_t, int> regcount_by_symbol;
  for (const Section& s : sections) {
    if (name_of(s) != ".nv.info" || s.offset > cubin.size() || cubin.size() - s.offset < s.size)
      continue;
    for (uint64_t at = s.offset; at + 2 <= s.offset + s.size;) {
      uint8_t format = uint8_t(cubin[at]), attr = uint8_t(cubin[at + 1]);
      uint16_t size = 0;
      if (format != 4) {
        at += format == 1 ? 2 : 4;
        continue;
      }
      if (!ReadAt(cubin, at + 2, &size)) break;
      uint32_t sym = 0, value = 0;
      if (attr == 0x2f && size >= 8 && ReadAt(cubin, at + 4, &sym) && ReadAt(cubin, at + 8, &value))
        regcount_by_symbol[sym] = int(value);
      at += 4 + size;
    }
  }
  std::map<std::string, CubinKernelInfo> kernels;
  std::map<std::string, int64_t> shared;
  for (const Section& s : sections) {
    std::string n = name_of(s);
    if (n.rfind(".text.", 0) == 0) {
      CubinKernelInfo k;
      k.name = n.substr(6);
      k.registers = int(s.info >> 24);
      if (k.registers == 0) {
        auto it = regcount_by_symbol.find(s.info & 0xffffff);
        if (it != regcount_by_symbol.end()) k.registers = it->second;
      }
      k.code_bytes = int64_t(s.size);
      kernels[k.name] = k;
    } else if (n.rfind(".nv.shared.", 0) == 0) {
      shared[n.substr(11)] = int64_t(s.size);
    }
  }
  std::vector<CubinKernelInfo> out;
  for (auto& [name, k] : kernels) {
    auto it = shared.find(name);
    if (it != shared.end()) k.shared_bytes = it->second;
    out.push_back(k);
  }
  return out;
}

}  // namespace tunefarm::codegen
