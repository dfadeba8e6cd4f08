// tunefarm devices (and drain, resume, remove) and target (cli/client_command.h).
#include "cli/client_command.h"

#include <map>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "cli/command_util.h"
#include "cli/target_cmd.h"
#include "proto/protocol.h"

namespace tunefarm::cli {

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

}  // namespace tunefarm::cli
