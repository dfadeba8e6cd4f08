#include "worker/artifact_cache.h"

#include "common/sha256.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"

namespace tunefarm::worker {

std::string ArtifactCache::Key(const ::tunefarm::v1::BuildRequest& request) {
  std::string bytes;
  {
    google::protobuf::io::StringOutputStream out(&bytes);
    google::protobuf::io::CodedOutputStream coded(&out);
    coded.SetSerializationDeterministic(true);
    request.SerializeToCodedStream(&coded);
  }
  return Sha256Hex(bytes);
}

std::optional<::tunefarm::v1::BuildResult> ArtifactCache::Find(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(key);
  if (it == entries_.end()) return std::nullopt;
  lru_.splice(lru_.begin(), lru_, it->second.lru);
  ++hits_;
  return it->second.result;
}

void ArtifactCache::Insert(const std::string& key, const ::tunefarm::v1::BuildResult& result) {
  if (!result.error().empty()) return;
  int64_t size = int64_t(result.artifact().size());
  if (size > max_bytes_) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (entries_.count(key)) return;
  lru_.push_front(key);
  entries_[key] = Entry{result, lru_.begin()};
  bytes_ += size;
  while (bytes_ > max_bytes_ && !lru_.empty()) {
    auto victim = entries_.find(lru_.back());
    bytes_ -= int64_t(victim->second.result.artifact().size());
    entries_.erase(victim);
    lru_.pop_back();
  }
}

}  // namespace tunefarm::worker
