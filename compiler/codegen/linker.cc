#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "common/subprocess.h"
#include "compiler/codegen/llvm_codegen.h"

namespace tunefarm::codegen {
namespace {

std::string FindLld() {
  for (const char* p : {"/usr/lib/llvm-19/bin/ld.lld", "/usr/bin/ld.lld-19"}) {
    if (access(p, X_OK) == 0) return p;
  }
  return "";
}

std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

absl::StatusOr<std::string> LinkSharedObject(const std::string& object) {
  static const std::string lld = FindLld();
  if (lld.empty()) return absl::FailedPreconditionError("ld.lld from LLVM 19 not found (lld-19)");
  const char* tmp = getenv("TMPDIR");
  std::string dir_template = std::string(tmp ? tmp : "/tmp") + "/tunefarm-link-XXXXXX";
  char* dir = mkdtemp(dir_template.data());
  if (dir == nullptr) return absl::InternalError("mkdtemp failed");
  std::string d = dir;
  std::string obj = d + "/k.o", so = d + "/k.so", err = d + "/lld.err";
  std::ofstream(obj, std::ios::binary) << object;
  Subprocess::Options o;
  o.capture_stdout = false;
  o.stderr_path = err;
  absl::StatusOr<std::string> result;
  auto child = Subprocess::Start({lld, "-shared", "--no-undefined-version", "-o", so, obj}, o);
  if (!child.ok()) {
    result = child.status();
  } else {
    auto st = (*child)->Wait(absl::Seconds(60));
    if (!st.ok()) {
      result = st.status();
    } else if (!WIFEXITED(*st) || WEXITSTATUS(*st) != 0) {
      result = absl::InternalError(absl::StrCat("ld.lld failed: ", Slurp(err)));
    } else {
      result = Slurp(so);
    }
  }
  std::error_code ec;
  std::filesystem::remove_all(d, ec);
  return result;
}

}  // namespace tunefarm::codegen
