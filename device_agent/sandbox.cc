#include "device_agent/sandbox.h"

#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/subprocess.h"
#include "device_agent/runner.h"

namespace tunefarm::runner {
namespace {

using Status = SandboxOutcome::Status;

constexpr int kMaxRepeats = 64;

// What the child writes back through the pipe.
struct ChildReport {
  int32_t status;
  int32_t rc;
  int32_t repeats;
  int32_t load_failed;
  double worst_error;
  int64_t bad_index;
  double costs[kMaxRepeats];
};

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// The child's address space may grow by `extra` bytes beyond what it
// inherited (the parent's mappings count toward RLIMIT_AS too).
void LimitAddressSpace(int64_t extra) {
  if (extra <= 0) return;
  long pages = 0;
  if (FILE* f = std::fopen("/proc/self/statm", "r")) {
    if (std::fscanf(f, "%ld", &pages) != 1) pages = 0;
    std::fclose(f);
  }
  rlim_t limit = rlim_t(pages) * rlim_t(sysconf(_SC_PAGESIZE)) + rlim_t(extra);
  rlimit rl{limit, limit};
  setrlimit(RLIMIT_AS, &rl);
}

[[noreturn]] void ChildMain(int fd, const std::string& so,
                            const std::vector<const std::vector<float>*>& args, int64_t n_out,
                            const std::vector<float>& reference, const SandboxOptions& o,
                            float* shared_out) {
  LimitAddressSpace(o.memory_limit_bytes);
  ChildReport rep{};
  rep.status = int32_t(Status::kRuntimeError);
  rep.bad_index = -1;
  auto lib = KernelLibrary::Load(so);
  if (!lib.ok()) {
    rep.load_failed = 1;
  } else {
    std::vector<std::unique_ptr<AlignedBuffer>> bufs;
    std::vector<void*> ptrs;
    for (const std::vector<float>* src : args) {
      auto b = std::make_unique<AlignedBuffer>(int64_t(src->size()));
      std::copy(src->begin(), src->end(), b->data());
      ptrs.push_back(b->data());
      bufs.push_back(std::move(b));
    }
    AlignedBuffer out(n_out);
    std::fill(out.data(), out.data() + n_out, std::nanf(""));
    ptrs.push_back(out.data());
    ThreadPool pool(o.threads);
    rep.rc = (*lib)->Run(ptrs.data(), pool);
    rep.status = int32_t(rep.rc == 0 ? Status::kOk : Status::kRuntimeError);
    if (rep.rc == 0 && !reference.empty()) {
      for (int64_t i = 0; i < n_out; ++i) {
        double e = std::fabs(double(out.data()[i]) - reference[i]) /
                   std::max(1.0, std::fabs(double(reference[i])));
        if (!(e <= o.tolerance)) {  // NaN too
          rep.status = int32_t(Status::kWrongResult);
          rep.worst_error = std::isnan(e) ? INFINITY : e;
          rep.bad_index = i;
          break;
        }
        rep.worst_error = std::max(rep.worst_error, e);
      }
    }
    if (shared_out != nullptr && rep.rc == 0) std::copy(out.data(), out.data() + n_out, shared_out);
    if (rep.status == int32_t(Status::kOk)) {
      double t0 = Now();
      (*lib)->Run(ptrs.data(), pool);  // warm-up
      double once = std::max(1e-7, Now() - t0);
      int repeats =
          std::clamp(int(o.max_timing_s / once), 1, std::clamp(o.repeats, 1, kMaxRepeats));
      int64_t inner = std::max<int64_t>(1, int64_t(o.min_repeat_ms * 1e-3 / repeats / once));
      for (int r = 0; r < repeats; ++r) {
        double s = Now();
        for (int64_t k = 0; k < inner; ++k) (*lib)->Run(ptrs.data(), pool);
        rep.costs[r] = (Now() - s) / double(inner);
      }
      rep.repeats = repeats;
    }
  }
  ssize_t unused = write(fd, &rep, sizeof(rep));
  (void)unused;
  _exit(0);
}

}  // namespace

SandboxOutcome MeasureInSandbox(const std::string& shared_object,
                                const std::vector<const std::vector<float>*>& args, int64_t n_out,
                                const std::vector<float>& reference, const SandboxOptions& options,
                                std::vector<float>* output) {
  SandboxOutcome result;
  const double start = Now();
  if (!reference.empty() && int64_t(reference.size()) != n_out) {
    result.error = absl::StrCat("reference has ", reference.size(), " values, the output ", n_out);
    return result;
  }
  float* shared = nullptr;
  size_t shared_bytes = size_t(std::max<int64_t>(1, n_out)) * sizeof(float);
  if (output != nullptr) {
    void* m =
        mmap(nullptr, shared_bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) {
      result.error = "mmap of the output buffer failed";
      return result;
    }
    shared = static_cast<float*>(m);
  }
  auto unmap = [&] {
    if (shared != nullptr) munmap(shared, shared_bytes);
  };
  int fds[2];
  if (pipe(fds) != 0) {
    unmap();
    result.error = "pipe failed";
    return result;
  }
  pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    ChildMain(fds[1], shared_object, args, n_out, reference, options, shared);
  }
  close(fds[1]);
  if (pid < 0) {
    close(fds[0]);
    unmap();
    result.error = "fork failed";
    return result;
  }
  ChildReport rep{};
  size_t got = 0;
  const double deadline = start + options.time_limit_s;
  bool timed_out = false;
  while (got < sizeof(rep)) {
    double left = deadline - Now();
    if (left <= 0) {
      timed_out = true;
      break;
    }
    pollfd p{fds[0], POLLIN, 0};
    if (poll(&p, 1, int(std::ceil(left * 1000))) <= 0) continue;
    ssize_t n = read(fds[0], reinterpret_cast<char*>(&rep) + got, sizeof(rep) - got);
    if (n <= 0) break;
    got += size_t(n);
  }
  close(fds[0]);
  if (timed_out) kill(pid, SIGKILL);
  int wstatus = 0;
  waitpid(pid, &wstatus, 0);
  result.run_s = Now() - start;
  if (timed_out) {
    result.status = Status::kTimeout;
    result.error = absl::StrFormat("no result within %.2f s", options.time_limit_s);
  } else if (got < sizeof(rep)) {
    result.status = Status::kRuntimeError;
    result.error = absl::StrCat("kernel process ", DescribeWaitStatus(wstatus));
  } else if (rep.load_failed) {
    result.status = Status::kRuntimeError;
    result.error = "the kernel library did not load";
  } else {
    result.status = Status(rep.status);
    if (result.status == Status::kWrongResult) {
      result.error =
          absl::StrCat("output ", rep.bad_index, " off by ", rep.worst_error, " (relative)");
    } else if (result.status == Status::kRuntimeError) {
      result.error = absl::StrCat("kernel returned ", rep.rc);
    } else {
      result.costs.assign(rep.costs, rep.costs + std::clamp(rep.repeats, 1, kMaxRepeats));
      std::vector<double> sorted = result.costs;
      std::sort(sorted.begin(), sorted.end());
      result.seconds = sorted[sorted.size() / 2];
    }
  }
  if (output != nullptr && result.status != Status::kTimeout && got == sizeof(rep) && rep.rc == 0 &&
      !rep.load_failed) {
    output->assign(shared, shared + n_out);
  }
  unmap();
  return result;
}

}  // namespace tunefarm::runner
