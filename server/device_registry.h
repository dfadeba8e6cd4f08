// DeviceRegistry: which workers and agents are connected right now.
//
// Registration is persisted in the log database (one row per device_id, so a
// board that reconnects keeps its row, with the token that owns it); sessions and heartbeats live in
// memory, so after a server restart every process registers again (the
// Heartbeat reply tells it to). A device is online while its session's last
// heartbeat is younger than three heartbeat intervals. Thread safe.
#pragma once

#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "store/tuning_log.h"

namespace tunefarm::server {

class DeviceRegistry {
 public:
  DeviceRegistry(store::TuningLog& log, absl::Duration heartbeat_interval)
      : log_(log), heartbeat_interval_(heartbeat_interval) {}

  absl::Duration heartbeat_interval() const { return heartbeat_interval_; }

  // Stores the device with `owner` and opens a session for it; returns the
  // session id. A previous session of the same device_id is closed. The
  // first token to register a device id owns it, in the database, so
  // across restarts: the same id from a token of another name is refused
  // (ALREADY_EXISTS, naming the owner) unless `reserved_for_owner` (the
  // tokens file names the id in the owner's devices=: the file decides),
  // and then it changes hands.
  absl::StatusOr<std::string> Register(const v1::Device& device, const std::string& owner,
                                       bool reserved_for_owner);

  // Records a heartbeat; false when the session is unknown (closed, expired
  // or from before a restart).
  bool Heartbeat(const std::string& session_id);

  bool SessionAlive(const std::string& session_id);

  // Closes the session now: its device is offline and its heartbeats are
  // told to register again. Nothing when the session is unknown.
  void EndSession(const std::string& session_id);

  // Every device ever registered, with its current state.
  absl::StatusOr<std::vector<v1::Device>> List();

 private:
  struct Session {
    std::string device_id;
    absl::Time last_seen;
  };
  bool AliveLocked(const Session& s) const;

  store::TuningLog& log_;
  const absl::Duration heartbeat_interval_;
  std::mutex mu_;
  std::map<std::string, Session> sessions_;  // by session id
};

}  // namespace tunefarm::server
