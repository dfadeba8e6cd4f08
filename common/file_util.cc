#include "common/file_util.h"

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"

namespace tunefarm {

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace tunefarm
