#include "device_agent/runtime/runner.h"

#include <dlfcn.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <thread>

#include "absl/strings/str_cat.h"

namespace tunefarm::runtime {

// Kernel scratch buffers (padding passes, intermediate stages), kept for the
// next call of the same size instead of going back to the C library: a
// multi-megabyte block freed to glibc is often returned to the system, and
// the next call then faults every page in again (docs/tuning-guide.md).
class ScratchCache {
 public:
  ~ScratchCache() {
    for (auto& [size, p] : idle_) ::free(p);
  }
  void* Alloc(int64_t bytes) {
    const size_t size = (static_cast<size_t>(std::max<int64_t>(bytes, 1)) + 63) / 64 * 64;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = idle_.find(size);
      if (it != idle_.end()) {
        void* p = it->second;
        idle_.erase(it);
        idle_bytes_ -= size;
        live_[p] = size;
        return p;
      }
    }
    void* p = aligned_alloc(64, size + AlignedBuffer::kTailBytes);
    if (p == nullptr) return nullptr;
    std::lock_guard<std::mutex> lock(mu_);
    live_[p] = size;
    return p;
  }
  void Free(void* p) {
    if (p == nullptr) return;
    std::lock_guard<std::mutex> lock(mu_);
    auto it = live_.find(p);
    if (it == live_.end()) return;  // not ours: never freed twice
    const size_t size = it->second;
    live_.erase(it);
    if (idle_bytes_ + size > kMaxIdleBytes) {
      ::free(p);
      return;
    }
    idle_.emplace(size, p);
    idle_bytes_ += size;
  }

 private:
  static constexpr size_t kMaxIdleBytes = size_t(1) << 30;
  std::mutex mu_;
  std::multimap<size_t, void*> idle_;
  std::map<void*, size_t> live_;
  size_t idle_bytes_ = 0;
};

namespace {
uint64_t FloatMode() {
#if defined(__x86_64__) || defined(__i386__)
  return __builtin_ia32_stmxcsr();
#elif defined(__aarch64__)
  uint64_t fpcr;
  asm volatile("mrs %0, fpcr" : "=r"(fpcr));
  return fpcr;
#else
  return 0;
#endif
}

void SetFloatMode(uint64_t mode) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_ldmxcsr(static_cast<unsigned>(mode));
#elif defined(__aarch64__)
  asm volatile("msr fpcr, %0" : : "r"(mode));
#else
  (void)mode;
#endif
}

#if defined(__x86_64__) || defined(__i386__)
constexpr uint64_t kFlushBits = 0x8040;  // MXCSR FTZ (bit 15) and DAZ (bit 6)
#elif defined(__aarch64__)
constexpr uint64_t kFlushBits = uint64_t(1) << 24;  // FPCR FZ
#else
constexpr uint64_t kFlushBits = 0;
#endif
}  // namespace

FlushDenormals::FlushDenormals() : saved_(FloatMode()) { SetFloatMode(saved_ | kFlushBits); }
FlushDenormals::~FlushDenormals() { SetFloatMode(saved_); }

// A pause for spin-wait loops.
inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// Spins until `done()` or `limit` passes; whether done() held.
template <typename F>
bool SpinUntil(F done, std::chrono::microseconds limit) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (true) {
    for (int i = 0; i < 64; ++i) {
      if (done()) return true;
      CpuRelax();
    }
    if (std::chrono::steady_clock::now() >= end) return false;
  }
}

// Workers wait for a new generation; the caller works too, and the last
// worker out wakes the caller. Both sides spin for a while before sleeping:
// a model runs kernels back to back, and waking a sleeping thread costs
// more than many small kernels take (docs/tuning-guide.md).
//
// The iterations are split into one block per thread (the caller's first),
// each a few chunks: a thread runs its own block's chunks from the front,
// then takes what is left of the others' from the back. When every thread
// keeps up, the same iterations run on the same core every time, so what a
// kernel's part reads (its slice of the weights, of the input) stays in that
// core's cache between runs; chunks handed out first-come, first-served
// moved a small model's weights between the cores' caches on every run
// (docs/tuning-guide.md).
struct ThreadPool::Impl {
  static constexpr std::chrono::microseconds kSpin{200};
  static constexpr int64_t kChunksPerThread = 4;
  // A block's chunks still to run: [front, back), packed in one word so
  // that its owner (front) and others (back) claim them with one CAS.
  struct alignas(64) Block {
    std::atomic<uint64_t> range{0};
  };
  static uint64_t Pack(uint32_t front, uint32_t back) { return uint64_t(front) << 32 | back; }

  std::mutex mu;
  std::condition_variable work_cv, done_cv;
  std::atomic<uint64_t> generation{0};  // written under mu
  bool stop = false;
  // Set under mu once the caller has run out of chunks: a worker that wakes
  // after it takes no part, so the caller never waits on a worker that has
  // not started (one another process holds the core from, say).
  bool closed = false;
  int64_t n = 0, chunks = 1;
  int workers = 1;
  void* closure = nullptr;
  TFParallelBody body = nullptr;
  std::unique_ptr<Block[]> blocks;
  std::atomic<int> busy{0};  // workers that joined this generation, not yet done
  std::vector<std::thread> threads;
  ScratchCache scratch;

  // Claims a chunk of block `b`, its front when `own`; -1 when none is left.
  int64_t Claim(int b, bool own) {
    uint64_t r = blocks[size_t(b)].range.load(std::memory_order_relaxed);
    while (true) {
      const uint32_t front = uint32_t(r >> 32), back = uint32_t(r);
      if (front >= back) return -1;
      const uint64_t next = own ? Pack(front + 1, back) : Pack(front, back - 1);
      if (blocks[size_t(b)].range.compare_exchange_weak(r, next, std::memory_order_acq_rel))
        return own ? front : back - 1;
    }
  }

