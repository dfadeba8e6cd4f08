#include "cli/cli.h"

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "cli/command_util.h"
#include "cli/compile_cmd.h"
#include "cli/flags.h"
#include "cli/model_cmd.h"
#include "cli/plot.h"
#include "cli/records_jsonl.h"
#include "cli/tasks_cmd.h"
#include "cli/target_cmd.h"
#include "cli/token_cmd.h"
#include "cli/tune_cmd.h"
#include "compiler/codegen/llvm_target.h"
#include "compiler/frontend/onnx_import.h"
#include "compiler/frontend/tasks.h"
#include "compiler/ir/target.h"
#include "compiler/ir/workload.h"
#include "compiler/ir/workload_spec.h"
#include "google/protobuf/util/json_util.h"
#include "proto/client.h"
#include "proto/protocol.h"
#include "server/search/policy.h"
#include "tunefarm/v1/tuning.grpc.pb.h"

namespace tunefarm::cli {
namespace {

namespace v1 = ::tunefarm::v1;

constexpr int kImportBatch = 1000;

constexpr const char* kUsage =
    R"(usage: tunefarm [--server=HOST:PORT] [--token_file=F] [--tls_ca=F] [--insecure] [--timeout=SEC] COMMAND

commands:
  import FILE.jsonl             import records (JSON lines; '-' reads stdin)
  export [-o FILE] [--workload=KEY] [--target=T] [--job=ID] [--status=S]
  records [--workload=KEY] [--target=T] [--job=ID] [--status=S] [--limit=N] [--before=ID | --after=ID] [--oldest-first] [--json]
  best --target=T (--workload=KEY | --job=ID | --model=MODEL.onnx [--precision=fp16|bf16|tf32] [--layout=nchw|nhwc]) [--top=N] [--json]
  submit (SPEC.json | MODEL.onnx [--shape=NAME=DIMS,...] [--value=NAME=V,...]... [--precision=fp16|bf16|tf32] [--layout=nchw|nhwc] | --workloads=FILE) --target=T --device_key=K [--trials=N]
         [--time_limit=SEC] [--trials_per_task=N] [--early_stop=N] [--strategy=evolutionary|random] [--name=NAME] [--wait-for-device]
         (--target and --device_key required unless the spec has them)
  jobs [--state=S] [--json]     list jobs, newest first
  job ID [--json]               one job: tasks, default vs best time
  watch ID [--json]             follow a job's progress until it ends
  cancel ID
  plot ID -o FILE.svg           the job's tuning curves: the model's time, each task's best GFLOP/s
  resume ID
  devices [--all] [--json]      workers and agents known to the server (--all: with those offline over a day)
  devices drain|resume|remove ID   stop leasing work to a device, lease again, forget an offline one
  target --device=ID [--gpu] [--why]   the target string for an agent's board, from what it reported
  compile --workload SPEC --target T --emit ir|llvm|asm|obj|so   (no server; see compile --help)
  tasks MODEL.onnx [--shape NAME=DIMS] [--json]   the model's tunable workloads (no server)
  tune --workload SPEC [--trials N] [--db FILE]   tune on this machine, no server (see tune --help)
  tune MODEL.onnx [-o MODEL.tfpkg] [--seconds S]   tune a whole model here and build its package
  build MODEL.onnx -o MODEL.tfpkg [--target T] [--db FILE]   whole model, best records (no server)
  run MODEL.tfpkg [--input NAME=F.npy] [--repeat N]   run a built model here (see run --help)
  run MODEL.tfpkg --device-key KEY [--repeat N]   run it on an agent of KEY, timed there
  token --role ROLE [--name N] [--keys K,..] [--devices ID,..]   a new access token (no server)
  version
status S: ok, compile_error, upload_error, runtime_error, wrong_result, timeout, lost, sandbox_violation
state S:  queued, running, waiting_for_device, interrupted, succeeded, failed, cancelled
)";

// The usage lines of one command (kUsage's lines from "  CMD" up to the next command).
std::string CommandUsage(const std::string& cmd) {
  std::string out = "usage: tunefarm [global flags] ";
  bool in = false;
  for (absl::string_view line : absl::StrSplit(kUsage, '\n')) {
    if (absl::StartsWith(line, absl::StrCat("  ", cmd, " ")) || line == absl::StrCat("  ", cmd)) {
      in = true;
      absl::StrAppend(&out, absl::StripLeadingAsciiWhitespace(line), "\n");
    } else if (in && absl::StartsWith(line, "         ")) {
      absl::StrAppend(&out, "  ", absl::StripLeadingAsciiWhitespace(line), "\n");
    } else {
      in = false;
    }
  }
  absl::StrAppend(&out, "flags take --a-b or --a_b; `tunefarm help` lists every command\n");
  return out;
}

struct Failure {
  int code;
  std::string message;
};

using Args = Flags;

class Client {
 public:
  Client(ClientOptions options, absl::Duration timeout)
      : options_(std::move(options)), timeout_(timeout) {}

  absl::Status Connect() {
    absl::StatusOr<std::shared_ptr<grpc::Channel>> ch = MakeChannel(options_);
    if (!ch.ok()) return ch.status();
    stub_ = v1::TuningService::NewStub(*ch);
    return absl::OkStatus();
  }
  v1::TuningService::Stub& stub() { return *stub_; }
  std::unique_ptr<grpc::ClientContext> Context(absl::Duration timeout = absl::ZeroDuration()) {
    return MakeContext(options_, timeout == absl::ZeroDuration() ? timeout_ : timeout);
  }
  const std::string& server() const { return options_.server; }

