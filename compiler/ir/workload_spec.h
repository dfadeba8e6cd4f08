// Workloads written on a command line:
//
//   conv2d_nchw(N=1,C=64,H=56,W=56,K=64,R=3,S=3,stride=1,pad=1)+bias+relu
//   depthwise_conv2d_nchw(N=1,C=144,H=56,W=56,R=3,S=3,stride=1,pad=1)
//   matmul(M=512,N=512,K=512)        dense(M=1,N=1000,K=512)+bias
//   matmul(M=4096,N=4096,K=4096,dtype=float16)
//
// ParseWorkloadSpec returns the Workload message; a malformed spec is an
// InvalidArgument that quotes the spec and points at the bad part
// ("at column 14: ..."). WorkloadSpecHelp() lists every op and attribute.
// FormatWorkloadSpec is its inverse: the spec that parses back to the same
// canonical workload (same key), so what `tunefarm tasks` prints is what
// `--workload` takes.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "tunefarm/v1/workload.pb.h"

namespace tunefarm::ir {

absl::StatusOr<::tunefarm::v1::Workload> ParseWorkloadSpec(const std::string& spec);
std::string WorkloadSpecHelp();
// The spec of `workload`, or Unimplemented naming what the spec syntax
// cannot say (another dtype, dilation on a pooling, a broadcast batch
// matmul, ...).
absl::StatusOr<std::string> FormatWorkloadSpec(const ::tunefarm::v1::Workload& workload);

}  // namespace tunefarm::ir
