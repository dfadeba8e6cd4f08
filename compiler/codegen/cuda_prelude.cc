#include "compiler/codegen/cuda_prelude.h"

#include "absl/strings/str_cat.h"

namespace tunefarm::codegen {

using absl::StrAppend;
using absl::StrCat;

std::string WgmmaName(int64_t n, bool a_mn, bool b_mn) {
  return StrCat("tf_wgmma_m64n", n, "k16", a_mn ? "_amn" : "", b_mn ? "_bmn" : "");
}

std::string WgmmaFunction(int64_t n, const std::string& type, bool a_mn, bool b_mn) {
  std::string regs, operands;
  for (int64_t i = 0; i < n / 2; ++i) {
    StrAppend(&regs, i ? ", " : "", "%", i);
    StrAppend(&operands, i ? ", " : "", "\"+f\"(d[", i, "])");
  }
  return StrCat("__device__ __forceinline__ void ", WgmmaName(n, a_mn, b_mn),
                "(float* d, unsigned long long da, unsigned long long db) {\n"
                "  asm volatile(\n"
                "      \"{\\n.reg .pred p;\\nsetp.ne.b32 p, %",
                n / 2 + 2, ", 0;\\n\"\n      \"wgmma.mma_async.sync.aligned.m64n", n, "k16.f32.",
                type, ".", type, " {", regs, "}, %", n / 2, ", %", n / 2 + 1, ", p, 1, 1, ",
                a_mn ? 1 : 0, ", ", b_mn ? 1 : 0, ";\\n}\\n\"\n      : ", operands,
                "\n      : \"l\"(da), \"l\"(db), \"r\"(1)\n      : \"memory\");\n}\n");
}

}  // namespace tunefarm::codegen
