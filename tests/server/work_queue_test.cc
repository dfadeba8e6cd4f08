// The farm's work queue: matching work to sessions, fairness across jobs,
// leases that expire and come back, bounded retries, cancellation, late
// results. The clock is injected, so expiry needs no waiting.
#include "server/work_queue.h"

#include <memory>

#include "gtest/gtest.h"

namespace tunefarm::server {
namespace {

struct Fixture {
  absl::Time now = absl::FromUnixSeconds(1000000);
  std::unique_ptr<WorkQueue> q;
  // What each item's done callback received, by its tag.
  std::map<std::string, std::vector<absl::StatusOr<v1::ReportResultRequest>>> done;

  Fixture() {
    WorkQueue::Options o;
    o.lease_timeout = absl::Seconds(10);
    o.max_attempts = 2;
    o.now = [this] { return now; };
    q = std::make_unique<WorkQueue>(o);
  }
  void Add(const std::string& queue, int64_t job, int priority, const std::string& tag) {
    WorkQueue::Item item;
    item.queue = queue;
    item.job_id = job;
    item.priority = priority;
    item.work.mutable_measure()->set_artifact_sha256(tag);
    item.done = [this, tag](absl::StatusOr<v1::ReportResultRequest> r) { done[tag].push_back(r); };
    q->Submit(std::move(item));
  }
  // The tag of the next lease for `session`, "" when none.
  std::string Take(const std::string& session, v1::WorkLease* lease = nullptr) {
    auto l = q->Next(session, absl::ZeroDuration());
    if (!l) return "";
    if (lease) *lease = *l;
    return l->measure().artifact_sha256();
  }
  absl::StatusOr<bool> Report(const std::string& session, const v1::WorkLease& lease) {
    v1::ReportResultRequest r;
    r.set_lease_id(lease.lease_id());
    r.mutable_measure()->set_status(v1::MEASURE_STATUS_OK);
    return q->Complete(session, r);
  }
};

// A measurement that confirms another device's timing never goes back to
// that device, even when it is the only one asking; it waits for another.
TEST(WorkQueue, ExcludedDeviceNeverTakesTheItem) {
  Fixture f;
  const std::string q = WorkQueue::MeasureQueue("x86");
  f.q->OpenSession("s-a", "board-a", {q}, 2);
  WorkQueue::Item item;
  item.queue = q;
  item.job_id = 1;
  item.exclude_device = "board-a";
  item.work.mutable_measure()->set_artifact_sha256("confirm");
  item.done = [&f](absl::StatusOr<v1::ReportResultRequest> r) { f.done["confirm"].push_back(r); };
  f.q->Submit(std::move(item));
  f.Add(q, 1, 0, "plain");
  EXPECT_FALSE(f.q->HasOtherTaker(q, "board-a"));
  EXPECT_EQ(f.Take("s-a"), "plain");
  EXPECT_EQ(f.Take("s-a"), "");
  f.q->OpenSession("s-b", "board-b", {q}, 1);
  EXPECT_TRUE(f.q->HasOtherTaker(q, "board-a"));
  v1::WorkLease lease;
  EXPECT_EQ(f.Take("s-b", &lease), "confirm");
  ASSERT_TRUE(f.Report("s-b", lease).ok());
  ASSERT_EQ(f.done["confirm"].size(), 1u);
  EXPECT_TRUE(f.done["confirm"][0].ok());
}

TEST(WorkQueue, MatchesKeysAndIsFairAcrossJobs) {
  Fixture f;
  const std::string orin = WorkQueue::MeasureQueue("jetson-orin-nano");
  for (int i = 0; i < 4; ++i) f.Add(orin, 1, 0, "a" + std::to_string(i));
  for (int i = 0; i < 2; ++i) f.Add(orin, 2, 0, "b" + std::to_string(i));
  f.Add(WorkQueue::BuildQueue("x86_64-linux-gnu"), 3, 9, "build");
  f.q->OpenSession("s1", "board-1", {orin}, 1);
  f.q->OpenSession("w1", "worker-1", {WorkQueue::BuildQueue("aarch64-linux-gnu")}, 4);
  EXPECT_TRUE(f.q->HasTaker(orin));
  EXPECT_FALSE(f.q->HasTaker(WorkQueue::BuildQueue("x86_64-linux-gnu")));
  EXPECT_EQ(f.Take("w1"), "");  // no aarch64 builds queued; x86 is not its
  std::vector<std::string> order;
  for (int i = 0; i < 6; ++i) {
    v1::WorkLease lease;
    order.push_back(f.Take("s1", &lease));
    EXPECT_EQ(f.Take("s1"), "") << "max_in_flight 1";
    EXPECT_GT(lease.job_id(), 0);
    ASSERT_TRUE(f.Report("s1", lease).ok());
  }
  // The two jobs alternate while both have work; a job's items keep their order.
  EXPECT_EQ(order, (std::vector<std::string>{"a0", "b0", "a1", "b1", "a2", "a3"}));
  for (const std::string& t : order) EXPECT_EQ(f.done[t].size(), 1u) << t;
  // Higher priority first.
  f.Add(orin, 4, 0, "low");
  f.Add(orin, 5, 7, "high");
  EXPECT_EQ(f.Take("s1"), "high");
}

TEST(WorkQueue, ExpiredLeaseGoesToAnotherDeviceAndLateResultCounts) {
  Fixture f;
  const std::string key = WorkQueue::MeasureQueue("x86");
  f.Add(key, 1, 0, "c");
  f.q->OpenSession("s1", "board-1", {key}, 1);
  f.q->OpenSession("s2", "board-2", {key}, 1);
  v1::WorkLease first, second;
  ASSERT_EQ(f.Take("s1", &first), "c");
  // Heartbeats keep a lease alive however long the work takes.
  for (int i = 0; i < 5; ++i) {
    f.now += absl::Seconds(8);
    EXPECT_TRUE(f.q->Heartbeat("s1", {first.lease_id()}).empty());
  }
  EXPECT_EQ(f.Take("s2"), "");
  // s1 goes silent: its lease expires, and s2 gets the work.
  f.now += absl::Seconds(11);
  ASSERT_EQ(f.Take("s2", &second), "c");
  EXPECT_NE(second.lease_id(), first.lease_id());
  EXPECT_EQ(f.q->Heartbeat("s1", {first.lease_id()}),
            std::vector<std::string>{first.lease_id()});  // drop it
  EXPECT_TRUE(f.done["c"].empty());
  // s1's late result arrives first: it completes the work once; s2's copy is revoked.
  auto late = f.Report("s1", first);
  ASSERT_TRUE(late.ok()) << late.status();
  EXPECT_FALSE(*late);
  ASSERT_EQ(f.done["c"].size(), 1u);
  EXPECT_TRUE(f.done["c"][0].ok());
  EXPECT_EQ(f.q->Heartbeat("s2", {second.lease_id()}), std::vector<std::string>{second.lease_id()});
  EXPECT_TRUE(absl::IsNotFound(f.Report("s2", second).status()));
  EXPECT_EQ(f.done["c"].size(), 1u);
  EXPECT_EQ(f.q->LeasesOut(), 0);
}

TEST(WorkQueue, WorkThatKillsTwoDevicesEndsWithAnError) {
  Fixture f;
  const std::string key = WorkQueue::MeasureQueue("x86");
  f.Add(key, 1, 0, "bad");
  f.q->OpenSession("s1", "board-1", {key}, 1);
  ASSERT_EQ(f.Take("s1"), "bad");
  f.q->CloseSession("s1");  // the agent died
  EXPECT_TRUE(f.done["bad"].empty());
  EXPECT_EQ(f.q->QueuedByKey()[key], 1);
  f.q->OpenSession("s2", "board-2", {key}, 1);
  ASSERT_EQ(f.Take("s2"), "bad");
  f.q->CloseSession("s2");
  ASSERT_EQ(f.done["bad"].size(), 1u);
  EXPECT_TRUE(absl::IsAborted(f.done["bad"][0].status()));
  EXPECT_NE(std::string(f.done["bad"][0].status().message()).find("lost 2 times"),
            std::string::npos)
      << f.done["bad"][0].status();
  EXPECT_TRUE(f.q->QueuedByKey().empty());
}

TEST(WorkQueue, CancelDropsQueuedAndLeasedWorkOfTheJobOnly) {
  Fixture f;
  const std::string key = WorkQueue::MeasureQueue("x86");
  f.Add(key, 1, 0, "j1-a");
  f.Add(key, 1, 0, "j1-b");
  f.Add(key, 2, 0, "j2");
  f.q->OpenSession("s1", "board-1", {key}, 1);
  v1::WorkLease lease;
  ASSERT_EQ(f.Take("s1", &lease), "j1-a");
  f.q->CancelJob(1);
  EXPECT_TRUE(absl::IsCancelled(f.done["j1-a"].at(0).status()));
  EXPECT_TRUE(absl::IsCancelled(f.done["j1-b"].at(0).status()));
  EXPECT_TRUE(f.done["j2"].empty());
  EXPECT_EQ(f.q->Heartbeat("s1", {lease.lease_id()}), std::vector<std::string>{lease.lease_id()});
  EXPECT_TRUE(absl::IsNotFound(f.Report("s1", lease).status()));
  EXPECT_EQ(f.Take("s1"), "j2");
}

TEST(WorkQueue, ALeaseIsAnsweredOnlyByItsSession) {
  Fixture f;
  const std::string key = WorkQueue::MeasureQueue("x86");
  f.Add(key, 1, 0, "x");
  f.q->OpenSession("s1", "board-1", {key}, 1);
  f.q->OpenSession("s2", "board-2", {key}, 1);
  v1::WorkLease lease;
  ASSERT_EQ(f.Take("s1", &lease), "x");
  EXPECT_TRUE(absl::IsPermissionDenied(f.Report("s2", lease).status()));
  v1::WorkLease forged;
  forged.set_lease_id("L999");
  EXPECT_TRUE(absl::IsNotFound(f.Report("s1", forged).status()));
  EXPECT_TRUE(f.Report("s1", lease).ok());
}

TEST(WorkQueue, ALateResultCountsOnlyFromTheDeviceThatHeldTheLease) {
  Fixture f;
  const std::string key = WorkQueue::MeasureQueue("x86");
  f.Add(key, 1, 0, "x");
  f.q->OpenSession("s1", "board-1", {key}, 1);
  v1::WorkLease lease;
  ASSERT_EQ(f.Take("s1", &lease), "x");
  // Lease ids are 128 random bits, not a counter.
  EXPECT_EQ(lease.lease_id().size(), 33u) << lease.lease_id();
  f.q->CloseSession("s1");  // board-1's stream broke; the work is queued again
  ASSERT_EQ(f.q->QueuedByKey()[key], 1);
  // Another device cannot answer the lost lease, open session or not.
  f.q->OpenSession("s2", "board-2", {key}, 1);
  EXPECT_TRUE(absl::IsPermissionDenied(f.Report("s2", lease).status()));
  EXPECT_TRUE(absl::IsPermissionDenied(f.Report("forged", lease).status()));
  EXPECT_TRUE(f.done["x"].empty());
  // board-1, registered again under a new session, still can.
  f.q->OpenSession("s3", "board-1", {key}, 1);
  auto late = f.Report("s3", lease);
  ASSERT_TRUE(late.ok()) << late.status();
  EXPECT_FALSE(*late);
  ASSERT_EQ(f.done["x"].size(), 1u);
  EXPECT_TRUE(f.q->QueuedByKey().empty());
}

// A device that went silent past its lease (a link that stops forwarding)
// does not get the work straight back while another device of the key
// could take it; alone, it does.
TEST(WorkQueue, ExpiredWorkGoesToAnotherDeviceNotBackToTheSilentOne) {
  Fixture f;
  const std::string key = WorkQueue::MeasureQueue("x86");
  f.Add(key, 1, 0, "a");
  f.q->OpenSession("s1", "board-1", {key}, 1);
  f.q->OpenSession("s2", "board-2", {key}, 1);
  v1::WorkLease first;
  ASSERT_EQ(f.Take("s1", &first), "a");
  f.Add(key, 1, 0, "b");
  v1::WorkLease b;
  ASSERT_EQ(f.Take("s2", &b), "b");  // board-2 busy
  f.now += absl::Seconds(11);        // board-1 silent past its lease
  f.q->Heartbeat("s2", {b.lease_id()});
  f.q->Expire();
  ASSERT_EQ(f.q->QueuedByKey()[key], 1);
  // board-1's link is back: it asks again and gets nothing while board-2
  // serves the key; board-2, once free, gets "a".
  EXPECT_EQ(f.Take("s1"), "");
  ASSERT_TRUE(f.Report("s2", b).ok());
  EXPECT_EQ(f.Take("s2"), "a");
  // Alone on the key, a device does get back work it lost.
  f.Add(key, 1, 0, "c");
  v1::WorkLease c;
  ASSERT_EQ(f.Take("s1", &c), "c");
  f.q->CloseSession("s2");
  f.now += absl::Seconds(11);
  f.q->Expire();
  EXPECT_EQ(f.Take("s1"), "c");
}

}  // namespace
}  // namespace tunefarm::server
