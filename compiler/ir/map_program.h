// Elementwise programs: the EPILOGUE_KIND_MAP epilogue (workload.proto).
//
// A program is a list of steps over values: value 0 is the epilogue's input
// (the kernel's result so far), value k the result of step k. Each step
// applies one function to values, extra kernel inputs (`map_inputs`,
// broadcast against the output) and literals; the last step's value is the
// epilogue's result. Any DAG of elementwise operators (hard-swish written
// out, GELU, a per-channel scale and offset, ...) is one such program.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "tunefarm/v1/workload.pb.h"

namespace tunefarm::ir {

namespace v1 = ::tunefarm::v1;

struct MapFnInfo {
  v1::MapFn fn;
  std::string_view name;  // as workload specs write it
  int tensors;            // tensor operands (values or inputs), first
  int literals;           // literal operands, after them
  double flops;           // per element
};

// Every function, in enum order.
const std::vector<MapFnInfo>& MapFns();
const MapFnInfo* FindMapFn(v1::MapFn fn);
const MapFnInfo* FindMapFn(std::string_view name);

// Programs longer than this, or whose expression written out as a tree
// (values used twice counted twice) passes kMaxMapTree, are refused.
inline constexpr int kMaxMapSteps = 64;
inline constexpr int kMaxMapInputs = 8;
inline constexpr int64_t kMaxMapTree = 512;

// Checks a MAP epilogue against the kernel's output shape and puts it in
// canonical form (input shapes without leading 1s, the workload's `dtype`
// where none is given). Errors are InvalidArgument and name `where`
// ("epilogue[2]"), the step and operand.
absl::Status CanonicalizeMap(v1::Epilogue* e, const std::vector<int64_t>& output, v1::DType dtype,
                             const std::string& where);

// Floating-point operations per output element.
double MapFlops(const v1::Epilogue& e);

// "map(mul,add,clip,...)": the functions in order, for one-line summaries.
std::string DescribeMap(const v1::Epilogue& e);

// Whether `input` broadcasts numpy-style to `output` (dimensions aligned at
// the innermost, each 1 or equal; no more of them than the output has).
bool BroadcastsTo(const std::vector<int64_t>& input, const std::vector<int64_t>& output);

// The input's index for each output dimension (-1: broadcast, read at 0),
// aligned at the innermost dimension.
std::vector<int> MapInputAxes(const std::vector<int64_t>& input,
                              const std::vector<int64_t>& output);

}  // namespace tunefarm::ir
