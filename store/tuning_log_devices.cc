// TuningLog's devices: registration, drain, removal and listing.
#include "store/tuning_log.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "store/sqlite_db.h"
#include "store/tuning_log_internal.h"

namespace tunefarm::store {
namespace {

using internal::DeterministicBytes;
using internal::Stmt;

}  // namespace

absl::Status TuningLog::UpsertDevice(const v1::Device& d) {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt st(db_->raw(), path_);
  TF_RETURN_IF_ERROR(st.Prepare(
      "INSERT INTO devices (device_id, role, device_key, capabilities, registered_unix_ms, "
      "last_seen_unix_ms, peer, owner) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8) "
      "ON CONFLICT (device_id) DO UPDATE SET role = ?2, device_key = ?3, capabilities = ?4, "
      "registered_unix_ms = ?5, last_seen_unix_ms = ?6, peer = ?7, owner = ?8"));
  st.Bind(1, d.device_id()).Bind(2, int64_t{d.role()}).Bind(3, d.device_key());
  st.BindBlob(4, DeterministicBytes(d.capabilities())).Bind(5, d.registered_unix_ms());
  st.Bind(6, d.last_seen_unix_ms()).Bind(7, d.peer()).Bind(8, d.owner());
  return st.Run();
}

absl::Status TuningLog::SetDeviceDrained(const std::string& device_id, bool drained) {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt st(db_->raw(), path_);
  TF_RETURN_IF_ERROR(st.Prepare("UPDATE devices SET drained = ?2 WHERE device_id = ?1"));
  st.Bind(1, device_id).Bind(2, int64_t{drained});
  TF_RETURN_IF_ERROR(st.Run());
  if (sqlite3_changes(db_->raw()) == 0) {
    return absl::NotFoundError(absl::StrCat("no device '", device_id, "' has registered"));
  }
  return absl::OkStatus();
}

absl::Status TuningLog::RemoveDevice(const std::string& device_id) {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt st(db_->raw(), path_);
  TF_RETURN_IF_ERROR(st.Prepare("DELETE FROM devices WHERE device_id = ?1"));
  st.Bind(1, device_id);
  TF_RETURN_IF_ERROR(st.Run());
  if (sqlite3_changes(db_->raw()) == 0) {
    return absl::NotFoundError(absl::StrCat("no device '", device_id, "' has registered"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<v1::Device>> TuningLog::ListDevices() {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt st(db_->raw(), path_);
  TF_RETURN_IF_ERROR(st.Prepare(
      "SELECT device_id, role, device_key, capabilities, registered_unix_ms, last_seen_unix_ms, "
      "peer, drained, owner, timings_confirmed, timings_disputed FROM devices "
      "ORDER BY device_id"));
  std::vector<v1::Device> out;
  while (true) {
    TF_ASSIGN_OR_RETURN(bool row, st.Step());
    if (!row) break;
    v1::Device d;
    d.set_device_id(st.Text(0));
    d.set_role(static_cast<v1::Role>(st.Int(1)));
    d.set_device_key(st.Text(2));
    d.mutable_capabilities()->ParseFromString(st.Blob(3));
    d.set_registered_unix_ms(st.Int(4));
    d.set_last_seen_unix_ms(st.Int(5));
    d.set_peer(st.Text(6));
    d.set_drained(st.Int(7) != 0);
    d.set_owner(st.Text(8));
    d.set_timings_confirmed(int32_t(st.Int(9)));
    d.set_timings_disputed(int32_t(st.Int(10)));
    d.set_state(v1::DEVICE_STATE_OFFLINE);
    out.push_back(std::move(d));
  }
  return out;
}

absl::StatusOr<std::string> TuningLog::DeviceOwner(const std::string& device_id) {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt st(db_->raw(), path_);
  TF_RETURN_IF_ERROR(st.Prepare("SELECT owner FROM devices WHERE device_id = ?1"));
  st.Bind(1, device_id);
  TF_ASSIGN_OR_RETURN(bool row, st.Step());
  if (!row) return absl::NotFoundError(absl::StrCat("no device '", device_id, "' has registered"));
  return st.Text(0);
}

}  // namespace tunefarm::store
