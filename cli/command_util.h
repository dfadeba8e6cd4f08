// Pieces the commands share: exit codes, error lines, --target values and
// what a failed call to the server means to the user.
#pragma once

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "compiler/frontend/onnx_import.h"
#include "compiler/ir/target.h"
#include "grpcpp/support/status.h"
#include "tunefarm/v1/workload.pb.h"

namespace tunefarm::store {
class TuningLog;
}

namespace tunefarm::cli {

constexpr int kExitOk = 0;
constexpr int kExitFailed = 1;
constexpr int kExitUsage = 2;
constexpr int kExitUnreachable = 3;

// A failed RPC as an exit code and one message: the server unreachable or
// silent (kExitUnreachable, naming `server`), or its own refusal (kExitFailed).
struct RpcError {
  int code;
  std::string message;
};
RpcError DescribeRpcError(const grpc::Status& s, const std::string& server);

// Writes "tunefarm: error: MSG" as one line and returns `code`.
int Fail(std::ostream& err, int code, const std::string& msg);

// Text from other users (job names, messages) made safe for a terminal
// table: control characters (newlines, escape sequences) as \xNN.
std::string Printable(const std::string& text);

// `parts` (each >= 0; a negative one has no share) as whole units of
// `total` (100: percent, 1000: tenths of a percent) that add up to `total`
// exactly: each part's exact share rounded down, then one more unit to each
// of those with the largest remainders until the sum is `total` (largest
// remainder rounding). A negative part gets -1; all 0 when no part is
// positive.
std::vector<int64_t> ApportionShares(const std::vector<double>& parts, int64_t total);

// A --target value: "host" (this machine) or a target string.
absl::StatusOr<ir::Target> ParseTargetFlag(const std::string& value);

// The --target of a command that tunes or builds CPU kernels for `threads`
// threads: its -num-cores is that count, as on the farm (an agent runs a
// target's kernels on -num-cores threads), so records tuned at one count are
// never taken for another. "host" is this machine's CPU at `threads`; a
// target string without -num-cores gets it; one with another count is an
// error naming both. GPU targets are returned as given.
absl::StatusOr<ir::Target> TargetForThreads(const std::string& value, int threads);

// Import options from --shape values ("NAME=D1xD2x..." each) and --value
// values ("NAME=V1,V2,..." each: an input fixed to constants); the first
// malformed one is the error.
absl::StatusOr<frontend::ImportOptions> ImportOverrides(const std::vector<std::string>& shapes,
                                                        const std::vector<std::string>& values);

// A --layout value: "nchw" (false) or "nhwc" (true,
// frontend::ExtractOptions::channels_last); empty: the target's default
// (nullopt); anything else names the flag.
absl::StatusOr<std::optional<bool>> ParseLayoutFlag(const std::string& value);

// A --precision value for kernels of `target`: "fp32" (or empty), "fp16",
// "bf16" or "tf32" (frontend::ExtractOptions::precision; frontend::
// CheckPrecision says where each runs); anything else, or one the target
// cannot run, is an error that names the flag.
absl::StatusOr<v1::DType> ParsePrecisionFlag(const std::string& value, const ir::Target& target);

// The layout an earlier tune of `model` used on `target`: true
// (channels-last) or false (NCHW) where the tasks of that layout alone have
// records in `log` and those of the other do not; nullopt otherwise.
absl::StatusOr<std::optional<bool>> TunedLayout(const frontend::Model& model,
                                                const ir::Target& target, store::TuningLog* log,
                                                v1::DType precision = v1::DTYPE_FLOAT32);

// `s` as a JSON string literal: quotes, backslashes and control characters
// escaped (model value names may hold any of them).
std::string JsonQuote(const std::string& s);

}  // namespace tunefarm::cli
