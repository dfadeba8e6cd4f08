// Records as JSON lines: one tunefarm.v1.Record in protobuf's JSON mapping per
// line. This is the export/import format farms share.
#pragma once

#include <istream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tunefarm/v1/records.pb.h"

namespace tunefarm::cli {

// One line, without the trailing newline.
std::string RecordToJsonLine(const ::tunefarm::v1::Record& record);

// Parses every non-blank line of `in`. The first bad line is an
// InvalidArgument "<source>:<line>: <reason>"; nothing is returned then.
absl::StatusOr<std::vector<::tunefarm::v1::Record>> ParseRecordsJsonl(std::istream& in,
                                                                       const std::string& source);

}  // namespace tunefarm::cli
