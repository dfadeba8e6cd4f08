#include "tests/deploy/ort_runner.h"

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/subprocess.h"
#include "device_agent/runtime/npy.h"
#include "tests/testing/temp_dir.h"

namespace tunefarm::testing {

namespace fs = std::filesystem;

std::string ModelCache() {
  if (const char* c = getenv("TUNEFARM_CACHE")) return c;
  return std::string(getenv("HOME") ? getenv("HOME") : "/root") + "/.cache/tunefarm";
}

absl::Status OrtAvailable() {
  if (!fs::exists(ModelCache() + "/ort/node_modules/onnxruntime-node"))
    return absl::FailedPreconditionError("ONNX Runtime is not fetched: run scripts/fetch-models.sh");
  if (system("node --version > /dev/null 2>&1") != 0)
    return absl::FailedPreconditionError("node is not installed");
  return absl::OkStatus();
}

absl::StatusOr<deploy::Values<float>> RunOrt(
    const std::string& model_path, const deploy::Values<float>& inputs,
    const std::map<std::string, std::vector<int64_t>>& shapes,
    const std::vector<std::string>& outputs, const std::string& scratch,
    const std::map<std::string, std::vector<double>>& fixed) {
  static int calls = 0;
  const std::string out_dir = absl::StrCat(scratch, "/ort-out-", calls++);
  std::vector<std::string> argv = {"/usr/bin/env", "node",
                                   std::string(TF_SOURCE_DIR) + "/bench/ort_run.js",
                                   model_path, "--threads", "1", "--repeat", "1", "--out", out_dir};
  int i = 0;
  for (const auto& [name, v] : inputs) {
    const std::string f = absl::StrCat(out_dir, "-in", i++, ".npy");
    std::ofstream(f, std::ios::binary) << runtime::WriteNpy(shapes.at(name), v);
    argv.push_back("--input");
    argv.push_back(name + "=" + f);
  }
  for (const auto& [name, values] : fixed) {
    argv.push_back("--value");
    argv.push_back(absl::StrCat(name, "=", absl::StrJoin(values, ",")));
  }
  auto child = Subprocess::Start(argv);
  if (!child.ok()) return child.status();
  std::string line, all;
  while ((*child)->ReadLine(&line, absl::Minutes(3)).ok()) all += line + "\n";
  auto rc = (*child)->Wait(absl::Seconds(60));
  if (!rc.ok()) return rc.status();
  if (*rc != 0) return absl::InternalError(absl::StrCat("ort_run.js exited with ", *rc, ": ", all));
  deploy::Values<float> got;
  for (const std::string& o : outputs) {
    absl::StatusOr<runtime::NpyArray> a =
        runtime::ParseNpy(ReadFileOrEmpty((fs::path(out_dir) / runtime::NpyFileName(o)).string()));
    if (!a.ok()) return absl::InternalError(absl::StrCat("output ", o, ": ", a.status().message()));
    got[o] = a->data;
  }
  return got;
}

double MaxOutputError(const deploy::Values<float>& ours, const deploy::Values<float>& theirs,
                      const std::vector<std::string>& outputs) {
  double worst = 0;
  for (const std::string& o : outputs) {
    auto a = ours.find(o), b = theirs.find(o);
    if (a == ours.end() || b == theirs.end() || a->second.size() != b->second.size()) return INFINITY;
    double err = 0, scale = 0.01;
    for (size_t i = 0; i < a->second.size(); ++i) {
      const double d = std::fabs(double(a->second[i]) - b->second[i]);
      if (!(d <= err)) err = std::isnan(d) ? INFINITY : d;
      scale = std::max(scale, double(std::fabs(b->second[i])));
    }
    worst = std::max(worst, err / scale);
  }
  return worst;
}

}  // namespace tunefarm::testing