  void RunChunk(int64_t c) { body(closure, c * n / chunks, (c + 1) * n / chunks); }

  void Work(int self) {
    for (int64_t c; (c = Claim(self, true)) >= 0;) RunChunk(c);
    for (int k = 1; k < workers; ++k) {
      const int b = (self + k) % workers;
      for (int64_t c; (c = Claim(b, false)) >= 0;) RunChunk(c);
    }
  }

  void Loop(int self) {
    const FlushDenormals flush;
    uint64_t seen = 0;
    while (true) {
      SpinUntil([&] { return generation.load(std::memory_order_acquire) != seen; }, kSpin);
      {
        std::unique_lock<std::mutex> lock(mu);
        work_cv.wait(lock, [&] { return stop || generation.load() != seen; });
        if (stop) return;
        seen = generation.load();
        if (closed) continue;
        busy.fetch_add(1);
      }
      Work(self);
      if (busy.fetch_sub(1) == 1) {
        std::lock_guard<std::mutex> lock(mu);
        done_cv.notify_all();
      }
    }
  }

  int32_t ParallelFor(int64_t count, void* c, TFParallelBody b) {
    if (count <= 0) return 0;
    if (threads.empty() || count == 1) {
      b(c, 0, count);
      return 0;
    }
    {
      std::lock_guard<std::mutex> lock(mu);
      n = count;
      chunks = std::min<int64_t>(count, int64_t(workers) * kChunksPerThread);
      for (int t = 0; t < workers; ++t) {
        blocks[size_t(t)].range.store(
            Pack(uint32_t(t * chunks / workers), uint32_t((t + 1) * chunks / workers)),
            std::memory_order_relaxed);
      }
      closure = c;
      body = b;
      busy.store(0);
      closed = false;
      generation.fetch_add(1);
    }
    work_cv.notify_all();
    Work(0);
    {
      std::lock_guard<std::mutex> lock(mu);
      closed = true;
    }
    if (SpinUntil([&] { return busy.load(std::memory_order_acquire) == 0; }, kSpin)) return 0;
    std::unique_lock<std::mutex> lock(mu);
    done_cv.wait(lock, [&] { return busy.load() == 0; });
    return 0;
  }
};

ThreadPool::ThreadPool(int num_threads) : impl_(new Impl), num_threads_(std::max(1, num_threads)) {
  impl_->workers = num_threads_;
  impl_->blocks = std::make_unique<Impl::Block[]>(size_t(num_threads_));
  for (int i = 1; i < num_threads_; ++i) impl_->threads.emplace_back([this, i] { impl_->Loop(i); });
  runtime_.abi_version = TF_KERNEL_ABI_VERSION;
  runtime_.num_threads = num_threads_;
  runtime_.ctx = this;
  runtime_.parallel_for = [](void* ctx, int64_t n, void* closure, TFParallelBody body) -> int32_t {
    auto* self = static_cast<ThreadPool*>(ctx);
    return self->impl_->ParallelFor(n, closure, body);
  };
  runtime_.alloc = [](void* ctx, int64_t bytes) -> void* {
    return static_cast<ThreadPool*>(ctx)->impl_->scratch.Alloc(bytes);
  };
  runtime_.free = [](void* ctx, void* p) { static_cast<ThreadPool*>(ctx)->impl_->scratch.Free(p); };
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->stop = true;
  }
  impl_->work_cv.notify_all();
  for (std::thread& t : impl_->threads) t.join();
}

absl::StatusOr<std::unique_ptr<KernelLibrary>> KernelLibrary::Load(const std::string& so) {
  const char* tmp = getenv("TMPDIR");
  std::string path = std::string(tmp ? tmp : "/tmp") + "/tunefarm-kernel-XXXXXX.so";
  int fd = mkstemps(path.data(), 3);
  if (fd < 0) return absl::InternalError(absl::StrCat("mkstemps: ", std::strerror(errno)));
  bool ok = write(fd, so.data(), so.size()) == static_cast<ssize_t>(so.size());
  close(fd);
  if (!ok) {
    unlink(path.c_str());
    return absl::InternalError("cannot write the kernel to a temporary file");
  }
  absl::StatusOr<std::unique_ptr<KernelLibrary>> lib = Open(path);
  unlink(path.c_str());  // the mapping stays valid
  return lib;
}

absl::StatusOr<std::unique_ptr<KernelLibrary>> KernelLibrary::Open(const std::string& path) {
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("dlopen: ", dlerror()));
  }
  void* sym = dlsym(handle, TF_KERNEL_ENTRY);
  if (sym == nullptr) {
    dlclose(handle);
    return absl::InvalidArgumentError(absl::StrCat("no ", TF_KERNEL_ENTRY, " in the shared object"));
  }
  std::unique_ptr<KernelLibrary> lib(new KernelLibrary());
  lib->handle_ = handle;
  lib->entry_ = reinterpret_cast<TFKernelFn>(sym);
  return lib;
}

KernelLibrary::~KernelLibrary() {
  if (handle_) dlclose(handle_);
}

AlignedBuffer::AlignedBuffer(int64_t count) : count_(count) {
  size_t bytes = (static_cast<size_t>(std::max<int64_t>(count, 1)) * 4 + 63) / 64 * 64;
  data_ = static_cast<float*>(aligned_alloc(64, bytes + kTailBytes));
}

AlignedBuffer::~AlignedBuffer() { free(data_); }

}  // namespace tunefarm::runtime
