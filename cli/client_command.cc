#include "cli/client_command.h"

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "google/protobuf/util/json_util.h"
#include "proto/protocol.h"

namespace tunefarm::cli {

Failure RpcFailure(const Client& c, const grpc::Status& s) {
  RpcError e = DescribeRpcError(s, c.server());
  return {e.code, std::move(e.message)};
}

Failure Usage(const std::string& msg) { return {kExitUsage, msg}; }
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

std::string ShortName(const std::string& enum_name, const std::string& prefix) {
  if (enum_name.rfind(prefix, 0) != 0) return enum_name.empty() ? "unknown" : enum_name;
  return absl::AsciiStrToLower(enum_name.substr(prefix.size()));
}

std::string StateName(v1::JobState s) { return ShortName(v1::JobState_Name(s), "JOB_STATE_"); }
std::string StatusName(v1::MeasureStatus s) {
  return ShortName(v1::MeasureStatus_Name(s), "MEASURE_STATUS_");
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

Result JobIdArg(const Args& a, const std::string& cmd, int64_t* id) {
  if (a.positional().size() != 1 || !ParseInt64(a.positional()[0], id) || *id <= 0) {
    return Usage(absl::StrCat(cmd, " takes one job id"));
  }
  return std::nullopt;
}

Result FetchJob(Client& c, int64_t id, v1::Job* job) {
  v1::GetJobRequest req;
  req.set_protocol_version(kProtocolVersion);
  req.set_job_id(id);
  grpc::Status s = c.stub().GetJob(c.Context().get(), req, job);
  if (!s.ok()) return RpcFailure(c, s);
  return std::nullopt;
}

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

}  // namespace tunefarm::cli
