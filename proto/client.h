// Client-side helpers shared by the CLI, the worker and the agent: channel
// creation (plain or TLS), and per-call contexts with a deadline and the
// bearer token.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"

namespace tunefarm {

struct ClientOptions {
  std::string server = "127.0.0.1:7070";
  std::string tls_ca_file;  // when set: TLS, trusting this CA
  std::string token;        // sent as "authorization: Bearer <token>"
};

// Reads the first non-empty, non-comment line of a tokens file.
absl::StatusOr<std::string> ReadTokenFile(const std::string& path);

absl::StatusOr<std::shared_ptr<grpc::Channel>> MakeChannel(const ClientOptions& options);

// A context with `timeout` as deadline and the token attached.
std::unique_ptr<grpc::ClientContext> MakeContext(const ClientOptions& options,
                                                 absl::Duration timeout);

}  // namespace tunefarm
