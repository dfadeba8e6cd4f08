// Protocol constants and the status conversions shared by every process that
// speaks tunefarm.v1 over gRPC.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "grpcpp/grpcpp.h"
#include "tunefarm/v1/farm.pb.h"

namespace tunefarm {

// The version every request carries in its protocol_version field.
inline constexpr uint32_t kProtocolVersion = 1;

// Largest message a server or client accepts (artifacts and ONNX models
// travel in messages).
inline constexpr int kMaxMessageBytes = 256 << 20;

// Most timed runs one ModelRunRequest may ask for (the server refuses more;
// the agent's model runner caps at it).
inline constexpr int kMaxModelRepeats = 1000;

// OK for kProtocolVersion; FAILED_PRECONDITION naming both versions otherwise.
grpc::Status CheckProtocolVersion(uint32_t version);

// absl and gRPC share their code numbering.
grpc::Status ToGrpcStatus(const absl::Status& s);
absl::Status FromGrpcStatus(const grpc::Status& s);

// What the server signs of a lease and an agent checks (common/signing.h):
// a measurement's kernel and reference kernel with their signatures and
// workload, a model run's package; "" for a build, which carries no code.
std::string SignedPartOf(const v1::WorkLease& lease);

// Whether more of the device's new-best timings were disputed by a second
// device of its key than confirmed: its timings disagree with its peers'
// (`devices`, the dashboard and /metrics flag it).
inline bool TimingsDisputed(const v1::Device& d) {
  return d.timings_disputed() > d.timings_confirmed();
}

// The longest a client waits between dialling a server that is down, and
// so how long after a server comes back its agents and workers are in.
inline constexpr int kReconnectBackoffMs = 2000;
// How long one connection attempt (TCP connect and TLS handshake) may take.
inline constexpr int kConnectTimeoutMs = 10000;

// Channel arguments with the message size limits, the reconnect back-off
// (at most kReconnectBackoffMs) and the connect timeout set.
grpc::ChannelArguments DefaultChannelArguments();

}  // namespace tunefarm
