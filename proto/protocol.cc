#include "proto/protocol.h"

#include "absl/strings/str_cat.h"
#include "common/signing.h"

namespace tunefarm {

grpc::Status CheckProtocolVersion(uint32_t version) {
  if (version == kProtocolVersion) return grpc::Status::OK;
  if (version == 0) {
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                        absl::StrCat("request has no protocol_version; this server speaks "
                                     "tunefarm protocol version ",
                                     kProtocolVersion));
  }
  return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                      absl::StrCat("unsupported protocol_version ", version,
                                   "; this server speaks tunefarm protocol version ",
                                   kProtocolVersion));
}

grpc::Status ToGrpcStatus(const absl::Status& s) {
  if (s.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()), std::string(s.message()));
}

absl::Status FromGrpcStatus(const grpc::Status& s) {
  if (s.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
}

grpc::ChannelArguments DefaultChannelArguments() {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(kMaxMessageBytes);
  args.SetMaxSendMessageSize(kMaxMessageBytes);
  // A server that comes back is dialled again within kReconnectBackoffMs
  // (gRPC's default back-off grows to 120 s).
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, kReconnectBackoffMs / 4);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, kReconnectBackoffMs);
  // gRPC names its connect timeout "min reconnect back-off": each attempt
  // (TCP connect and TLS handshake) gets at least this long.
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, kConnectTimeoutMs);
  return args;
}

std::string SignedPartOf(const v1::WorkLease& lease) {
  if (lease.has_measure()) {
    const v1::MeasureRequest& m = lease.measure();
    return LeaseSigningMessage(lease.lease_id(), m.artifact(), m.reference_artifact(), "",
                               m.signature().SerializeAsString() +
                                   m.reference_signature().SerializeAsString() +
                                   m.workload().SerializeAsString());
  }
  if (lease.has_model_run()) {
    return LeaseSigningMessage(lease.lease_id(), "", "", lease.model_run().package(), "");
  }
  return "";
}

}  // namespace tunefarm
