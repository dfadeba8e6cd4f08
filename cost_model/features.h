// Per-store features of a lowered program, in the spirit of Ansor's: one
// fixed-length row per buffer store (kStoreFeatures floats), describing the
// arithmetic it does, the loops around it and how it touches up to
// kBuffersPerStore buffers. docs/cost_model.md lists every column.
//
//   ProgramFeatures f = ExtractFeatures(state.dag(), Lower(state));
//   // f.rows: one per store; the model scores rows and sums them.
//
// Counts are log2(1 + x); flags are 0/1. Pure function of the program: no
// LLVM, no timing, thread compatible.
#pragma once

#include <array>
#include <string>
#include <vector>

#include "compiler/ir/compute.h"
#include "compiler/ir/stmt.h"

namespace tunefarm::cost_model {

constexpr int kBuffersPerStore = 5;
constexpr int kBufferFeatures = 11;
constexpr int kStoreHeader = 27;
constexpr int kStoreFeatures = kStoreHeader + kBuffersPerStore * kBufferFeatures;

using FeatureRow = std::array<float, kStoreFeatures>;

struct ProgramFeatures {
  std::vector<FeatureRow> rows;  // one per Store statement, in program order
};

ProgramFeatures ExtractFeatures(const ir::ComputeDAG& dag, const ir::Stmt& program);

// Column names, kStoreFeatures of them ("float_mul", "buf0.bytes", ...).
const std::vector<std::string>& FeatureNames();

}  // namespace tunefarm::cost_model
