// Test helper: commits batches of records to a log database forever and
// prints "ack FIRST COUNT" after each commit returns OK, so a test can kill it
// at any moment and know exactly what was acknowledged.
//
//   tuning_log_writer DB_PATH FIRST_SALT BATCH_SIZE
#include <cstdio>
#include <cstdlib>
#include <string>

#include "search/store_canon.h"
#include "store/tuning_log.h"
#include "tests/server/test_records.h"

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: tuning_log_writer DB FIRST_SALT BATCH_SIZE\n");
    return 2;
  }
  tunefarm::store::TuningLog::Options o;
  o.canon = tunefarm::search::CompilerCanon();
  o.path = argv[1];
  int64_t salt = std::atoll(argv[2]);
  int batch_size = std::atoi(argv[3]);
  auto log = tunefarm::store::TuningLog::Open(o);
  if (!log.ok()) {
    std::fprintf(stderr, "open: %s\n", std::string(log.status().message()).c_str());
    return 1;
  }
  auto workload = tunefarm::testing::Conv2d(16, 16, 14);
  while (true) {
    std::vector<tunefarm::v1::Record> batch;
    for (int i = 0; i < batch_size; ++i) {
      batch.push_back(tunefarm::testing::MakeRecord(workload, tunefarm::testing::kTargetX86,
                                                    1e-5 * (1 + (salt + i) % 97), salt + i));
    }
    auto res = (*log)->CommitRecords(batch);
    if (!res.ok()) {
      std::fprintf(stderr, "commit: %s\n", std::string(res.status().message()).c_str());
      return 1;
    }
    std::printf("ack %lld %d\n", static_cast<long long>(salt), batch_size);
    std::fflush(stdout);
    salt += batch_size;
  }
}
