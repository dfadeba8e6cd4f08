#include "proto/protocol.h"

#include "absl/strings/str_cat.h"

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
  return args;
}

}  // namespace tunefarm
