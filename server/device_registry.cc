#include "server/device_registry.h"

#include "absl/strings/str_cat.h"
#include "common/access_tokens.h"
#include "common/status_macros.h"

namespace tunefarm::server {

absl::StatusOr<std::string> DeviceRegistry::Register(const v1::Device& device,
                                                     const std::string& owner,
                                                     bool reserved_for_owner) {
  v1::Device d = device;
  int64_t now = absl::ToUnixMillis(absl::Now());
  d.set_registered_unix_ms(now);
  d.set_last_seen_unix_ms(now);
  d.set_owner(owner);
  TF_ASSIGN_OR_RETURN(std::string id, RandomHex(16));
  std::lock_guard<std::mutex> lock(mu_);
  absl::StatusOr<std::string> stored = log_.DeviceOwner(d.device_id());
  if (!stored.ok() && !absl::IsNotFound(stored.status())) return stored.status();
  if (stored.ok() && !stored->empty() && *stored != owner && !reserved_for_owner) {
    return absl::AlreadyExistsError(absl::StrCat(
        "device id '", d.device_id(), "' belongs to token '", *stored, "'; token '", owner,
        "' cannot register it (an admin can release it: tunefarm devices remove ", d.device_id(),
        ")"));
  }
  TF_RETURN_IF_ERROR(log_.UpsertDevice(d));
  for (auto it = sessions_.begin(); it != sessions_.end();) {
    it = it->second.device_id == d.device_id() ? sessions_.erase(it) : std::next(it);
  }
  sessions_[id] = Session{d.device_id(), absl::Now()};
  return id;
}

bool DeviceRegistry::AliveLocked(const Session& s) const {
  return absl::Now() - s.last_seen < 3 * heartbeat_interval_;
}

bool DeviceRegistry::Heartbeat(const std::string& session_id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = sessions_.find(session_id);
  if (it == sessions_.end()) return false;
  if (!AliveLocked(it->second)) {
    sessions_.erase(it);
    return false;
  }
  it->second.last_seen = absl::Now();
  return true;
}

bool DeviceRegistry::SessionAlive(const std::string& session_id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = sessions_.find(session_id);
  return it != sessions_.end() && AliveLocked(it->second);
}

void DeviceRegistry::EndSession(const std::string& session_id) {
  std::lock_guard<std::mutex> lock(mu_);
  sessions_.erase(session_id);
}

absl::StatusOr<std::vector<v1::Device>> DeviceRegistry::List() {
  TF_ASSIGN_OR_RETURN(std::vector<v1::Device> devices, log_.ListDevices());
  std::lock_guard<std::mutex> lock(mu_);
  for (v1::Device& d : devices) {
    for (const auto& [id, s] : sessions_) {
      if (s.device_id != d.device_id()) continue;
      d.set_last_seen_unix_ms(absl::ToUnixMillis(s.last_seen));
      if (AliveLocked(s)) d.set_state(v1::DEVICE_STATE_ONLINE);
    }
  }
  return devices;
}

}  // namespace tunefarm::server
