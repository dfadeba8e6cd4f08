// Internal to compiler/ir: the table of workload spec ops and epilogues
// that parsing (workload_spec.cc), the help text (workload_spec_ops.cc) and
// formatting (workload_spec_format.cc) share. Nothing outside compiler/ir
// includes this header; the public surface is workload_spec.h.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "tunefarm/v1/workload.pb.h"

namespace tunefarm::ir::workload_spec_internal {

struct OpInfo {
  std::vector<std::string> required;
  std::vector<std::string> optional;  // with defaults applied by the builder
  const char* help;
};

// Every op a spec names (but rearrange, which has its own syntax), by name.
const std::map<std::string, OpInfo>& Ops();
// Every "+EPILOGUE" name but map, with the kind it stores.
const std::map<std::string, ::tunefarm::v1::EpilogueKind>& Epilogues();

}  // namespace tunefarm::ir::workload_spec_internal
