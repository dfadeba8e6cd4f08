// The CPU tiling sketch in tests: the search space bound to a DAG, and
// decisions written by hand in wire form decoded for it.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "compiler/codegen/llvm_target.h"
#include "compiler/ir/compute.h"
#include "compiler/schedule/tiling.h"
#include "gtest/gtest.h"
#include "search/space/cpu_sketch.h"

namespace tunefarm::testing {

// The CPU tiling sketch of `dag` as the search sees it.
inline search::space::CpuSketch Space(const ir::ComputeDAG& dag,
                                      const ir::Target& target = codegen::HostTarget()) {
  return search::space::CpuSketch(dag, target);
}

// Decisions in wire form (either length) decoded for `dag`; a failed
// expectation when they do not fit.
inline schedule::CpuTiling Tiling(const ir::ComputeDAG& dag, const std::vector<int64_t>& wire) {
  std::optional<schedule::CpuTiling> t = schedule::CpuTiling::Decode(schedule::TilingNest::Of(dag), wire);
  EXPECT_TRUE(t.has_value()) << wire.size() << " decisions do not fit the workload";
  return t.value_or(schedule::CpuTiling{});
}

}  // namespace tunefarm::testing
