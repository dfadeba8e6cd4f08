// TunefarmServer: the tuning server's services, database and gRPC server in
// one object, so the binary and in-process tests start it the same way.
//
//   TunefarmServer::Options opts;
//   opts.listen = "127.0.0.1:0";
//   TF_ASSIGN_OR_RETURN(auto server, TunefarmServer::Start(opts));
//   int port = server->port();
//   ...
//   server->Reload();  // the tokens file, the TLS certificate and key again
//   server->Shutdown();
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "server/http_server.h"

namespace tunefarm::store {
class TuningLog;
}

namespace tunefarm::server {

class DeviceRegistry;
class RequestGate;
class TuningService;
class FarmService;
class WorkQueue;
class JobRunner;
class JobManager;
class ServerCertificate;

class TunefarmServer {
 public:
  struct Options {
    std::string listen = "127.0.0.1:7070";
    std::string db_path = "tunefarm.db";
    std::string tls_cert_file;  // with tls_key_file: serve TLS
    std::string tls_key_file;
    std::string tokens_file;  // when set, every call needs one of its tokens
    // The Ed25519 key measurements and model runs are signed with (made,
    // with its .pub beside it, when absent); empty: db_path + ".signing-key".
    std::string signing_key_file;
    absl::Duration heartbeat_interval = absl::Seconds(5);
    // Largest request or response; bigger ones fail with RESOURCE_EXHAUSTED.
    int max_message_bytes = 0;  // 0: kMaxMessageBytes (256 MiB)
    // Jobs the previous server left running: resume them at start-up
    // (otherwise they are marked INTERRUPTED for `tunefarm resume`).
    bool auto_resume = false;
    // Records of other hardware: "warn" (reuse, say so) or "refuse" (leave out).
    std::string fingerprint_policy = "warn";
    // Jobs tuned at once (more wait, QUEUED), and jobs one token may have
    // queued, running, waiting or interrupted at once.
    int max_running_jobs = 32;
    int max_jobs_per_token = 256;
    // A job's new best confirms on a second device when the two medians are
    // within a factor 1 + this (docs/security.md).
    double confirm_tolerance = 0.5;
    // HOST:PORT of the HTTP pages (/metrics); empty: none. Same tokens as
    // the gRPC port (a reader's, as a bearer header or ?token=).
    std::string http_listen;
    // Its connection caps and deadlines (server/http_server.h).
    HttpServer::Options http;
  };

  static absl::StatusOr<std::unique_ptr<TunefarmServer>> Start(const Options& options);
  ~TunefarmServer();

  int port() const { return port_; }
  int http_port() const;  // 0 without http_listen

  // Reads the tokens file and the TLS certificate and key again (those of
  // Options; the server's SIGHUP). Each that loads replaces the current
  // one: the tokens for every call from now on, the certificate for every
  // connection from now on. Sessions of farm processes whose token is gone,
  // or may no longer serve their device, end (FarmService::RecheckSessions);
  // the others, and their leases, go on. One that does not load is logged
  // (event=reload_failed, naming the file and the problem) and the current
  // one stays. Logs event=reloaded with the counts of what was replaced.
  // Returns the first error, or OK. Safe to call while serving.
  absl::Status Reload();

  // Stops accepting calls, ends open streams, waits for handlers, closes the db.
  void Shutdown();
  void Wait();

 private:
  TunefarmServer() = default;

  std::unique_ptr<store::TuningLog> log_;
  std::unique_ptr<RequestGate> gate_;
  std::unique_ptr<DeviceRegistry> devices_;
  std::unique_ptr<WorkQueue> queue_;
  std::unique_ptr<JobRunner> jobs_;
  std::unique_ptr<JobManager> manager_;
  std::unique_ptr<TuningService> tuning_;
  std::unique_ptr<FarmService> farm_;
  // Before server_: gRPC calls back into it until the server is destroyed.
  std::shared_ptr<ServerCertificate> tls_;  // nullptr: plain text
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<HttpServer> http_;
  int port_ = 0;
  bool shut_down_ = false;
};

}  // namespace tunefarm::server
