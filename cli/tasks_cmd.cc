#include "cli/tasks_cmd.h"

#include <map>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "cli/command_util.h"
#include "cli/flags.h"
#include "compiler/frontend/onnx_import.h"
#include "compiler/frontend/tasks.h"
#include "compiler/ir/workload_spec.h"
#include "google/protobuf/util/json_util.h"

namespace tunefarm::cli {
namespace {

constexpr const char* kHelp =
    R"(usage: tunefarm tasks MODEL.onnx [--target T|host] [--shape NAME=D1xD2x...]...
                      [--value NAME=V,...]... [--layout nchw|nhwc] [--precision fp32|fp16|bf16|tf32]
                      [--json|--specs]

Imports an ONNX model and prints its tunable workloads (convolutions,
dense and matmul layers, with the bias, BatchNormalization, activation and
residual add that fuse into them), each once, with its weight (how often it
occurs), its FLOPs and its share of the tasks' FLOPs (weight x FLOPs; the
shares add up to 100%). These are the tasks a tuning job for the model
gets. Each workload is printed as the spec `tunefarm tune --workload` and
`compile --workload` take.

  --shape   a shape for an input with dynamic dimensions (repeat per input;
            NAME may be left out when the model has one input)
  --value   fixes an input to constant values, NAME=V1,V2,... (as build)
  --layout  nhwc or nchw: the tasks of a build in that layout (default:
            the target's, nhwc on CPU targets; `tunefarm build --layout`)
  --precision  fp16, bf16 or tf32 (cuda targets): the tasks of a build
            with that --precision (default fp32)
  --json    {"model": ..., "opset": N, "model_flops": F, "task_flops": F,
            "tasks": [{..., "share": S}, ...]} (S: the exact share, 0..1)
  --specs   one line per task, "SPEC xWEIGHT": the task list `tunefarm submit`
            reads (a task the spec syntax cannot say is a "#" line)
)";

std::string Json(const google::protobuf::Message& m) {
  std::string s;
  google::protobuf::util::JsonPrintOptions o;
  o.preserve_proto_field_names = true;
  (void)google::protobuf::util::MessageToJsonString(m, &s, o);
  return s;
}

}  // namespace

