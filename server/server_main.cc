// tunefarm-server: the tuning server.
//
//   tunefarm-server --listen=127.0.0.1:7070 --db=tunefarm.db
//
// Stops cleanly on SIGINT/SIGTERM. On SIGHUP it reads --tokens_file,
// --tls_cert and --tls_key again (TunefarmServer::Reload; a file that does
// not load is logged and the one before stays). With --port_file it writes
// the bound port there once it listens (use --listen=127.0.0.1:0 to let the
// OS pick).
#include <signal.h>

#include <cstdio>
#include <fstream>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/synchronization/mutex.h"
#include "common/flags_usage.h"
#include "common/logging.h"
#include "proto/client.h"
#include "server/server.h"

ABSL_FLAG(std::string, listen, "127.0.0.1:7070", "address:port to serve on (port 0: any)");
ABSL_FLAG(std::string, db, "tunefarm.db", "SQLite log database file (created if absent)");
ABSL_FLAG(std::string, tls_cert, "", "PEM certificate chain; serve TLS (needs --tls_key)");
ABSL_FLAG(std::string, tls_key, "", "PEM private key for --tls_cert");
ABSL_FLAG(std::string, tokens_file, "", "file of accepted bearer tokens, one per line");
ABSL_FLAG(std::string, signing_key, "",
          "Ed25519 key that signs the code of every lease (made when absent, its public half "
          "beside it as .pub, for agents' --server_key); default: the db file + .signing-key");
ABSL_FLAG(std::string, port_file, "", "write the bound port to this file once listening");
ABSL_FLAG(bool, auto_resume, false,
          "resume the jobs the previous server was running (otherwise they are INTERRUPTED)");
ABSL_FLAG(std::string, fingerprint_policy, "warn",
          "records measured on other hardware: warn (reuse them, say so) or refuse (leave out)");
ABSL_FLAG(int, heartbeat_interval_ms, 5000, "heartbeat interval asked of workers and agents");
ABSL_FLAG(int, max_message_mb, 256, "largest request or response in MiB");
ABSL_FLAG(int, max_running_jobs, 32, "jobs tuned at once; more wait, queued");
ABSL_FLAG(double, confirm_tolerance, 0.5,
          "a new best measured again on a second device of the key confirms when the two "
          "medians are within a factor 1 + this; otherwise it is disputed and never ranks");
ABSL_FLAG(int, max_jobs_per_token, 256,
          "jobs one token may have queued, running, waiting or interrupted at once");
ABSL_FLAG(std::string, log_level, "info", "trace, debug, info, warn, error");
ABSL_FLAG(std::string, http_listen, "",
          "HOST:PORT of the HTTP pages (/metrics in Prometheus' format); off when empty. Same "
          "tokens as the gRPC port; beyond loopback only with --insecure (no TLS there: put a "
          "TLS proxy in front)");
ABSL_FLAG(std::string, http_port_file, "",
          "write the HTTP pages' bound port to this file once listening");
ABSL_FLAG(int, http_max_connections, 128,
          "HTTP connections open at once, those still sending their request included");
ABSL_FLAG(int, http_max_connections_per_peer, 32,
          "HTTP connections open at once from one IP address (past a cap, a new connection "
          "replaces the oldest one still sending its request)");
ABSL_FLAG(int, http_head_timeout_ms, 3000, "time an HTTP client has to send its request head");
ABSL_FLAG(int, http_send_timeout_ms, 10000, "time an HTTP client has to take its response");
ABSL_FLAG(bool, insecure, false,
          "listen beyond loopback without TLS or without tokens (anyone who can reach the port "
          "can then submit, import and register)");

