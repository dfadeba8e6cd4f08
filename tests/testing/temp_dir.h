// A temporary directory removed (recursively) when the object dies.
#pragma once

#include <string>

namespace tunefarm::testing {

class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  std::string File(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// Reads a whole file ("" if missing).
std::string ReadFileOrEmpty(const std::string& path);
void WriteFile(const std::string& path, const std::string& content);

}  // namespace tunefarm::testing