 private:
  ClientOptions options_;
  absl::Duration timeout_;
  std::unique_ptr<v1::TuningService::Stub> stub_;
};

Failure RpcFailure(const Client& c, const grpc::Status& s) {
  RpcError e = DescribeRpcError(s, c.server());
  return {e.code, std::move(e.message)};
}

Failure Usage(const std::string& msg) { return {kExitUsage, msg}; }

// Throws nothing; commands return std::optional-like Failure via this type.
using Result = std::optional<Failure>;

bool ParseInt64(const std::string& s, int64_t* v) { return absl::SimpleAtoi(s, v); }

Result StatusFromName(const std::string& name, v1::MeasureStatus* out) {
  std::string upper = "MEASURE_STATUS_" + absl::AsciiStrToUpper(name);
  if (!v1::MeasureStatus_Parse(upper, out) || *out == v1::MEASURE_STATUS_UNSPECIFIED) {
    return Usage(absl::StrCat("unknown status '", name, "'"));
  }
  return std::nullopt;
}

Result StateFromName(const std::string& name, v1::JobState* out) {
  std::string upper = "JOB_STATE_" + absl::AsciiStrToUpper(name);
  if (!v1::JobState_Parse(upper, out) || *out == v1::JOB_STATE_UNSPECIFIED) {
    return Usage(absl::StrCat("unknown job state '", name, "'"));
  }
  return std::nullopt;
}

// "JOB_STATE_QUEUED" -> "queued"; a value this client does not know stays visible.
std::string ShortName(const std::string& enum_name, const std::string& prefix) {
  if (enum_name.rfind(prefix, 0) != 0) return enum_name.empty() ? "unknown" : enum_name;
  return absl::AsciiStrToLower(enum_name.substr(prefix.size()));
}

std::string StateName(v1::JobState s) { return ShortName(v1::JobState_Name(s), "JOB_STATE_"); }
std::string StatusName(v1::MeasureStatus s) {
  return ShortName(v1::MeasureStatus_Name(s), "MEASURE_STATUS_");
}

Result BuildFilter(const Args& a, v1::RecordFilter* f) {
  if (a.Has("workload")) f->set_workload_key(a.Get("workload"));
  if (a.Has("target")) {
    absl::StatusOr<ir::Target> t = ir::Target::Parse(a.Get("target"));
    if (!t.ok()) return Usage(std::string(t.status().message()));
    f->mutable_target()->set_spec(t->ToString());
  }
  if (a.Has("job")) {
    int64_t id;
    if (!ParseInt64(a.Get("job"), &id) || id <= 0) return Usage("--job needs a job id");
    f->set_job_id(id);
  }
  if (a.Has("status")) {
    v1::MeasureStatus s;
    if (Result r = StatusFromName(a.Get("status"), &s)) return r;
    f->set_status(s);
  }
  return std::nullopt;
}

double MeanCost(const v1::Record& r) {
  double sum = 0;
  for (double c : r.costs_sec()) sum += c;
  return r.costs_sec_size() ? sum / r.costs_sec_size() : 0;
}

std::string JsonOf(const google::protobuf::Message& m) {
  google::protobuf::util::JsonPrintOptions o;
  o.preserve_proto_field_names = true;
  std::string s;
  (void)google::protobuf::util::MessageToJsonString(m, &s, o);
  return s;
}

void PrintRecordRow(const v1::Record& r, std::ostream& out) {
  double flops = 0;
  if (auto cw = ir::Canonicalize(r.workload()); cw.ok()) flops = cw->flops;
  double mean = MeanCost(r);
  // The error last, one line of at most 100 characters.
  std::string error = Printable(r.error());
  if (error.size() > 100) error = error.substr(0, 97) + "...";
  out << absl::StrFormat("%-8d %-36s %-14s %12s %10s  %s%s\n", r.record_id(), r.workload_key(),
                         StatusName(r.status()),
                         mean > 0 ? absl::StrFormat("%.3f", mean * 1e6) : "-",
                         mean > 0 ? absl::StrFormat("%.2f", flops / mean * 1e-9) : "-",
                         r.target().spec(), error.empty() ? "" : "  " + error);
}

void PrintRecordHeader(std::ostream& out) {
  out << absl::StrFormat("%-8s %-36s %-14s %12s %10s  %s\n", "record", "workload", "status",
                         "mean_us", "gflops", "target  error");
}

// ---- commands ----

Result CmdImport(Client& c, const Args& a, std::ostream& out) {
  if (a.positional().size() != 1) return Usage("import takes one file (or '-')");
  const std::string& path = a.positional()[0];
  // A file is read twice, a line at a time: first checked whole (a bad line
  // stops the import before anything is sent), then sent in batches, so
  // memory stays a batch whatever the file's size. Standard input is held.
  int64_t total = 0;
  std::optional<std::vector<v1::Record>> held;
  if (path == "-") {
    absl::StatusOr<std::vector<v1::Record>> records = ParseRecordsJsonl(std::cin, "<stdin>");
    if (!records.ok()) return Usage(std::string(records.status().message()));
    total = int64_t(records->size());
    held = *std::move(records);
  } else {
    std::ifstream in(path);
    if (!in) return Usage(absl::StrCat("cannot read ", path));
    absl::Status check = ForEachRecordJsonl(in, path, [&](v1::Record) {
      ++total;
      return absl::OkStatus();
    });
    if (!check.ok()) return Usage(std::string(check.message()));
  }
  int64_t imported = 0, duplicates = 0, sent = 0;
  v1::ImportRecordsRequest req;
  req.set_protocol_version(kProtocolVersion);
  auto send = [&]() -> Result {
    if (req.records_size() == 0) return std::nullopt;
    v1::ImportRecordsResponse resp;
    grpc::Status s = c.stub().ImportRecords(c.Context().get(), req, &resp);
    if (!s.ok()) {
      Failure f = RpcFailure(c, s);
      // Importing again is safe: records already stored count as duplicates.
      f.message = absl::StrCat(f.message, " (records ", sent + 1, "-", sent + req.records_size(),
                               " of ", total, " not confirmed; ", imported + duplicates,
                               " before them were imported; importing again is safe)");
      return f;
    }
    imported += resp.imported();
    duplicates += resp.duplicates();
    sent += req.records_size();
    req.clear_records();
    return std::nullopt;
  };
  Result failed;
  auto add = [&](v1::Record r) {
    *req.add_records() = std::move(r);
    if (req.records_size() >= kImportBatch) failed = send();
    return failed ? absl::CancelledError("") : absl::OkStatus();
  };
  if (held) {
    for (v1::Record& r : *held) {
      if (!add(std::move(r)).ok()) break;
    }
  } else {
    std::ifstream in(path);
    if (!in) return Usage(absl::StrCat("cannot read ", path));
    absl::Status again = ForEachRecordJsonl(in, path, add);
    if (!again.ok() && !failed) {
      return Failure{kExitFailed,
                     absl::StrCat(again.message(), " (", path, " changed while it was imported; ",
                                  sent, " records were sent)")};
    }
  }
  if (!failed) failed = send();
  if (failed) return failed;
  out << "imported " << imported << " records (" << duplicates << " already present) from " << path
      << "\n";
  return std::nullopt;
}

Result CmdExport(Client& c, const Args& a, std::ostream& out) {
  if (!a.positional().empty()) return Usage("export takes no positional arguments");
  v1::ExportRecordsRequest req;
  req.set_protocol_version(kProtocolVersion);
  if (Result r = BuildFilter(a, req.mutable_filter())) return r;
  std::ofstream file;
  std::string tmp;
  std::ostream* dest = &out;
  if (a.Has("o")) {
    // Write beside the target and rename at the end: no half-written export.
    tmp = a.Get("o") + ".partial";
    file.open(tmp);
    if (!file) return Usage(absl::StrCat("cannot write ", a.Get("o")));
    dest = &file;
  }
  auto ctx = c.Context(absl::Hours(1));
  auto reader = c.stub().ExportRecords(ctx.get(), req);
  v1::RecordChunk chunk;
  int64_t n = 0;
  while (reader->Read(&chunk)) {
    for (const v1::Record& r : chunk.records()) *dest << RecordToJsonLine(r) << "\n", ++n;
  }
  grpc::Status s = reader->Finish();
  if (!s.ok()) {
    if (!tmp.empty()) std::remove(tmp.c_str());
    return RpcFailure(c, s);
  }
  if (!tmp.empty()) {
    file.close();
    if (!file || std::rename(tmp.c_str(), a.Get("o").c_str()) != 0) {
      return Failure{kExitFailed, absl::StrCat("cannot write ", a.Get("o"))};
    }
    out << "exported " << n << " records to " << a.Get("o") << "\n";
  }
  return std::nullopt;
}

Result CmdRecords(Client& c, const Args& a, std::ostream& out) {
  v1::ListRecordsRequest req;
  req.set_protocol_version(kProtocolVersion);
  if (Result r = BuildFilter(a, req.mutable_filter())) return r;
  if (a.Has("limit")) {
    int64_t n;
    if (!ParseInt64(a.Get("limit"), &n) || n <= 0 || n > 10000)
      return Usage("--limit needs a number from 1 to 10000");
    req.set_limit(static_cast<int32_t>(n));
  }
  for (const char* bound : {"after", "before"}) {
    int64_t id = 0;
    if (a.Has(bound) && (!ParseInt64(a.Get(bound), &id) || id <= 0))
      return Usage(absl::StrCat("--", bound, " needs a record id"));
  }
  int64_t after = 0, before = 0;
  if (a.Has("after")) ParseInt64(a.Get("after"), &after);
  if (a.Has("before")) ParseInt64(a.Get("before"), &before);
  req.set_after_record_id(after);
  req.set_before_record_id(before);
  // Newest first, unless asked otherwise (or paging forward with --after).
  const bool oldest_first = a.Has("oldest_first") || (a.Has("after") && !a.Has("before"));
  req.set_newest_first(!oldest_first);
  v1::ListRecordsResponse resp;
  grpc::Status s = c.stub().ListRecords(c.Context().get(), req, &resp);
  if (!s.ok()) return RpcFailure(c, s);
  if (a.Has("json")) {
    for (const v1::Record& r : resp.records()) out << RecordToJsonLine(r) << "\n";
    return std::nullopt;
  }
  if (resp.records().empty()) {
    // One line naming the filters as given, not a bare header.
    std::vector<std::string> given;
    for (const char* flag : {"workload", "target", "job", "status", "after", "before"}) {
      if (!a.Has(flag)) continue;
      const std::string v = Printable(a.Get(flag));
      const std::string quote = v.find(' ') != std::string::npos ? "'" : "";
      given.push_back(absl::StrCat("--", flag, "=", quote, v, quote));
    }
    out << (given.empty() ? std::string("no records: the database holds none")
                          : absl::StrCat("no records match ", absl::StrJoin(given, " ")))
        << "\n";
    return std::nullopt;
  }
  PrintRecordHeader(out);
  for (const v1::Record& r : resp.records()) PrintRecordRow(r, out);
  if (resp.more() > 0) {
    out << resp.more() << (oldest_first ? " more, newer: --after=" : " more, older: --before=")
        << resp.last_record_id() << "\n";
  }
  return std::nullopt;
}

Result CmdBest(Client& c, const Args& a, std::ostream& out) {
  v1::QueryBestRequest req;
  req.set_protocol_version(kProtocolVersion);
  if (a.Has("workload") + a.Has("job") + a.Has("model") != 1) {
    return Usage("best needs exactly one of --workload=KEY, --job=ID or --model=MODEL.onnx");
  }
  // A model: its tasks are found here (as `tunefarm tasks` does) and each
  // is asked for by its workload key.
  std::vector<std::string> model_keys;
  if (a.Has("precision") && !a.Has("model"))
    return Usage("best --precision goes with --model (a job's or workload's key names its dtype)");
  if (a.Has("layout") && !a.Has("model"))
    return Usage("best --layout goes with --model (a job's or workload's key names its layout)");
  if (a.Has("model")) {
    if (!a.Has("target")) return Usage("best --model needs --target");
    std::vector<std::string> shapes;
    if (a.Has("shape")) shapes = absl::StrSplit(a.Get("shape"), ',');
    absl::StatusOr<frontend::ImportOptions> o = ImportOverrides(shapes, a.All("value"));
    if (!o.ok()) return Usage(std::string(o.status().message()));
    absl::StatusOr<frontend::Model> m = frontend::ImportOnnxFile(a.Get("model"), *o);
    if (!m.ok()) return Usage(std::string(m.status().message()));
    absl::StatusOr<ir::Target> target = ParseTargetFlag(a.Get("target"));
    if (!target.ok()) return Usage(std::string(target.status().message()));
    absl::StatusOr<v1::DType> precision = ParsePrecisionFlag(a.Get("precision"), *target);
    if (!precision.ok()) return Usage(std::string(precision.status().message()));
    absl::StatusOr<std::optional<bool>> layout = ParseLayoutFlag(a.Get("layout"));
    if (!layout.ok()) return Usage(std::string(layout.status().message()));
    absl::StatusOr<frontend::TaskExtraction> ex =
        frontend::ExtractTasks(*m, frontend::ExtractOptionsFor(*target, *layout, *precision));
    if (!ex.ok()) return Usage(std::string(ex.status().message()));
    for (const frontend::ModelTask& t : ex->tasks) model_keys.push_back(t.key);
  }
  if (a.Has("model")) {
    // handled below, one query per task
  } else if (a.Has("workload")) {
    req.mutable_workload()->set_workload_key(a.Get("workload"));
    if (!a.Has("target")) return Usage("best --workload needs --target");
  } else {
    int64_t id;
    if (!ParseInt64(a.Get("job"), &id) || id <= 0) return Usage("--job needs a job id");
    req.set_job_id(id);
  }
  if (a.Has("target")) req.mutable_target()->set_spec(a.Get("target"));
  if (a.Has("top")) {
    int64_t k;
    if (!ParseInt64(a.Get("top"), &k) || k <= 0 || k > 1000)
      return Usage("--top needs 1..1000");
    req.set_top_k(static_cast<int32_t>(k));
  }
  v1::QueryBestResponse resp;
  if (!model_keys.empty()) {
    for (const std::string& key : model_keys) {
      req.mutable_workload()->set_workload_key(key);
      v1::QueryBestResponse one;
      grpc::Status s = c.stub().QueryBest(c.Context().get(), req, &one);
      if (!s.ok()) return RpcFailure(c, s);
      for (const v1::BestEntry& e : one.entries()) *resp.add_entries() = e;
    }
  } else {
    grpc::Status s = c.stub().QueryBest(c.Context().get(), req, &resp);
    if (!s.ok()) return RpcFailure(c, s);
  }
  if (a.Has("json")) {
    out << JsonOf(resp) << "\n";
    return std::nullopt;
  }
  PrintRecordHeader(out);
  for (const v1::BestEntry& e : resp.entries()) {
    if (e.records().empty()) {
      out << absl::StrFormat("%-8s %-36s %-14s\n", "-", e.workload_key(), "no valid record");
    }
    for (const v1::Record& r : e.records()) PrintRecordRow(r, out);
  }
  return std::nullopt;
}

// --workloads FILE: one workload spec per line (`SPEC` or `SPEC xWEIGHT`),
// blank lines and # comments skipped; a bad line names FILE:LINE.
Result ReadWorkloadsFile(const std::string& path, v1::JobSpec* spec) {
  std::ifstream in(path);
  if (!in) return Usage(absl::StrCat("cannot read ", path));
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    std::string text(absl::StripAsciiWhitespace(line.substr(0, line.find('#'))));
    if (text.empty()) continue;
    double weight = 1;
    size_t x = text.rfind(" x");
    if (x != std::string::npos && absl::SimpleAtod(text.substr(x + 2), &weight)) {
      text = std::string(absl::StripAsciiWhitespace(text.substr(0, x)));
      if (!(weight > 0)) return Usage(absl::StrCat(path, ":", n, ": weight must be positive"));
    }
    absl::StatusOr<v1::Workload> w = ir::ParseWorkloadSpec(text);
    if (!w.ok()) return Usage(absl::StrCat(path, ":", n, ": ", w.status().message()));
    v1::TaskSpec* t = spec->add_tasks();
    *t->mutable_workload() = *std::move(w);
    t->set_weight(weight);
  }
  if (spec->tasks().empty()) return Usage(absl::StrCat(path, ": no workloads"));
  return std::nullopt;
}

