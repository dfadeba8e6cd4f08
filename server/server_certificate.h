// ServerCertificate: the server's TLS certificate chain and private key,
// read from their files at start and again by Reload, and the gRPC server
// credentials that serve whichever pair is current.
//
//   TF_ASSIGN_OR_RETURN(auto cert, ServerCertificate::Load(cert_file, key_file));
//   builder.AddListeningPort(addr, cert->Credentials(), &port);
//   ...
//   absl::StatusOr<ServerCertificate::Info> now = cert->Reload();  // on SIGHUP
//
// A pair is checked before it is used: the chain is PEM certificates, the
// key is an unencrypted PEM private key, the key is the first
// certificate's, and that certificate is valid now. A reload whose pair
// fails a check keeps the current pair. Each new TLS connection gets the
// pair current at its handshake; connections already open keep theirs.
// Thread safe. The object must outlive the grpc::Server the credentials
// were given to (gRPC calls back into it on each handshake).
#pragma once

#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "grpc/grpc_security.h"
#include "grpcpp/security/server_credentials.h"

namespace tunefarm::server {

class ServerCertificate {
 public:
  // What the logs say about a certificate.
  struct Info {
    std::string subject;    // e.g. "CN=farm.example"
    std::string serial;     // upper-case hex
    std::string not_after;  // e.g. "Jan  2 03:04:05 2030 GMT"
    std::string sha256;     // fingerprint of the DER certificate, lower-case hex
  };

  // Reads and checks the pair; the error names the file and the problem.
  static absl::StatusOr<std::shared_ptr<ServerCertificate>> Load(const std::string& cert_file,
                                                                 const std::string& key_file);

  // Reads the two files again. When the pair passes the checks, new
  // connections get it from now on and its Info is returned; otherwise the
  // current pair stays and the error names the file and the problem.
  absl::StatusOr<Info> Reload();

  Info current() const;

  // TLS server credentials serving the current pair (no client
  // certificates asked for), for one listening port.
  std::shared_ptr<grpc::ServerCredentials> Credentials();

  ServerCertificate(const ServerCertificate&) = delete;
  ServerCertificate& operator=(const ServerCertificate&) = delete;

 private:
  ServerCertificate(std::string cert_file, std::string key_file)
      : cert_file_(std::move(cert_file)), key_file_(std::move(key_file)) {}

  // gRPC's certificate config fetcher (grpc_security.h), called before each
  // TLS handshake: the pair when it is new to gRPC, else UNCHANGED.
  static grpc_ssl_certificate_config_reload_status Fetch(
      void* self, grpc_ssl_server_certificate_config** config);

  const std::string cert_file_;
  const std::string key_file_;
  mutable absl::Mutex mu_;
  std::string cert_pem_ ABSL_GUARDED_BY(mu_);
  std::string key_pem_ ABSL_GUARDED_BY(mu_);
  Info info_ ABSL_GUARDED_BY(mu_);
  bool fetched_ ABSL_GUARDED_BY(mu_) = false;  // gRPC has the current pair
};

}  // namespace tunefarm::server
