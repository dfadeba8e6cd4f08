// Client-side helpers shared by the CLI, the worker and the agent: channel
// creation (plain or TLS), and per-call contexts with a deadline and the
// bearer token.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"

namespace tunefarm {

// The port a server listens on and clients dial when none is given.
constexpr int kDefaultPort = 7070;

struct ClientOptions {
  std::string server = "127.0.0.1:7070";
  std::string tls_ca_file;  // when set: TLS, trusting this CA
  std::string token;        // sent as "authorization: Bearer <token>"
};

// Whether a gRPC address (HOST:PORT, [V6]:PORT, ipv4:/ipv6:/dns: forms,
// unix:PATH) stays on this machine: localhost, 127.0.0.0/8, ::1, a unix
// socket. An empty host (":7070", "0.0.0.0:7070", "[::]:7070") does not.
bool IsLoopbackAddress(const std::string& address);

// HOST or [V6] without a port gets kDefaultPort; any other address (with a
// port, a scheme, a unix socket) is returned as it is.
std::string WithDefaultPort(const std::string& address);

// Plain text to a server beyond loopback would show its bearer token to
// the network: refused (naming --tls_ca and --insecure) unless `insecure`.
absl::Status CheckTransport(const ClientOptions& options, bool insecure);

// Reads the token of a client's token file: its first non-empty line
// that is neither a comment nor part of a PEM block.
absl::StatusOr<std::string> ReadTokenFile(const std::string& path);

// The PEM public key a token file may carry after its token (the server's
// signing key, written by `tunefarm token --server_key`), or "" when it
// carries none or cannot be read.
std::string ReadPublicKeyPem(const std::string& path);

// What to change, from gRPC's words for a failed connection ("nothing
// listens there: ...", "... give --tls_ca=CA.pem"); "" when its words name
// no known cause.
std::string ConnectionHint(absl::string_view grpc_message);

absl::StatusOr<std::shared_ptr<grpc::Channel>> MakeChannel(const ClientOptions& options);

// A context with `timeout` as deadline and the token attached.
std::unique_ptr<grpc::ClientContext> MakeContext(const ClientOptions& options,
                                                 absl::Duration timeout);

}  // namespace tunefarm