Result CmdSubmit(Client& c, const Args& a, std::ostream& out) {
  v1::SubmitJobRequest req;
  req.set_protocol_version(kProtocolVersion);
  if (a.Has("workloads")) {
    if (!a.positional().empty())
      return Usage("submit takes a job spec file or --workloads, not both");
    if (a.Has("precision") || a.Has("layout"))
      return Usage(
          "--precision and --layout go with a model (MODEL.onnx); a workload spec says its dtype "
          "and layout");
    if (Result r = ReadWorkloadsFile(a.Get("workloads"), req.mutable_spec())) return r;
  } else if (a.positional().size() == 1 && absl::EndsWith(a.positional()[0], ".onnx")) {
    // A model: the server extracts its tasks (weights = occurrences).
    std::ifstream in(a.positional()[0], std::ios::binary);
    if (!in) return Usage(absl::StrCat("cannot read ", a.positional()[0]));
    std::stringstream ss;
    ss << in.rdbuf();
    req.mutable_spec()->set_onnx_model(ss.str());
    std::string base = a.positional()[0].substr(a.positional()[0].rfind('/') + 1);
    req.mutable_spec()->set_name(base.substr(0, base.size() - 5));
    if (a.Has("shape")) {
      for (absl::string_view one : absl::StrSplit(a.Get("shape"), ',')) {
        auto parsed = frontend::ParseShapeOverride(std::string(one));
        if (!parsed.ok()) return Usage(std::string(parsed.status().message()));
        v1::InputShape* is = req.mutable_spec()->add_input_shapes();
        is->set_name(parsed->first);
        for (int64_t d : parsed->second) is->add_shape(d);
      }
    }
    for (const std::string& one : a.All("value")) {
      auto parsed = frontend::ParseValueOverride(one);
      if (!parsed.ok()) return Usage(std::string(parsed.status().message()));
      v1::InputValue* iv = req.mutable_spec()->add_input_values();
      iv->set_name(parsed->first);
      for (double v : parsed->second) iv->add_values(v);
    }
    // The model imported here first, as `tasks` and `build` do: a dynamic
    // input without --shape, or an operator not supported, is a usage error
    // (exit 2) in every command, not the server's refusal.
    std::vector<std::string> shapes;
    if (a.Has("shape")) shapes = absl::StrSplit(a.Get("shape"), ',');
    absl::StatusOr<frontend::ImportOptions> o = ImportOverrides(shapes, a.All("value"));
    if (!o.ok()) return Usage(std::string(o.status().message()));
    if (absl::StatusOr<frontend::Model> m = frontend::ImportOnnxFile(a.positional()[0], *o);
        !m.ok()) {
      return Usage(std::string(m.status().message()));
    }
    if (a.Has("precision")) {
      absl::StatusOr<ir::Target> t = ParseTargetFlag(a.Get("target"));
      if (!t.ok()) return Usage(std::string(t.status().message()));
      absl::StatusOr<v1::DType> precision = ParsePrecisionFlag(a.Get("precision"), *t);
      if (!precision.ok()) return Usage(std::string(precision.status().message()));
      req.mutable_spec()->set_precision(*precision);
    }
    absl::StatusOr<std::optional<bool>> layout = ParseLayoutFlag(a.Get("layout"));
    if (!layout.ok()) return Usage(std::string(layout.status().message()));
    if (layout->has_value())
      req.mutable_spec()->set_layout(**layout ? v1::DATA_LAYOUT_NHWC : v1::DATA_LAYOUT_NCHW);
  } else {
    if (a.positional().size() != 1) {
      return Usage(
          "submit takes one job spec file (JSON JobSpec), a model (MODEL.onnx) or "
          "--workloads FILE");
    }
    if (a.Has("shape") || a.Has("value") || a.Has("precision") || a.Has("layout"))
      return Usage(
          "--shape, --value, --precision and --layout go with a model (MODEL.onnx; a workload "
          "spec says its dtype and layout itself)");
    std::ifstream in(a.positional()[0]);
    if (!in) return Usage(absl::StrCat("cannot read ", a.positional()[0]));
    std::stringstream ss;
    ss << in.rdbuf();
    const std::string text = ss.str();
    const size_t first = text.find_first_not_of(" \t\r\n");
    if (first == std::string::npos || text[first] != '{') {
      return Usage(absl::StrCat(a.positional()[0],
                                " is not a JSON job spec; a list of workloads goes with "
                                "--workloads=",
                                a.positional()[0]));
    }
    auto st = google::protobuf::util::JsonStringToMessage(text, req.mutable_spec());
    if (!st.ok()) {
      return Usage(absl::StrCat(a.positional()[0], ": not a job spec: ", st.message().as_string()));
    }
  }
  // Budget flags, each a positive number when given.
  v1::Budget* budget = req.mutable_spec()->mutable_budget();
  struct BudgetFlag {
    const char* name;
    const char* unit;
    void (v1::Budget::*set)(int64_t);
  };
  for (const BudgetFlag& f : {BudgetFlag{"time_limit", " of seconds", &v1::Budget::set_max_seconds},
                              BudgetFlag{"trials", "", &v1::Budget::set_max_trials},
                              BudgetFlag{"trials_per_task", "", &v1::Budget::set_max_trials_per_task},
                              BudgetFlag{"early_stop", " of trials", &v1::Budget::set_early_stop_trials}}) {
    if (!a.Has(f.name)) continue;
    int64_t n;
    if (!ParseInt64(a.Get(f.name), &n) || n <= 0)
      return Usage(absl::StrCat("--", f.name, " needs a positive number", f.unit));
    (budget->*f.set)(n);
  }
  if (a.Has("target")) req.mutable_spec()->mutable_target()->set_spec(a.Get("target"));
  if (a.Has("device_key")) req.mutable_spec()->set_device_key(a.Get("device_key"));
  if (a.Has("name")) req.mutable_spec()->set_name(a.Get("name"));
  if (a.Has("strategy")) {
    absl::StatusOr<search::Strategy> st = search::ParseStrategy(a.Get("strategy"));
    if (!st.ok()) return Usage(std::string(st.status().message()));
    req.mutable_spec()->set_strategy(*st == search::Strategy::kRandom
                                         ? v1::SEARCH_STRATEGY_RANDOM
                                         : v1::SEARCH_STRATEGY_EVOLUTIONARY);
  }
  if (req.spec().target().spec().empty())
    return Usage("submit needs --target=T (llvm, host, or cuda -arch=sm_XX): the spec names none");
  if (req.spec().device_key().empty())
    return Usage("submit needs --device_key=K (the key of the agents that measure the job)");
  req.set_wait_for_device(a.Has("wait_for_device"));
  v1::SubmitJobResponse resp;
  grpc::Status s = c.stub().SubmitJob(c.Context().get(), req, &resp);
  if (!s.ok()) return RpcFailure(c, s);
  out << "submitted job " << resp.job_id() << "\n";
  return std::nullopt;
}

