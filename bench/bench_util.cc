#include "bench/bench_util.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/file_util.h"
#include "common/status_macros.h"
#include "common/subprocess.h"

namespace tunefarm::bench {

FlagReader TextFlag(std::string* to) {
  return [to](const std::string& v) {
    *to = v;
    return true;
  };
}

int ReadFlags(const std::string& command, const std::vector<std::string>& args,
              const std::map<std::string, FlagReader>& flags) {
  for (size_t i = 0; i < args.size(); i += 2) {
    const std::string& k = args[i];
    auto it = flags.find(k);
    if (it == flags.end()) {
      std::fprintf(stderr, "tunefarm-bench %s: unknown flag %s\n", command.c_str(), k.c_str());
      return 2;
    }
    if (i + 1 >= args.size()) {
      std::fprintf(stderr, "tunefarm-bench %s: %s needs a value\n", command.c_str(), k.c_str());
      return 2;
    }
    if (!it->second(args[i + 1])) {
      std::fprintf(stderr, "tunefarm-bench %s: bad value '%s' for %s\n", command.c_str(),
                   args[i + 1].c_str(), k.c_str());
      return 2;
    }
  }
  return 0;
}

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

absl::Status RunTunefarm(const std::vector<std::string>& args, const std::filesystem::path& log,
                         absl::Duration limit, std::vector<std::string>* lines) {
  std::vector<std::string> argv = {SiblingBinary("tunefarm")};
  argv.insert(argv.end(), args.begin(), args.end());
  const std::string err_path = log.string() + ".err";
  std::error_code ec;
  std::filesystem::remove(err_path, ec);  // the child appends
  Subprocess::Options o;
  o.stderr_path = err_path;
  TF_ASSIGN_OR_RETURN(auto child, Subprocess::Start(argv, o));
  std::ofstream out(log);
  const absl::Time deadline = absl::Now() + limit;
  std::string line;
  while (true) {
    const absl::Duration left = deadline - absl::Now();
    absl::Status s = left > absl::ZeroDuration() ? child->ReadLine(&line, left)
                                                 : absl::DeadlineExceededError("");
    if (absl::IsOutOfRange(s)) break;  // the child closed its stdout
    if (absl::IsDeadlineExceeded(s)) {
      return absl::DeadlineExceededError(
          absl::StrCat("tunefarm ", args[0], " ran past ", absl::FormatDuration(limit)));
    }
    TF_RETURN_IF_ERROR(s);
    out << line << "\n";
    if (lines != nullptr) lines->push_back(line);
  }
  TF_ASSIGN_OR_RETURN(int status, child->Wait(absl::Minutes(1)));
  if (status != 0) {
    std::string why;
    for (absl::string_view l : absl::StrSplit(ReadFile(err_path).value_or(""), '\n'))
      if (!l.empty()) why = std::string(l);
    return absl::InternalError(
        absl::StrCat("tunefarm ", args[0], " ", DescribeWaitStatus(status), ": ", why));
  }
  return absl::OkStatus();
}

}  // namespace tunefarm::bench
