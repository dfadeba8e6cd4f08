// Helpers for tests that start the real binaries: where they are, waiting on
// a condition with a deadline, and a server started on port 0.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/subprocess.h"

namespace tunefarm::testing {

// How many times `what` occurs in `text` (overlapping ones counted).
int Occurrences(const std::string &text, const std::string &what);

// Absolute path of a binary in build/bin, and of a test helper in build/tests.
std::string BinPath(const std::string& name);
std::string TestBinPath(const std::string& name);

// Polls `pred` (with a short, growing pause) until it is true or `timeout`
// passes. Returns whether it became true.
bool WaitFor(const std::function<bool()>& pred, absl::Duration timeout);

// Runs a command to completion; returns its stdout, and its exit code in *code.
struct CommandResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};
// `quiet` bounds the wait for each line of output and for the exit.
CommandResult RunCommand(const std::vector<std::string>& argv, const std::string& scratch_dir,
                         absl::Duration quiet = absl::Seconds(120));

// A TCP connection to 127.0.0.1:`port` from the loopback address `source`
// (any of 127.0.0.0/8, to stand for another peer); -1 if none.
int ConnectLoopback(int port, const char* source = "127.0.0.1");

// A port on 127.0.0.1 held for the life of the object: bound (SO_REUSEPORT,
// not listening), so no other process is given it as port 0 while a server
// started on it (gRPC binds with SO_REUSEPORT too) is down between restarts,
// and a client dialling it meanwhile is refused.
class ReservedPort {
 public:
  static absl::StatusOr<std::unique_ptr<ReservedPort>> Take();
  ~ReservedPort();
  int port() const { return port_; }
  std::string listen_flag() const { return "--listen=127.0.0.1:" + std::to_string(port_); }

 private:
  int fd_ = -1;
  int port_ = 0;
};

// tunefarm-server on 127.0.0.1 port 0 with the given db, killed when the
// object dies.
class ServerProcess {
 public:
  static absl::StatusOr<std::unique_ptr<ServerProcess>> Start(
      const std::string& db, const std::string& dir, const std::vector<std::string>& extra = {});
  int port() const { return port_; }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  // --server_key=<the public half of the server's signing key>, for its agents.
  std::string server_key_flag() const { return "--server_key=" + signing_key_ + ".pub"; }
  Subprocess& process() { return *proc_; }
  // `tunefarm --server=<this server> args...`, run in `scratch_dir`.
  CommandResult Cli(std::vector<std::string> args, const std::string& scratch_dir) const;
  // SIGTERM, then wait for a clean exit; returns the wait status.
  absl::StatusOr<int> Stop();

 private:
  std::unique_ptr<Subprocess> proc_;
  int port_ = 0;
  std::string signing_key_;
};

}  // namespace tunefarm::testing