void PrintJobLine(const v1::Job& j, std::ostream& out) {
  out << absl::StrFormat("%-6d %-20s %-12s %6d %8d  %s\n", j.job_id(), Printable(j.spec().name()),
                         StateName(j.state()), j.tasks_size(), j.trials_done(),
                         j.spec().target().spec());
}

Result CmdJobs(Client& c, const Args& a, std::ostream& out) {
  v1::ListJobsRequest req;
  req.set_protocol_version(kProtocolVersion);
  if (a.Has("state")) {
    v1::JobState st;
    if (Result r = StateFromName(a.Get("state"), &st)) return r;
    req.set_state(st);
  }
  v1::ListJobsResponse resp;
  grpc::Status s = c.stub().ListJobs(c.Context().get(), req, &resp);
  if (!s.ok()) return RpcFailure(c, s);
  if (a.Has("json")) {
    out << JsonOf(resp) << "\n";
    return std::nullopt;
  }
  out << absl::StrFormat("%-6s %-20s %-12s %6s %8s  %s\n", "job", "name", "state", "tasks",
                         "trials", "target");
  for (const v1::Job& j : resp.jobs()) PrintJobLine(j, out);
  return std::nullopt;
}

Result JobIdArg(const Args& a, const std::string& cmd, int64_t* id) {
  if (a.positional().size() != 1 || !ParseInt64(a.positional()[0], id) || *id <= 0) {
    return Usage(absl::StrCat(cmd, " takes one job id"));
  }
  return std::nullopt;
}

