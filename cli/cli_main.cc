#include <cstdlib>
#include <iostream>

#include "cli/cli.h"

int main(int argc, char** argv) {
  // Errors are one line of ours; gRPC's own log lines (a failed TLS
  // handshake, say) would come before it. GRPC_VERBOSITY set outside wins.
  setenv("GRPC_VERBOSITY", "NONE", 0);
  std::vector<std::string> args(argv + 1, argv + argc);
  return tunefarm::cli::RunCli(args, std::cout, std::cerr);
}
