#include "compiler/ir/schedule_hash.h"

#include "common/sha256.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"

namespace tunefarm::ir {

std::string ScheduleHash(::tunefarm::v1::Schedule schedule) {
  // sketch_id and decisions are provenance, not structure: two sketches that
  // produce the same steps are the same schedule. A tensor-core schedule is
  // its decisions.
  if (schedule.sketch_id() != kGpuTensorCoreSketchId) {
    schedule.clear_sketch_id();
    schedule.clear_decisions();
  }
  std::string bytes;
  {
    google::protobuf::io::StringOutputStream out(&bytes);
    google::protobuf::io::CodedOutputStream coded(&out);
    coded.SetSerializationDeterministic(true);
    schedule.SerializeToCodedStream(&coded);
  }
  return Sha256Hex(bytes);
}

}  // namespace tunefarm::ir