// Each task's share of the model's time: weight x best cost over the sum
// of those of the tasks with a best cost (-1: none yet).
std::vector<double> TaskShares(const v1::Job& j) {
  double total = 0;
  for (const v1::Task& t : j.tasks()) total += t.weight() * t.best_cost_sec();
  std::vector<double> out;
  for (const v1::Task& t : j.tasks())
    out.push_back(t.best_cost_sec() > 0 && total > 0 ? t.weight() * t.best_cost_sec() / total : -1);
  return out;
}

// "#2 41%, #3 25%, #1 8%": the `n` tasks (numbered as `tunefarm job` lists
// them) that take most of the model's time; empty for a one-task job or
// before two tasks have a time.
std::string TopShares(const v1::Job& j, size_t n) {
  std::vector<double> shares = TaskShares(j);
  std::vector<size_t> order;
  for (size_t i = 0; i < shares.size(); ++i) {
    if (shares[i] >= 0) order.push_back(i);
  }
  if (order.size() < 2) return "";
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return shares[a] > shares[b]; });
  order.resize(std::min(order.size(), n));
  const std::vector<int64_t> percent = ApportionShares(shares, 100);  // all tasks' add up to 100
  std::vector<std::string> parts;
  for (size_t i : order) parts.push_back(absl::StrFormat("#%d %d%%", i + 1, percent[i]));
  return absl::StrJoin(parts, ", ");
}

// `default_cost`: per workload key, the default schedule's fastest record
// (mean of its repeats) on the job's target (absent where never measured).
void PrintJob(const v1::Job& j, const std::map<std::string, double>& default_cost,
              std::ostream& out) {
  out << "job " << j.job_id() << " \"" << Printable(j.spec().name())
      << "\": " << StateName(j.state()) << " (" << Printable(j.status_message()) << ")\n";
  out << "target: " << j.spec().target().spec() << "   device key: " << j.spec().device_key()
      << "   trials: " << j.trials_done()
      << (j.failed_trials() > 0 ? absl::StrCat(" (and ", j.failed_trials(), " that did not run)")
                                : "")
      << "\n";
  const v1::Budget& b = j.spec().budget();
  std::string budget;
  if (b.max_trials() > 0) absl::StrAppend(&budget, "   trials ", b.max_trials());
  if (b.max_trials_per_task() > 0)
    absl::StrAppend(&budget, "   per task ", b.max_trials_per_task());
  if (b.max_seconds() > 0) absl::StrAppend(&budget, "   wall time ", b.max_seconds(), " s");
  if (b.early_stop_trials() > 0) {
    absl::StrAppend(&budget, "   early stop after ", b.early_stop_trials(),
                    " trials without a better schedule");
  }
  out << "search: "
      << (j.spec().strategy() == v1::SEARCH_STRATEGY_RANDOM ? "random" : "evolutionary")
      << "   budget:" << (budget.empty() ? "   the server's default trials per task" : budget)
      << "\n";
  out << absl::StrFormat("%-3s %-36s %7s %10s %7s %12s %12s %8s %6s  %s\n", "#", "task", "weight",
                         "mflops", "trials", "default_us", "best_us", "speedup", "share",
                         "workload");
  const std::vector<int64_t> shares = ApportionShares(TaskShares(j), 100);  // adding up to 100
  for (int i = 0; i < j.tasks_size(); ++i) {
    const v1::Task& t = j.tasks(i);
    auto d = default_cost.find(t.workload_key());
    double def = d == default_cost.end() ? 0 : d->second;
    double best = t.best_cost_sec();
    out << absl::StrFormat(
        "%-3d %-36s %7g %10.2f %7d %12s %12s %8s %6s  %s\n", i + 1, t.workload_key(), t.weight(),
        t.flops() * 1e-6, t.trials(), def > 0 ? absl::StrFormat("%.3f", def * 1e6) : "-",
        best > 0 ? absl::StrFormat("%.3f", best * 1e6) : "-",
        def > 0 && best > 0 ? absl::StrFormat("%.2fx", def / best) : "-",
        shares[size_t(i)] >= 0 ? absl::StrFormat("%d%%", shares[size_t(i)]) : "-",
        ir::Describe(t.workload()));
  }
}

Result FetchJob(Client& c, int64_t id, v1::Job* job) {
  v1::GetJobRequest req;
  req.set_protocol_version(kProtocolVersion);
  req.set_job_id(id);
  grpc::Status s = c.stub().GetJob(c.Context().get(), req, job);
  if (!s.ok()) return RpcFailure(c, s);
  return std::nullopt;
}

// Every record `filter` matches, oldest first, a page of 10,000 a call.
Result ForEachRecord(Client& c, const v1::RecordFilter& filter,
                     const std::function<void(const v1::Record&)>& each) {
  v1::ListRecordsRequest lr;
  lr.set_protocol_version(kProtocolVersion);
  *lr.mutable_filter() = filter;
  lr.set_limit(10000);
  while (true) {
    v1::ListRecordsResponse resp;
    grpc::Status s = c.stub().ListRecords(c.Context().get(), lr, &resp);
    if (!s.ok()) return RpcFailure(c, s);
    for (const v1::Record& r : resp.records()) each(r);
    if (resp.last_record_id() == 0 || resp.records().empty()) return std::nullopt;
    lr.set_after_record_id(resp.last_record_id());
  }
}

