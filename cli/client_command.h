// What the commands that talk to a server share: the connection (Client),
// how a command fails (Failure, one message and an exit code), enum names,
// JSON, and the fetches more than one command makes. A command is
// `Result CmdX(Client&, const Args&, std::ostream& out)`: records_cmd.cc
// (import, export, records, best), job_cmd.cc (submit, jobs, job, cancel,
// resume, watch, plot), devices_cmd.cc (devices, target); cli.cc parses the
// global flags and dispatches.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <ostream>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "cli/command_util.h"
#include "cli/flags.h"
#include "google/protobuf/message.h"
#include "proto/client.h"
#include "tunefarm/v1/tuning.grpc.pb.h"

namespace tunefarm::cli {

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

// A failed call as the command's failure: unreachable (exit 3) or refused (1).
Failure RpcFailure(const Client& c, const grpc::Status& s);
// Bad usage (exit 2).
Failure Usage(const std::string& msg);

// Empty when the command succeeded.
using Result = std::optional<Failure>;

bool ParseInt64(const std::string& s, int64_t* v);
// --status and --state values ("ok", "running"): an unknown one is a usage error.
Result StatusFromName(const std::string& name, v1::MeasureStatus* out);
Result StateFromName(const std::string& name, v1::JobState* out);
// "JOB_STATE_QUEUED" -> "queued"; a value this client does not know stays visible.
std::string ShortName(const std::string& enum_name, const std::string& prefix);
std::string StateName(v1::JobState s);
std::string StatusName(v1::MeasureStatus s);

// A record's mean time over its repeats, in seconds (0: none).
double MeanCost(const v1::Record& r);
// A message as one line of JSON, proto field names.
std::string JsonOf(const google::protobuf::Message& m);

// The one job id of `cmd`'s arguments.
Result JobIdArg(const Args& a, const std::string& cmd, int64_t* id);
Result FetchJob(Client& c, int64_t id, v1::Job* job);
// Every record `filter` matches, oldest first, a page of 10,000 a call.
Result ForEachRecord(Client& c, const v1::RecordFilter& filter,
                     const std::function<void(const v1::Record&)>& each);

// The commands (tunefarm help lists them).
Result CmdImport(Client& c, const Args& a, std::ostream& out);
Result CmdExport(Client& c, const Args& a, std::ostream& out);
Result CmdRecords(Client& c, const Args& a, std::ostream& out);
Result CmdBest(Client& c, const Args& a, std::ostream& out);
Result CmdSubmit(Client& c, const Args& a, std::ostream& out);
Result CmdJobs(Client& c, const Args& a, std::ostream& out);
Result CmdJob(Client& c, const Args& a, std::ostream& out);
Result CmdCancel(Client& c, const Args& a, std::ostream& out);
Result CmdResume(Client& c, const Args& a, std::ostream& out);
Result CmdWatch(Client& c, const Args& a, std::ostream& out);
Result CmdPlot(Client& c, const Args& a, std::ostream& out);
Result CmdDevices(Client& c, const Args& a, std::ostream& out);
Result CmdTarget(Client& c, const Args& a, std::ostream& out);

}  // namespace tunefarm::cli
