// tunefarm import, export, records, best (cli/client_command.h).
#include "cli/client_command.h"

#include <fstream>
#include <iostream>
#include <map>
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
#include "cli/records_jsonl.h"
#include "compiler/frontend/onnx_import.h"
#include "compiler/frontend/tasks.h"
#include "compiler/ir/target.h"
#include "compiler/ir/workload.h"
#include "proto/protocol.h"

namespace tunefarm::cli {

namespace {

constexpr int kImportBatch = 1000;

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

}  // namespace

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

}  // namespace tunefarm::cli