Result CmdJob(Client& c, const Args& a, std::ostream& out) {
  int64_t id;
  if (Result r = JobIdArg(a, "job", &id)) return r;
  v1::Job job;
  if (Result r = FetchJob(c, id, &job)) return r;
  if (a.Has("json")) {
    out << JsonOf(job) << "\n";
    return std::nullopt;
  }
  // The default schedule's cost per task on the job's target and device
  // key: the fastest of its measurements, by any job, as the best is the
  // fastest of any schedule's (each a mean of repeats), so the speed-up
  // compares like with like and does not rest on one timing.
  std::map<std::string, double> default_cost;
  absl::StatusOr<ir::Target> target = ir::Target::Parse(job.spec().target().spec());
  for (const v1::Task& t : job.tasks()) {
    if (!target.ok()) break;
    v1::RecordFilter filter;
    filter.set_workload_key(t.workload_key());
    filter.mutable_target()->set_spec(target->ToString());
    filter.set_status(v1::MEASURE_STATUS_OK);
    Result r = ForEachRecord(c, filter, [&](const v1::Record& rec) {
      if (!rec.schedule().is_default() || rec.costs_sec().empty() ||
          rec.device_key() != job.spec().device_key()) {
        return;
      }
      const double mean = MeanCost(rec);
      auto [it, fresh] = default_cost.emplace(t.workload_key(), mean);
      if (!fresh) it->second = std::min(it->second, mean);
    });
    if (r) return r;
  }
  PrintJob(job, default_cost, out);
  return std::nullopt;
}

// cancel / resume: one job id in, the job's new state out.
template <typename Request>
Result JobAction(Client& c, const Args& a, std::ostream& out, const std::string& cmd,
                 grpc::Status (v1::TuningService::Stub::*rpc)(grpc::ClientContext*, const Request&,
                                                              v1::Job*)) {
  int64_t id;
  if (Result r = JobIdArg(a, cmd, &id)) return r;
  Request req;
  req.set_protocol_version(kProtocolVersion);
  req.set_job_id(id);
  v1::Job job;
  grpc::Status s = (c.stub().*rpc)(c.Context().get(), req, &job);
  if (!s.ok()) return RpcFailure(c, s);
  out << "job " << id << " " << StateName(job.state()) << "\n";
  return std::nullopt;
}

Result CmdCancel(Client& c, const Args& a, std::ostream& out) {
  return JobAction<v1::CancelJobRequest>(c, a, out, "cancel", &v1::TuningService::Stub::CancelJob);
}

Result CmdResume(Client& c, const Args& a, std::ostream& out) {
  return JobAction<v1::ResumeJobRequest>(c, a, out, "resume", &v1::TuningService::Stub::ResumeJob);
}

// "1m05s", "42s".
std::string ShortDuration(double s) {
  if (s < 60) return absl::StrFormat("%.0fs", s);
  if (s < 3600) return absl::StrFormat("%dm%02ds", int(s) / 60, int(s) % 60);
  return absl::StrFormat("%dh%02dm", int(s) / 3600, int(s) % 3600 / 60);
}

Result CmdWatch(Client& c, const Args& a, std::ostream& out) {
  int64_t id;
  if (Result r = JobIdArg(a, "watch", &id)) return r;
  const bool json = a.Has("json") > 0;
  v1::Job job;
  if (Result r = FetchJob(c, id, &job)) return r;
  const int64_t total = job.spec().budget().max_trials();
  // A progress bar redrawn in place on a terminal; one line per change when piped.
  const bool terminal = &out == &std::cout && isatty(STDOUT_FILENO);
  v1::WatchJobRequest req;
  req.set_protocol_version(kProtocolVersion);
  req.set_job_id(id);
  auto ctx = c.Context(absl::Hours(24 * 30));
  auto reader = c.stub().WatchJob(ctx.get(), req);
  v1::JobEvent ev;
  absl::Time first_time = absl::Now();
  int64_t first_trials = -1;
  v1::JobState last = v1::JOB_STATE_UNSPECIFIED;
  auto clock = [](const v1::JobEvent& e) {
    return absl::FormatTime("%H:%M:%S", absl::FromUnixMillis(e.timestamp_unix_ms()),
                            absl::LocalTimeZone());
  };
  while (reader->Read(&ev)) {
    last = ev.state();
    if (ev.task_id() != 0) {
      // A task's new best: a line of its own when piped (the bar shows the model's).
      if (json) {
        out << JsonOf(ev) << std::endl;
      } else if (!terminal) {
        // Numbered as `tunefarm job` lists the tasks (a server that does not
        // send the number: the database's task id).
        out << clock(ev) << " job " << ev.job_id() << " task "
            << (ev.task_number() > 0 ? absl::StrCat("#", ev.task_number())
                                     : absl::StrCat("id ", ev.task_id()))
            << " best "
            << absl::StrFormat("%.3f us", ev.best_cost_sec() * 1e6) << std::endl;
      }
      continue;
    }
    if (first_trials < 0) first_trials = ev.trials_done(), first_time = absl::Now();
    std::string progress = absl::StrCat("trials ", ev.trials_done());
    // Where the model's time is, by the tasks' best costs so far.
    if (!json && job.tasks_size() > 1 && ev.trials_done() > 0) {
      v1::Job latest;
      if (!FetchJob(c, id, &latest)) {
        const std::string top = TopShares(latest, 3);
        if (!top.empty()) absl::StrAppend(&progress, "  time: ", top);
      }
    }
    std::string eta;
    if (total > 0) absl::StrAppend(&progress, "/", total);
    if (ev.tasks_with_best() > 0) {
      absl::StrAppend(&progress, absl::StrFormat("  model %.3f ms", ev.model_best_sec() * 1e3));
      if (ev.tasks_with_best() < ev.tasks())
        absl::StrAppend(&progress, " (", ev.tasks_with_best(), "/", ev.tasks(), " tasks)");
    }
    if (ev.trials_per_minute() > 0)
      absl::StrAppend(&progress, absl::StrFormat("  %.1f trials/min", ev.trials_per_minute()));
    if (ev.eta_sec() > 0) {
      eta = absl::StrCat("  about ", ShortDuration(ev.eta_sec()), " left");
    } else if (total > 0) {
      double rate = double(ev.trials_done() - first_trials) /
                    std::max(1e-3, absl::ToDoubleSeconds(absl::Now() - first_time));
      if (rate > 0 && ev.trials_done() < total && ev.state() == v1::JOB_STATE_RUNNING)
        eta = absl::StrCat("  about ", ShortDuration((total - ev.trials_done()) / rate), " left");
    }
    if (json) {
      out << JsonOf(ev) << std::endl;  // one event per line, as it arrives
    } else if (terminal) {
      constexpr int kWidth = 30;
      int filled = total > 0 ? int(kWidth * std::min<int64_t>(ev.trials_done(), total) / total) : 0;
      out << "\r[" << std::string(filled, '#') << std::string(kWidth - filled, '.') << "] "
          << progress << "  " << StateName(ev.state()) << eta
          << (ev.message().empty() ? "" : "  " + ev.message()) << "\x1b[K" << std::flush;
    } else {
      out << clock(ev) << " job " << ev.job_id() << " " << StateName(ev.state()) << " " << progress
          << eta << " " << ev.message() << std::endl;
    }
  }
  if (terminal && !json) out << "\n";
  grpc::Status s = reader->Finish();
  if (!s.ok()) return RpcFailure(c, s);
  if (last == v1::JOB_STATE_SUCCEEDED && !json) {
    out << "\n";
    return CmdJob(c, a, out);  // default vs best per task
  }
  return std::nullopt;
}

