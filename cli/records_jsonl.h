// Records as JSON lines: one tunefarm.v1.Record in protobuf's JSON mapping per
// line. This is the export/import format farms share.
#pragma once

#include <functional>
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

// The same, one record at a time (memory bounded by a line): `each` gets
// every record in order; its error, or the first bad line's, ends the read.
absl::Status ForEachRecordJsonl(std::istream& in, const std::string& source,
                                const std::function<absl::Status(::tunefarm::v1::Record)>& each);

}  // namespace tunefarm::cli