int RunTasks(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  std::string model_path, target = "host";
  bool json = false, specs = false;
  frontend::ImportOptions opts;
  absl::StatusOr<Flags> parsed = ParseFlags(
      args, FlagSpec{{"target", "shape", "value", "layout", "precision"}, {"json", "specs"}},
      "tasks");
  if (!parsed.ok()) return Fail(err, 2, std::string(parsed.status().message()));
  if (parsed->help()) {
    out << kHelp;
    return 0;
  }
  if (parsed->positional().size() > 1) return Fail(err, 2, "tasks takes one model file");
  if (!parsed->positional().empty()) model_path = parsed->positional()[0];
  json = parsed->Has("json");
  specs = parsed->Has("specs");
  if (json && specs) return Fail(err, 2, "tasks: give --json or --specs, not both");
  target = parsed->Get("target", target);
  absl::StatusOr<frontend::ImportOptions> shapes =
      ImportOverrides(parsed->All("shape"), parsed->All("value"));
  if (!shapes.ok()) return Fail(err, 2, std::string(shapes.status().message()));
  opts = *std::move(shapes);
  if (model_path.empty()) return Fail(err, 2, "tasks needs a model file (MODEL.onnx)");
  absl::StatusOr<ir::Target> t = ParseTargetFlag(target);
  if (!t.ok()) return Fail(err, 2, std::string(t.status().message()));
  absl::StatusOr<frontend::Model> model = frontend::ImportOnnxFile(model_path, opts);
  if (!model.ok()) return Fail(err, 2, std::string(model.status().message()));
  absl::StatusOr<std::optional<bool>> channels_last = ParseLayoutFlag(parsed->Get("layout", ""));
  if (!channels_last.ok()) return Fail(err, 2, std::string(channels_last.status().message()));
  absl::StatusOr<v1::DType> precision = ParsePrecisionFlag(parsed->Get("precision", ""), *t);
  if (!precision.ok()) return Fail(err, 2, std::string(precision.status().message()));
  absl::StatusOr<frontend::TaskExtraction> ex =
      frontend::ExtractTasks(*model, frontend::ExtractOptionsFor(*t, *channels_last, *precision));
  if (!ex.ok()) return Fail(err, 2, std::string(ex.status().message()));
  // Each task's share of the tasks' FLOPs (weight x FLOPs), in tenths of a
  // percent that add up to 100%. Not of the model's: a task counts its fused
  // epilogue as its kernel computes it, not as the nodes it replaces.
  std::vector<double> weighted;
  for (const frontend::ModelTask& task : ex->tasks) weighted.push_back(task.flops * task.weight);
  const double task_total = std::max(ex->task_flops, 1.0);
  const std::vector<int64_t> permille = ApportionShares(weighted, 1000);
  std::vector<absl::StatusOr<std::string>> spec_of;
  for (const frontend::ModelTask& task : ex->tasks)
    spec_of.push_back(ir::FormatWorkloadSpec(task.workload));
  if (specs) {
    for (size_t i = 0; i < ex->tasks.size(); ++i) {
      const frontend::ModelTask& task = ex->tasks[i];
      if (spec_of[i].ok()) {
        out << *spec_of[i] << " x" << task.weight << "\n";
      } else {
        out << "# " << task.key << " (" << task.description
            << "): " << spec_of[i].status().message() << "\n";
      }
    }
    return 0;
  }
  if (json) {
    out << "{\"model\": " << JsonQuote(model_path) << ", \"opset\": " << model->opset
        << ", \"ir_version\": " << model->ir_version
        << ", \"target\": " << JsonQuote(t->ToString())
        << ", \"model_flops\": " << absl::StrFormat("%.0f", ex->model_flops)
        << ", \"task_flops\": " << absl::StrFormat("%.0f", ex->task_flops) << ", \"tasks\": [";
    for (size_t i = 0; i < ex->tasks.size(); ++i) {
      const frontend::ModelTask& task = ex->tasks[i];
      out << (i ? ",\n  " : "\n  ") << "{\"key\": " << JsonQuote(task.key)
          << ", \"weight\": " << task.weight
          << ", \"flops\": " << absl::StrFormat("%.0f", task.flops)
          << ", \"share\": " << absl::StrFormat("%.4f", weighted[i] / task_total)
          << ", \"description\": " << JsonQuote(task.description) << ", \"spec\": "
          << (spec_of[i].ok() ? JsonQuote(*spec_of[i]) : "null")
          << ", \"workload\": " << Json(task.workload) << ", \"nodes\": [";
      for (size_t k = 0; k < task.nodes.size(); ++k)
        out << (k ? ", " : "") << JsonQuote(task.nodes[k]);
      out << "]}";
    }
    out << "\n]}\n";
    return 0;
  }
  out << absl::StrFormat(
      "%s: IR %d, opset %d, %d nodes, %.3f GFLOP; %d tasks, %.3f GFLOP as their kernels "
      "compute them (share: of these)\n",
      model_path, model->ir_version, model->opset, model->nodes.size(), ex->model_flops * 1e-9,
      ex->tasks.size(), ex->task_flops * 1e-9);
  out << absl::StrFormat("%3s %6s %10s %7s  %-30s %s\n", "#", "weight", "MFLOP", "share", "key",
                         "workload");
  for (size_t i = 0; i < ex->tasks.size(); ++i) {
    const frontend::ModelTask& task = ex->tasks[i];
    out << absl::StrFormat("%3d %6d %10.2f %4d.%d%%  %-30s %s\n", i + 1, task.weight,
                           task.flops * 1e-6, permille[i] / 10, permille[i] % 10, task.key,
                           spec_of[i].ok() ? *spec_of[i]
                                           : absl::StrCat(task.description, " (no spec: ",
                                                          spec_of[i].status().message(), ")"));
  }
  return 0;
}

}  // namespace tunefarm::cli