// plot JOB -o FILE.svg: the job's tuning curves (cli/plot.h) from all its records.
Result CmdPlot(Client& c, const Args& a, std::ostream& out) {
  int64_t id;
  if (Result r = JobIdArg(a, "plot", &id)) return r;
  if (!a.Has("o")) return Usage("plot needs -o FILE.svg");
  v1::Job job;
  if (Result r = FetchJob(c, id, &job)) return r;
  std::vector<v1::Record> records;
  v1::RecordFilter filter;
  filter.set_job_id(id);
  if (Result r = ForEachRecord(c, filter, [&](const v1::Record& rec) { records.push_back(rec); }))
    return r;
  const std::string path = a.Get("o"), tmp = path + ".tmp";
  {
    std::ofstream f(tmp);
    f << TuningCurvesSvg(job, records);
    if (!f) return Failure{kExitFailed, absl::StrCat("cannot write ", tmp)};
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return Failure{kExitFailed, absl::StrCat("cannot write ", path)};
  }
  out << "wrote " << path << ": " << records.size() << " trials of " << job.tasks_size()
      << " tasks\n";
  return std::nullopt;
}

// target --device ID [--gpu] [--why]: the target string for a registered
// agent's board (cli/target_cmd.h).
Result CmdTarget(Client& c, const Args& a, std::ostream& out) {
  const std::string id = a.Get("device");
  if (id.empty() || !a.positional().empty()) return Usage("target takes --device=ID");
  v1::ListDevicesRequest req;
  req.set_protocol_version(kProtocolVersion);
  v1::ListDevicesResponse resp;
  grpc::Status s = c.stub().ListDevices(c.Context().get(), req, &resp);
  if (!s.ok()) return RpcFailure(c, s);
  std::vector<std::string> agents;
  for (const v1::Device& d : resp.devices()) {
    if (d.role() != v1::ROLE_AGENT) continue;
    agents.push_back(d.device_id());
    if (d.device_id() != id) continue;
    absl::StatusOr<SuggestedTarget> t = SuggestTarget(d.capabilities(), a.Has("gpu"));
    if (!t.ok()) {
      return Failure{kExitFailed, absl::StrCat("no target for ", Printable(id), ": ",
                                               t.status().message())};
    }
    out << t->spec << "\n";
    if (a.Has("why")) out << Printable(id) << ": " << Printable(t->why) << "\n";
    return std::nullopt;
  }
  return Failure{kExitFailed,
                 absl::StrCat("no agent ", Printable(id), " is registered",
                              agents.empty() ? std::string(" (none is)")
                                             : absl::StrCat(" (agents: ",
                                                            Printable(absl::StrJoin(agents, ", ")),
                                                            ")"))};
}

Result CmdDevices(Client& c, const Args& a, std::ostream& out) {
  if (!a.positional().empty()) {
    // devices drain|resume|remove ID
    static const std::map<std::string, v1::UpdateDeviceRequest::Action> kActions = {
        {"drain", v1::UpdateDeviceRequest::ACTION_DRAIN},
        {"resume", v1::UpdateDeviceRequest::ACTION_RESUME},
        {"remove", v1::UpdateDeviceRequest::ACTION_REMOVE}};
    auto action = kActions.find(a.positional()[0]);
    if (action == kActions.end() || a.positional().size() != 2) {
      return Usage("devices takes no argument, or drain|resume|remove DEVICE_ID");
    }
    v1::UpdateDeviceRequest up;
    up.set_protocol_version(kProtocolVersion);
    up.set_device_id(a.positional()[1]);
    up.set_action(action->second);
    v1::Device d;
    grpc::Status s = c.stub().UpdateDevice(c.Context().get(), up, &d);
    if (!s.ok()) return RpcFailure(c, s);
    const std::string id = Printable(d.device_id());
    if (action->second == v1::UpdateDeviceRequest::ACTION_REMOVE) {
      out << "removed " << id << "\n";
    } else if (d.drained()) {
      out << "drained " << id << ": it gets no new work; what it holds it finishes\n";
    } else {
      out << "resumed " << id << ": it takes work again\n";
    }
    return std::nullopt;
  }
  v1::ListDevicesRequest req;
  req.set_protocol_version(kProtocolVersion);
  v1::ListDevicesResponse resp;
  grpc::Status s = c.stub().ListDevices(c.Context().get(), req, &resp);
  if (!s.ok()) return RpcFailure(c, s);
  if (a.Has("json")) {
    out << JsonOf(resp) << "\n";
    return std::nullopt;
  }
  out << absl::StrFormat("%-28s %-7s %-18s %-8s %5s  %s\n", "device", "role", "key", "state",
                         "cores", "details");
  // Devices offline for over a day are left out unless --all.
  const int64_t day_ago = absl::ToUnixMillis(absl::Now() - absl::Hours(24));
  int hidden = 0;
  for (const v1::Device& d : resp.devices()) {
    if (!a.Has("all") && d.state() != v1::DEVICE_STATE_ONLINE && d.last_seen_unix_ms() < day_ago) {
      ++hidden;
      continue;
    }
    const v1::Capabilities& cap = d.capabilities();
    std::string details;
    if (d.role() == v1::ROLE_WORKER) {
      details = absl::StrCat("builds ", absl::StrJoin(cap.build_triples(), ","));
      if (cap.cuda_archs_size()) {
        absl::StrAppend(&details, " cuda ", cap.cuda_archs(0), "..",
                        cap.cuda_archs(cap.cuda_archs_size() - 1));
      }
      if (cap.cuda_ptx_archs_size()) {
        absl::StrAppend(&details, " (PTX through LLVM: ", cap.cuda_ptx_archs(0), "..",
                        cap.cuda_ptx_archs(cap.cuda_ptx_archs_size() - 1), ")");
      }
    } else {
      // What it runs: its triple, CPU (the features codegen uses) and GPU.
      details = absl::StrCat(cap.triple(), ", ", cap.cpu_model());
      if (cap.features_size())
        absl::StrAppend(&details, " [", absl::StrJoin(cap.features(), " "), "]");
      absl::StrAppend(&details, ", ", cap.has_gpu() ? cap.gpu_name() : std::string("no GPU"));
      if (cap.cuda_archs_size())
        absl::StrAppend(&details, " ", absl::StrJoin(cap.cuda_archs(), ","));
      if (cap.gpu_shared_memory_per_block() > 0)
        absl::StrAppend(&details, " (", cap.gpu_shared_memory_per_block(), " B shared per block)");
    }
    if (TimingsDisputed(d)) {
      details = absl::StrCat("TIMINGS DISPUTED by its peers (", d.timings_disputed(), " of ",
                             d.timings_disputed() + d.timings_confirmed(),
                             " new bests checked); ", details);
    } else if (d.timings_confirmed() + d.timings_disputed() > 0) {
      absl::StrAppend(&details, "; new bests checked: ", d.timings_confirmed(), " confirmed, ",
                      d.timings_disputed(), " disputed");
    }
    std::string state = ShortName(v1::DeviceState_Name(d.state()), "DEVICE_STATE_");
    if (d.drained()) {
      if (d.state() == v1::DEVICE_STATE_ONLINE) {
        state = "drained";
      } else {
        details = "drained; " + details;
      }
    }
    out << absl::StrFormat("%-28s %-7s %-18s %-8s %5d  %s\n", Printable(d.device_id()),
                           ShortName(v1::Role_Name(d.role()), "ROLE_"), Printable(d.device_key()),
                           state, cap.cores(), Printable(details));
  }
  if (hidden > 0) out << hidden << " offline for over a day not shown (--all shows them)\n";
  return std::nullopt;
}

}  // namespace

