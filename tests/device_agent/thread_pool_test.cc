// The runtime table a kernel is handed (runtime::ThreadPool): every index of a
// parallel loop runs once, and scratch buffers are 64-byte aligned, distinct
// while live, and reused by the next call of the same size (a block freed to
// the C library is often returned to the system and faulted in again), and
// buffers have mapped memory past their end.
#include <malloc.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <set>
#include <thread>
#include <vector>

#include "device_agent/runtime/runner.h"
#include "gtest/gtest.h"

namespace tunefarm::runtime {
namespace {

TEST(ThreadPool, ParallelForRunsEveryIndexOnce) {
  ThreadPool pool(2);
  const TFRuntime* rt = pool.runtime();
  std::vector<std::atomic<int>> hits(1000);
  TFParallelBody body = [](void* closure, int64_t begin, int64_t end) {
    auto* h = static_cast<std::vector<std::atomic<int>>*>(closure);
    for (int64_t i = begin; i < end; ++i) (*h)[i]++;
  };
  ASSERT_EQ(rt->parallel_for(rt->ctx, int64_t(hits.size()), &hits, body), 0);
  for (size_t i = 0; i < hits.size(); ++i) ASSERT_EQ(hits[i].load(), 1) << i;
}

// Loops back to back (workers still spinning from the last one) and after
// pauses long enough for them to sleep: every index of every loop once, the
// caller never returning before a loop is done, no loop lost; with more
// threads than cores (8 on 2), blocks of workers not yet scheduled are
// run by the others.
TEST(ThreadPool, BackToBackAndAfterSleepEveryLoopCompletes) {
  for (int threads : {2, 3, 8}) {
    ThreadPool pool(threads);
    const TFRuntime* rt = pool.runtime();
    struct Loop {
      std::vector<std::atomic<int>> hits = std::vector<std::atomic<int>>(37);
    };
    TFParallelBody body = [](void* closure, int64_t begin, int64_t end) {
      auto* l = static_cast<Loop*>(closure);
      for (int64_t i = begin; i < end; ++i) l->hits[size_t(i)]++;
    };
    for (int round = 0; round < 3000; ++round) {
      Loop l;
      const int64_t n = 1 + round % 37;
      ASSERT_EQ(rt->parallel_for(rt->ctx, n, &l, body), 0);
      for (int64_t i = 0; i < 37; ++i)
        ASSERT_EQ(l.hits[size_t(i)].load(), i < n ? 1 : 0) << "round " << round << " index " << i;
      if (round % 500 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
}

TEST(ThreadPool, ScratchIsAlignedDistinctAndReusedBySize) {
  ThreadPool pool(1);
  const TFRuntime* rt = pool.runtime();
  const int64_t big = 5 << 20, small = 1000;
  void* a = rt->alloc(rt->ctx, big);
  void* b = rt->alloc(rt->ctx, big);
  void* c = rt->alloc(rt->ctx, small);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  ASSERT_NE(c, nullptr);
  std::set<void*> live = {a, b, c};
  EXPECT_EQ(live.size(), 3u) << "live blocks must not overlap";
  for (void* p : live) EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u);
  std::memset(a, 1, big);  // the whole block is usable
  std::memset(b, 2, big);
  std::memset(c, 3, small);
  rt->free(rt->ctx, a);
  // The next block of that size is the one just freed; another size is not.
  void* d = rt->alloc(rt->ctx, small * 2);
  EXPECT_NE(d, a);
  void* e = rt->alloc(rt->ctx, big);
  EXPECT_EQ(e, a);
  for (void* p : {b, c, d, e}) rt->free(rt->ctx, p);
  rt->free(rt->ctx, nullptr);  // a no-op, as free(NULL) is
}

// Kernel buffers and scratch blocks carry AlignedBuffer::kTailBytes of
// mapped memory past their end (a masked vector straddling the end keeps
// its off lanes there): a 5 MB block, which malloc maps alone, included.
TEST(ThreadPool, BuffersHaveMappedMemoryPastTheirEnd) {
  for (int64_t count : {int64_t(1), int64_t(1000), int64_t(5 << 20) / 4}) {
    AlignedBuffer buf(count);
    ASSERT_NE(buf.data(), nullptr);
    EXPECT_GE(malloc_usable_size(buf.data()), size_t(count) * 4 + AlignedBuffer::kTailBytes);
    volatile char* past = reinterpret_cast<char*>(buf.data() + count);
    past[AlignedBuffer::kTailBytes - 1] = 1;  // writable: would fault on an unmapped page
  }
  ThreadPool pool(1);
  const TFRuntime* rt = pool.runtime();
  const int64_t big = 5 << 20;
  void* a = rt->alloc(rt->ctx, big);
  ASSERT_NE(a, nullptr);
  EXPECT_GE(malloc_usable_size(a), size_t(big) + AlignedBuffer::kTailBytes);
  rt->free(rt->ctx, a);
}

}  // namespace
}  // namespace tunefarm::runtime
