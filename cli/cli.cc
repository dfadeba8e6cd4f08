#include "cli/cli.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <map>
#include <optional>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "cli/client_command.h"
#include "cli/command_util.h"
#include "cli/compile_cmd.h"
#include "cli/flags.h"
#include "cli/model_cmd.h"
#include "cli/tasks_cmd.h"
#include "cli/token_cmd.h"
#include "cli/tune_cmd.h"
#include "compiler/codegen/llvm_target.h"
#include "compiler/ir/target.h"
#include "proto/client.h"
#include "proto/protocol.h"
#include "tunefarm/v1/tuning.grpc.pb.h"

namespace tunefarm::cli {
namespace {

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

// The global flags at the head of `args` (each with its value, when given
// apart), into `global`. Returns the index of the command (args.size(): none).
size_t SplitGlobalFlags(const std::vector<std::string>& args, std::vector<std::string>* global) {
  size_t i = 0;
  while (i < args.size() && args[i].rfind("--", 0) == 0) {
    global->push_back(args[i]);
    if (args[i].find('=') == std::string::npos && args[i] != "--help" && args[i] != "--insecure" &&
        i + 1 < args.size()) {
      global->push_back(args[++i]);
    }
    ++i;
  }
  return i;
}

// The commands that need no server (and `run` without --device-key): runs
// `cmd` when it is one and returns its exit code; nullopt for the others.
std::optional<int> RunLocalCommand(const std::string& cmd, const std::vector<std::string>& rest,
                                   std::ostream& out, std::ostream& err) {
  if (cmd == "compile") return RunCompile(rest, out, err);
  if (cmd == "tasks") return RunTasks(rest, out, err);
  if (cmd == "build") return RunBuild(rest, out, err);
  if (cmd == "run" && !RunsOnAgent(rest)) return RunModel(rest, out, err);
  if (cmd == "tune") return RunTune(rest, out, err);
  if (cmd == "token") return RunToken(rest, out, err);
  if (cmd == "version") {
    out << "tunefarm " << TUNEFARM_VERSION << " (protocol " << kProtocolVersion << ")\n";
    // What --target=host means here: tune, build, tasks and the demo use it.
    out << "host target: " << codegen::HostTarget().ToString() << "\n";
    return kExitOk;
  }
  return std::nullopt;
}

// The connection the global flags `g` (or, for those not given, the
// environment) ask for, into `opts` and `timeout_s`. Returns kExitUsage (with
// the message on `err`) when a flag is bad, else nullopt.
std::optional<int> ResolveClientOptions(const Flags& g, ClientOptions* opts, int64_t* timeout_s,
                                        std::ostream& err) {
  // The environment gives what a flag does not: set them once per shell.
  std::map<std::string, std::vector<std::string>> given = g.given();
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
      opts->server = WithDefaultPort(v);
    } else if (k == "tls_ca") {
      opts->tls_ca_file = v;
    } else if (k == "token_file") {
      absl::StatusOr<std::string> t = ReadTokenFile(v);
      if (!t.ok()) {
        err << "tunefarm: error: " << t.status().message() << "\n";
        return kExitUsage;
      }
      opts->token = *t;
    } else if (k == "timeout") {
      if (!absl::SimpleAtoi(v, timeout_s) || *timeout_s <= 0) {
        err << "tunefarm: error: --timeout needs a positive number of seconds\n";
        return kExitUsage;
      }
    } else {
      err << "tunefarm: error: unknown global flag --" << k << "\n";
      return kExitUsage;
    }
  }
  // A token in plain text beyond loopback would cross the network readable.
  if (!opts->token.empty()) {
    if (absl::Status t = CheckTransport(*opts, g.Has("insecure")); !t.ok()) {
      err << "tunefarm: error: " << t.message() << "\n";
      return kExitUsage;
    }
  }
  return std::nullopt;
}

// A command that talks to the server: its function and the flags it takes.
struct ServerCommand {
  Result (*run)(Client&, const Args&, std::ostream&);
  FlagSpec flags;
};

// The commands that talk to the server, by name.
const std::map<std::string, ServerCommand>& ServerCommands() {
  static const std::map<std::string, ServerCommand> kCommands = {
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
  return kCommands;
}

// Runs the server command `cmd` with its arguments `rest` over a client of
// `opts`. Returns the exit code (kExitUsage for an unknown command or bad flags).
int RunServerCommand(const std::string& cmd, const std::vector<std::string>& rest,
                     const ClientOptions& opts, int64_t timeout_s, std::ostream& out,
                     std::ostream& err) {
  const std::map<std::string, ServerCommand>& commands = ServerCommands();
  auto it = commands.find(cmd);
  if (it == commands.end()) {
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

}  // namespace

int RunCli(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  // Global flags come before the command.
  std::vector<std::string> global;
  const size_t i = SplitGlobalFlags(args, &global);
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
  const std::vector<std::string> rest(args.begin() + i + 1, args.end());
  if (std::optional<int> code = RunLocalCommand(cmd, rest, out, err)) return *code;
  ClientOptions opts;
  int64_t timeout_s = 30;
  if (std::optional<int> code = ResolveClientOptions(*g, &opts, &timeout_s, err)) return *code;
  if (cmd == "run") return RunModelOnAgent(opts, absl::Seconds(timeout_s), rest, out, err);
  return RunServerCommand(cmd, rest, opts, timeout_s, out, err);
}

}  // namespace tunefarm::cli