int RunCli(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  // Global flags come before the command.
  size_t i = 0;
  std::vector<std::string> global;
  while (i < args.size() && args[i].rfind("--", 0) == 0) {
    global.push_back(args[i]);
    if (args[i].find('=') == std::string::npos && args[i] != "--help" && args[i] != "--insecure" &&
        i + 1 < args.size()) {
      global.push_back(args[++i]);
    }
    ++i;
  }
  absl::StatusOr<Flags> g = ParseFlags(
      global, FlagSpec{{"server", "tls_ca", "token_file", "timeout"}, {"insecure"}}, "tunefarm");
  if (!g.ok()) {
    err << "tunefarm: error: " << g.status().message() << "\n";
    return kExitUsage;
  }
  if (!g->positional().empty()) {
    err << "tunefarm: error: unexpected argument '" << g->positional()[0] << "'\n";
    return kExitUsage;
  }
  // `tunefarm help CMD` is `tunefarm CMD --help`.
  if (i + 1 < args.size() && args[i] == "help") return RunCli({args[i + 1], "--help"}, out, err);
  if (g->help() || i >= args.size() || args[i] == "help") {
    (i >= args.size() && !g->help() ? err : out) << kUsage;
    return i >= args.size() && !g->help() ? kExitUsage : kExitOk;
  }
  const std::string cmd = args[i];
  if (cmd == "compile") {
    return RunCompile(std::vector<std::string>(args.begin() + i + 1, args.end()), out, err);
  }
  if (cmd == "tasks") {
    return RunTasks(std::vector<std::string>(args.begin() + i + 1, args.end()), out, err);
  }
  if (cmd == "build") {
    return RunBuild(std::vector<std::string>(args.begin() + i + 1, args.end()), out, err);
  }
  const std::vector<std::string> rest(args.begin() + i + 1, args.end());
  if (cmd == "run" && !RunsOnAgent(rest)) return RunModel(rest, out, err);
  if (cmd == "tune") {
    return RunTune(std::vector<std::string>(args.begin() + i + 1, args.end()), out, err);
  }
  if (cmd == "token") return RunToken(rest, out, err);
  if (cmd == "version") {
    out << "tunefarm " << TUNEFARM_VERSION << " (protocol " << kProtocolVersion << ")\n";
    // What --target=host means here: tune, build, tasks and the demo use it.
    out << "host target: " << codegen::HostTarget().ToString() << "\n";
    return kExitOk;
  }
  ClientOptions opts;
  int64_t timeout_s = 30;
  // The environment gives what a flag does not: set them once per shell.
  std::map<std::string, std::vector<std::string>> given = g->given();
  for (const auto& [flag, var] : {std::pair<std::string, const char*>{"server", "TUNEFARM_SERVER"},
                                  {"tls_ca", "TUNEFARM_TLS_CA"},
                                  {"token_file", "TUNEFARM_TOKEN_FILE"}}) {
    const char* v = std::getenv(var);
    if (v != nullptr && *v != '\0' && !given.count(flag)) given[flag] = {v};
  }
  for (const auto& [k, values] : given) {
    const std::string& v = values.back();
    if (k == "help" || k == "insecure") {
      continue;
    } else if (k == "server") {
      opts.server = WithDefaultPort(v);
    } else if (k == "tls_ca") {
      opts.tls_ca_file = v;
    } else if (k == "token_file") {
      absl::StatusOr<std::string> t = ReadTokenFile(v);
      if (!t.ok()) {
        err << "tunefarm: error: " << t.status().message() << "\n";
        return kExitUsage;
      }
      opts.token = *t;
    } else if (k == "timeout") {
      if (!absl::SimpleAtoi(v, &timeout_s) || timeout_s <= 0) {
        err << "tunefarm: error: --timeout needs a positive number of seconds\n";
        return kExitUsage;
      }
    } else {
      err << "tunefarm: error: unknown global flag --" << k << "\n";
      return kExitUsage;
    }
  }
  // A token in plain text beyond loopback would cross the network readable.
  if (!opts.token.empty()) {
    if (absl::Status t = CheckTransport(opts, g->Has("insecure")); !t.ok()) {
      err << "tunefarm: error: " << t.message() << "\n";
      return kExitUsage;
    }
  }
  if (cmd == "run") return RunModelOnAgent(opts, absl::Seconds(timeout_s), rest, out, err);
  using Command = Result (*)(Client&, const Args&, std::ostream&);
  struct Entry {
    Command run;
    FlagSpec flags;
  };
  static const std::map<std::string, Entry> kCommands = {
      {"import", {CmdImport, {}}},
      {"export", {CmdExport, {{"o", "workload", "target", "job", "status"}, {}}}},
      {"records",
       {CmdRecords,
        {{"workload", "target", "job", "status", "limit", "after", "before"},
         {"json", "oldest_first"}}}},
      {"best",
       {CmdBest,
        {{"workload", "job", "model", "shape", "value", "target", "top", "precision", "layout"},
         {"json"}}}},
      {"submit",
       {CmdSubmit,
        {{"target", "device_key", "trials", "name", "workloads", "time_limit", "shape", "value",
          "trials_per_task", "early_stop", "strategy", "precision", "layout"},
         {"wait_for_device"}}}},
      {"jobs", {CmdJobs, {{"state"}, {"json"}}}},
      {"job", {CmdJob, {{}, {"json"}}}},
      {"watch", {CmdWatch, {{}, {"json"}}}},
      {"cancel", {CmdCancel, {}}},
      {"resume", {CmdResume, {}}},
      {"devices", {CmdDevices, {{}, {"json", "all"}}}},
      {"plot", {CmdPlot, {{"o"}, {}}}},
      {"target", {CmdTarget, {{"device"}, {"gpu", "why"}}}}};
  auto it = kCommands.find(cmd);
  if (it == kCommands.end()) {
    err << "tunefarm: error: unknown command '" << cmd << "' (tunefarm help lists them)\n";
    return kExitUsage;
  }
  absl::StatusOr<Flags> a = ParseFlags(rest, it->second.flags, cmd);
  if (!a.ok()) {
    err << "tunefarm: error: " << a.status().message() << "\n";
    return kExitUsage;
  }
  if (a->help()) {
    out << CommandUsage(cmd);
    return kExitOk;
  }
  Client client(opts, absl::Seconds(timeout_s));
  if (absl::Status s = client.Connect(); !s.ok()) {
    err << "tunefarm: error: " << s.message() << "\n";
    return kExitUsage;
  }
  Result r = it->second.run(client, *a, out);
  if (r) {
    // One line, whatever the message holds.
    std::replace(r->message.begin(), r->message.end(), '\n', ' ');
    err << "tunefarm: error: " << r->message << "\n";
    return r->code;
  }
  return kExitOk;
}

}  // namespace tunefarm::cli
