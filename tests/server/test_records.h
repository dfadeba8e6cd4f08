// Sample workloads and records for tests.
#pragma once

#include <cstdint>
#include <string>

#include "tunefarm/v1/records.pb.h"

namespace tunefarm::testing {

namespace v1 = ::tunefarm::v1;

// conv2d NCHW 1x{c}x{hw}x{hw}, {k} filters 3x3, pad 1, + bias + relu.
v1::Workload Conv2d(int64_t c, int64_t k, int64_t hw);
// dense [m,k] x [n,k]^T.
v1::Workload Dense(int64_t m, int64_t n, int64_t k);

inline constexpr const char* kTargetX86 = "llvm -mtriple=x86_64-linux-gnu -mcpu=skylake-avx512";

// An OK record whose schedule is distinguished by `salt` (split lengths), with
// `repeats` costs around `mean_sec`.
v1::Record MakeRecord(const v1::Workload& w, const std::string& target, double mean_sec,
                      int64_t salt, int repeats = 3);

}  // namespace tunefarm::testing
