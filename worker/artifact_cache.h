// ArtifactCache: the worker's content-addressed build cache. The key is the
// SHA-256 of the BuildRequest's deterministic bytes (workload, target,
// schedule, artifact kind), so the same candidate asked for twice (the
// default schedule every job builds as its reference, a re-issued lease, a
// second job on the same workload) is built once. Bounded by bytes, least
// recently used out first. Failed builds are not cached (a retry may be on
// a fixed worker). Thread safe.
#pragma once

#include <cstdint>
#include <list>
#include <map>
#include <mutex>
#include <optional>
#include <string>

#include "tunefarm/v1/farm.pb.h"

namespace tunefarm::worker {

class ArtifactCache {
 public:
  explicit ArtifactCache(int64_t max_bytes) : max_bytes_(max_bytes) {}

  static std::string Key(const ::tunefarm::v1::BuildRequest& request);

  std::optional<::tunefarm::v1::BuildResult> Find(const std::string& key);
  void Insert(const std::string& key, const ::tunefarm::v1::BuildResult& result);

  int64_t hits() const { return hits_; }
  int64_t bytes() const { return bytes_; }

 private:
  struct Entry {
    ::tunefarm::v1::BuildResult result;
    std::list<std::string>::iterator lru;
  };
  const int64_t max_bytes_;
  std::mutex mu_;
  std::map<std::string, Entry> entries_;
  std::list<std::string> lru_;  // front: most recent
  int64_t bytes_ = 0, hits_ = 0;
};

}  // namespace tunefarm::worker
