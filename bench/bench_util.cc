#include "bench/bench_util.h"

#include <unistd.h>

#include <cstdlib>

namespace tunefarm::bench {

std::string SiblingBinary(const std::string& name) {
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  const std::string p = n > 0 ? std::string(self, size_t(n)) : std::string("./tunefarm-bench");
  return p.substr(0, p.rfind('/') + 1) + name;
}

std::string CacheDir() {
  if (const char* c = getenv("TUNEFARM_CACHE")) return c;
  const char* home = getenv("HOME");
  return std::string(home ? home : "/root") + "/.cache/tunefarm";
}

}  // namespace tunefarm::bench
