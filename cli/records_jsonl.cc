#include "cli/records_jsonl.h"

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "google/protobuf/util/json_util.h"

namespace tunefarm::cli {

std::string RecordToJsonLine(const ::tunefarm::v1::Record& record) {
  google::protobuf::util::JsonPrintOptions o;
  o.preserve_proto_field_names = true;
  std::string line;
  (void)google::protobuf::util::MessageToJsonString(record, &line, o);
  return line;
}

absl::Status ForEachRecordJsonl(std::istream& in, const std::string& source,
                                const std::function<absl::Status(::tunefarm::v1::Record)>& each) {
  constexpr size_t kMaxLine = 64 << 20;
  std::string line;
  int line_no = 0;
  google::protobuf::util::JsonParseOptions o;
  o.ignore_unknown_fields = false;
  while (std::getline(in, line)) {
    ++line_no;
    if (absl::StripAsciiWhitespace(line).empty()) continue;
    if (line.size() > kMaxLine) {
      return absl::InvalidArgumentError(absl::StrCat(source, ":", line_no, ": line too long"));
    }
    ::tunefarm::v1::Record r;
    auto st = google::protobuf::util::JsonStringToMessage(line, &r, o);
    if (!st.ok()) {
      // The parser's message may go on with the line and a caret; keep line one.
      std::string why = st.message().as_string();
      why = why.substr(0, why.find('\n'));
      return absl::InvalidArgumentError(absl::StrCat(source, ":", line_no, ": not a record: ", why));
    }
    if (absl::Status s = each(std::move(r)); !s.ok()) return s;
  }
  if (in.bad()) return absl::DataLossError(absl::StrCat(source, ": read error"));
  return absl::OkStatus();
}

absl::StatusOr<std::vector<::tunefarm::v1::Record>> ParseRecordsJsonl(std::istream& in,
                                                                      const std::string& source) {
  std::vector<::tunefarm::v1::Record> out;
  absl::Status s = ForEachRecordJsonl(in, source, [&](::tunefarm::v1::Record r) {
    out.push_back(std::move(r));
    return absl::OkStatus();
  });
  if (!s.ok()) return s;
  return out;
}

}  // namespace tunefarm::cli
