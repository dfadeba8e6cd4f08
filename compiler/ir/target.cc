#include "compiler/ir/target.h"

#include <algorithm>
#include <set>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace tunefarm::ir {
namespace {

using absl::InvalidArgumentError;
using absl::StrAppend;
using absl::StrCat;

absl::Status ParseInt(const std::string& field, const std::string& value, int min, int max,
                      int* out) {
  if (!absl::SimpleAtoi(value, out) || *out < min || *out > max) {
    return InvalidArgumentError(StrCat("target field ", field, "='", value,
                                       "' must be an integer in [", min, ", ", max, "]"));
  }
  return absl::OkStatus();
}

bool ValidName(const std::string& s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (!(isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.')) return false;
  }
  return true;
}

}  // namespace

absl::StatusOr<Target> Target::Parse(const std::string& spec) {
  std::vector<std::string> parts = absl::StrSplit(spec, ' ', absl::SkipWhitespace());
  if (parts.empty()) return InvalidArgumentError("target is empty");
  Target t;
  if (parts[0] == "llvm") {
    t.kind = Kind::kLLVM;
  } else if (parts[0] == "cuda") {
    t.kind = Kind::kCUDA;
  } else {
    return InvalidArgumentError(
        StrCat("target kind '", parts[0], "' is unknown (expected llvm or cuda)"));
  }
  std::set<std::string> seen;
  for (size_t i = 1; i < parts.size(); ++i) {
    const std::string& p = parts[i];
    size_t eq = p.find('=');
    if (p.size() < 2 || p[0] != '-' || eq == std::string::npos || eq + 1 == p.size()) {
      return InvalidArgumentError(StrCat("target option '", p, "' is not of the form -name=value"));
    }
    std::string name = p.substr(0, eq), value = p.substr(eq + 1);
    if (!seen.insert(name).second) {
      return InvalidArgumentError(StrCat("target option ", name, " is given twice"));
    }
    if (t.kind == Kind::kLLVM) {
      if (name == "-mtriple") {
        std::vector<std::string> f = absl::StrSplit(value, '-');
        if (f.size() < 2 || (f[0] != "x86_64" && f[0] != "aarch64")) {
          return InvalidArgumentError(StrCat("target field -mtriple='", value,
                                             "': architecture must be x86_64 or aarch64"));
        }
        t.triple = value;
      } else if (name == "-mcpu") {
        if (!ValidName(value)) return InvalidArgumentError(StrCat("target field -mcpu='", value, "'"));
        t.cpu = value;
      } else if (name == "-mattr") {
        for (absl::string_view a : absl::StrSplit(value, ',')) {
          if (a.size() < 2 || (a[0] != '+' && a[0] != '-') || !ValidName(std::string(a.substr(1)))) {
            return InvalidArgumentError(
                StrCat("target field -mattr: '", a, "' must look like +feature or -feature"));
          }
          t.attrs.emplace_back(a);
        }
        // Feature order carries no meaning: sort, so one target has one spelling.
        std::sort(t.attrs.begin(), t.attrs.end());
        t.attrs.erase(std::unique(t.attrs.begin(), t.attrs.end()), t.attrs.end());
      } else if (name == "-num-cores") {
        if (auto s = ParseInt(name, value, 1, 4096, &t.num_cores); !s.ok()) return s;
      } else {
        return InvalidArgumentError(StrCat("target option ", name, " is unknown for llvm ",
                                           "(-mtriple, -mcpu, -mattr, -num-cores)"));
      }
    } else {
      if (name == "-arch") {
        int sm = 0;
        if (value.rfind("sm_", 0) != 0 || !absl::SimpleAtoi(value.substr(3), &sm) || sm < 30 ||
            sm > 200) {
          return InvalidArgumentError(
              StrCat("target field -arch='", value, "' must look like sm_87"));
        }
        t.sm = sm;
      } else if (name == "-max-threads-per-block") {
        if (auto s = ParseInt(name, value, 32, 1024, &t.max_threads_per_block); !s.ok()) return s;
      } else if (name == "-max-shared-memory-per-block") {
        if (auto s = ParseInt(name, value, 1024, 256 << 10, &t.max_shared_memory_per_block);
            !s.ok())
          return s;
      } else if (name == "-max-registers-per-thread") {
        if (auto s = ParseInt(name, value, 16, 255, &t.max_registers_per_thread); !s.ok()) return s;
      } else {
        return InvalidArgumentError(
            StrCat("target option ", name, " is unknown for cuda (-arch, -max-threads-per-block, ",
                   "-max-shared-memory-per-block, -max-registers-per-thread)"));
      }
    }
  }
  if (t.kind == Kind::kLLVM) {
    if (t.triple.empty()) t.triple = "x86_64-linux-gnu";
    if (t.cpu.empty()) t.cpu = "generic";
  } else {
    if (t.sm == 0) return InvalidArgumentError("cuda target needs -arch=sm_XX");
    if (t.max_threads_per_block == 0) t.max_threads_per_block = 1024;
    if (t.max_shared_memory_per_block == 0) t.max_shared_memory_per_block = kStaticSharedBytes;
    if (t.max_registers_per_thread == 0) t.max_registers_per_thread = 255;
  }
  return t;
}

std::string Target::ToString() const {
  if (kind == Kind::kCUDA) {
    return StrCat("cuda -arch=sm_", sm, " -max-threads-per-block=", max_threads_per_block,
                  " -max-shared-memory-per-block=", max_shared_memory_per_block,
                  " -max-registers-per-thread=", max_registers_per_thread);
  }
  std::string s = StrCat("llvm -mtriple=", triple, " -mcpu=", cpu);
  if (!attrs.empty()) StrAppend(&s, " -mattr=", absl::StrJoin(attrs, ","));
  if (num_cores > 0) StrAppend(&s, " -num-cores=", num_cores);
  return s;
}

std::string Target::arch() const {
  if (kind == Kind::kCUDA) return StrCat("sm_", sm);
  return triple.substr(0, triple.find('-'));
}

bool Target::wide_vectors() const {
  // LLVM 19's CPUs with AVX-512F (a codegen test checks the list against
  // LLVM's own table). Missing one costs half the FMA width: a Rocket Lake
  // host tuned GEMM 1024 at 0.65x oneDNN with 8-float vectors.
  static const char* kCpus[] = {
      "skylake-avx512", "skx",           "cascadelake",     "cooperlake", "cannonlake",
      "icelake-client", "rocketlake",    "icelake-server",  "tigerlake",  "sapphirerapids",
      "emeraldrapids",  "graniterapids", "graniterapids-d", "knl",        "knm",
      "znver4",         "znver5",        "x86-64-v4"};
  if (kind != Kind::kLLVM) return false;
  for (const char* c : kCpus) {
    if (cpu == c) return true;
  }
  for (const std::string& a : attrs) {
    if (a == "+avx512f") return true;
  }
  return false;
}

std::vector<std::string> Target::required_cpu_features() const {
  std::set<std::string> need;
  if (kind != Kind::kLLVM) return {};
  // -mattr names (LLVM's) against the names boards report.
  static const std::pair<const char*, const char*> kAttrs[] = {{"avx", "avx"},
                                                               {"avx2", "avx2"},
                                                               {"fma", "fma"},
                                                               {"sse4.2", "sse4_2"},
                                                               {"avx512f", "avx512f"},
                                                               {"avx512bw", "avx512bw"},
                                                               {"avx512vl", "avx512vl"},
                                                               {"avx512vnni", "avx512_vnni"},
                                                               {"avx512bf16", "avx512_bf16"},
                                                               {"amx-tile", "amx_tile"},
                                                               {"amx-bf16", "amx_bf16"},
                                                               {"amx-int8", "amx_int8"},
                                                               {"neon", "asimd"},
                                                               {"dotprod", "asimddp"},
                                                               {"fullfp16", "asimdhp"},
                                                               {"sve", "sve"},
                                                               {"sve2", "sve2"},
                                                               {"i8mm", "i8mm"},
                                                               {"bf16", "bf16"}};
  for (const std::string& a : attrs) {
    if (a[0] != '+') continue;
    for (const auto& [llvm, board] : kAttrs) {
      if (a.substr(1) == llvm) need.insert(board);
    }
  }
  if (arch() == "x86_64") {
    static const std::set<std::string> kAvx2 = {
        "haswell",   "broadwell", "skylake", "alderlake", "raptorlake", "meteorlake", "arrowlake",
        "lunarlake", "gracemont", "znver1",  "znver2",    "znver3",     "x86-64-v3",  "bdver4"};
    if (wide_vectors()) need.insert({"avx512f", "avx2", "fma"});
    if (kAvx2.count(cpu)) need.insert({"avx2", "fma"});
  } else {
    static const std::set<std::string> kDotFp16 = {
        "cortex-a75",  "cortex-a76",  "cortex-a76ae", "cortex-a77",  "cortex-a78",  "cortex-a78ae",
        "cortex-a78c", "cortex-x1",   "cortex-x1c",   "cortex-a710", "cortex-a715", "cortex-x2",
        "cortex-x3",   "neoverse-n1", "neoverse-n2",  "neoverse-v1", "neoverse-v2"};
    static const std::set<std::string> kSve = {"neoverse-v1", "neoverse-n2", "neoverse-v2",
                                               "cortex-a710", "cortex-a715", "cortex-x2",
                                               "cortex-x3",   "a64fx"};
    static const std::set<std::string> kSve2 = {"neoverse-n2", "neoverse-v2", "cortex-a710",
                                                "cortex-a715", "cortex-x2",   "cortex-x3"};
    if (kDotFp16.count(cpu)) need.insert({"asimddp", "asimdhp"});
    if (cpu == "carmel") need.insert("asimdhp");  // Jetson Xavier
    if (kSve.count(cpu)) need.insert("sve");
    if (kSve2.count(cpu)) need.insert("sve2");
  }
  return std::vector<std::string>(need.begin(), need.end());
}

int Target::float_lanes() const {
  if (arch() == "aarch64") return 4;
  return wide_vectors() ? 16 : 8;
}

}  // namespace tunefarm::ir