int main(int argc, char** argv) {
  tunefarm::SetDaemonUsage(
      "the tunefarm tuning server\n\n  tunefarm-server [--listen=HOST:PORT] [--db=FILE] "
      "[--tls_cert=F --tls_key=F] [--tokens_file=F]\n\nSIGHUP reads the tokens file, certificate "
      "and key again.\n\nExit codes: 0 stopped by SIGINT/SIGTERM, "
      "1 failed while serving, 2 bad flags or set-up (docs/cli.md)");
  tunefarm::ParseDaemonFlags(argc, argv);
  // Debian's Abseil checks every absl::Mutex (gRPC's locks) for lock-order
  // cycles: a few percent of the server's CPU under load, for a debugging aid.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  if (absl::Status s = tunefarm::InitLogging(absl::GetFlag(FLAGS_log_level)); !s.ok()) {
    std::fprintf(stderr, "tunefarm-server: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  // Block the stop and reload signals in every thread; this one waits for them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  tunefarm::server::TunefarmServer::Options opts;
  opts.listen = absl::GetFlag(FLAGS_listen);
  opts.db_path = absl::GetFlag(FLAGS_db);
  opts.tls_cert_file = absl::GetFlag(FLAGS_tls_cert);
  opts.tls_key_file = absl::GetFlag(FLAGS_tls_key);
  opts.tokens_file = absl::GetFlag(FLAGS_tokens_file);
  opts.signing_key_file = absl::GetFlag(FLAGS_signing_key);
  opts.heartbeat_interval = absl::Milliseconds(absl::GetFlag(FLAGS_heartbeat_interval_ms));
  opts.auto_resume = absl::GetFlag(FLAGS_auto_resume);
  opts.fingerprint_policy = absl::GetFlag(FLAGS_fingerprint_policy);
  int max_mb = absl::GetFlag(FLAGS_max_message_mb);
  if (max_mb < 1 || max_mb > 2047 || absl::GetFlag(FLAGS_heartbeat_interval_ms) < 10) {
    std::fprintf(stderr,
                 "tunefarm-server: --max_message_mb must be 1..2047 and "
                 "--heartbeat_interval_ms at least 10\n");
    return 2;
  }
  opts.max_message_bytes = max_mb << 20;
  opts.max_running_jobs = absl::GetFlag(FLAGS_max_running_jobs);
  opts.confirm_tolerance = absl::GetFlag(FLAGS_confirm_tolerance);
  if (!(opts.confirm_tolerance >= 0)) {
    std::fprintf(stderr, "tunefarm-server: --confirm_tolerance must be 0 or more\n");
    return 2;
  }
  opts.max_jobs_per_token = absl::GetFlag(FLAGS_max_jobs_per_token);
  if (opts.max_running_jobs < 1 || opts.max_jobs_per_token < 1) {
    std::fprintf(
        stderr,
        "tunefarm-server: --max_running_jobs and --max_jobs_per_token must be at least 1\n");
    return 2;
  }
  if (!tunefarm::IsLoopbackAddress(opts.listen) && !absl::GetFlag(FLAGS_insecure) &&
      (opts.tls_cert_file.empty() || opts.tokens_file.empty())) {
    std::fprintf(stderr,
                 "tunefarm-server: refusing to listen on %s without %s: give --tls_cert, "
                 "--tls_key and --tokens_file (docs/security.md), listen on 127.0.0.1, or add "
                 "--insecure\n",
                 opts.listen.c_str(),
                 opts.tls_cert_file.empty() && opts.tokens_file.empty() ? "TLS and tokens"
                 : opts.tls_cert_file.empty()                           ? "TLS"
                                                                        : "tokens");
    return 2;
  }
  opts.http_listen = absl::GetFlag(FLAGS_http_listen);
  if (!opts.http_listen.empty() && !tunefarm::IsLoopbackAddress(opts.http_listen) &&
      !absl::GetFlag(FLAGS_insecure)) {
    std::fprintf(stderr,
                 "tunefarm-server: refusing to serve HTTP on %s: the pages have no TLS (tokens "
                 "would cross the network readable); listen on 127.0.0.1 behind a TLS proxy, or "
                 "add --insecure\n",
                 opts.http_listen.c_str());
    return 2;
  }
  opts.http.max_connections = absl::GetFlag(FLAGS_http_max_connections);
  opts.http.max_connections_per_peer = absl::GetFlag(FLAGS_http_max_connections_per_peer);
  opts.http.head_timeout = absl::Milliseconds(absl::GetFlag(FLAGS_http_head_timeout_ms));
  opts.http.send_timeout = absl::Milliseconds(absl::GetFlag(FLAGS_http_send_timeout_ms));
  if (opts.http.max_connections < 1 || opts.http.max_connections_per_peer < 1 ||
      absl::GetFlag(FLAGS_http_head_timeout_ms) < 1 ||
      absl::GetFlag(FLAGS_http_send_timeout_ms) < 1) {
    std::fprintf(stderr,
                 "tunefarm-server: --http_max_connections, --http_max_connections_per_peer, "
                 "--http_head_timeout_ms and --http_send_timeout_ms must be at least 1\n");
    return 2;
  }
  auto server = tunefarm::server::TunefarmServer::Start(opts);
  if (!server.ok()) {
    std::fprintf(stderr, "tunefarm-server: %s\n", std::string(server.status().message()).c_str());
    return 1;
  }
  if (!absl::GetFlag(FLAGS_port_file).empty()) {
    // Write then rename, so a reader never sees a partial number.
    std::string tmp = absl::GetFlag(FLAGS_port_file) + ".tmp";
    std::ofstream(tmp) << (*server)->port() << "\n";
    std::rename(tmp.c_str(), absl::GetFlag(FLAGS_port_file).c_str());
  }
  if (!absl::GetFlag(FLAGS_http_port_file).empty()) {
    std::string tmp = absl::GetFlag(FLAGS_http_port_file) + ".tmp";
    std::ofstream(tmp) << (*server)->http_port() << "\n";
    std::rename(tmp.c_str(), absl::GetFlag(FLAGS_http_port_file).c_str());
  }
  int sig = 0;
  while (sigwait(&signals, &sig) == 0 && sig == SIGHUP) {
    (void)(*server)->Reload();  // logs what it replaced, or why not
  }
  tunefarm::Logger("server")->info("event=signal signal={}", sig);
  (*server)->Shutdown();
  return 0;
}
