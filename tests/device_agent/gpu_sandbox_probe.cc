// gpu_sandbox_probe: what the CUDA driver needs of the GPU runner's
// confinement (confine.h), for a machine where GPU runs fail in it.
// scripts/gpu-checks.sh runs it; by hand: gpu_sandbox_probe [open|confined].
// It starts the driver (cuInit, device 0's context), allocates, copies and
// frees, and prints: the threads after each step (open), whether each
// step worked, a system call the filter refused, and the files the driver
// tried to open, list or test: all of them (open), or those it could not
// (confined). libc's calls are interposed here, in the executable, so the
// driver's calls come through them.
#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <string>

#include "device_agent/runtime/confine.h"
#include "device_agent/runtime/cuda_driver.h"

namespace {

char g_failed[160][160];
int g_n_failed = 0;
bool g_all = false;  // note the files opened too (mode open)

void Note(const char* call, const char* path, int err) {
  if (g_n_failed >= 160 || path == nullptr || (err == 0 && !g_all)) return;
  std::snprintf(g_failed[g_n_failed++], sizeof(g_failed[0]), "%s %s: %s", call, path,
                err == 0 ? "ok" : std::strerror(err));
}

template <typename Fn>
Fn Next(const char* name) {
  return reinterpret_cast<Fn>(dlsym(RTLD_NEXT, name));
}

int Threads() {
  FILE* f = std::fopen("/proc/self/status", "r");
  if (f == nullptr) return -1;
  char line[256];
  int n = -1;
  while (std::fgets(line, sizeof line, f)) {
    if (std::sscanf(line, "Threads: %d", &n) == 1) break;
  }
  std::fclose(f);
  return n;
}

void OnRefused(long nr) {
  char b[96];
  int n = std::snprintf(b, sizeof b, "refused system call %ld (%s)\n", nr,
                        tunefarm::runtime::SyscallName(nr));
  if (n > 0) (void)!write(1, b, size_t(n));
}

}  // namespace

extern "C" {
#define TF_OPEN_LIKE(name)                                          \
  int name(const char* path, int flags, ...) {                      \
    static auto real = Next<int (*)(const char*, int, ...)>(#name); \
    va_list ap;                                                     \
    va_start(ap, flags);                                            \
    int mode = va_arg(ap, int);                                     \
    va_end(ap);                                                     \
    int r = real(path, flags, mode);                                \
    Note(#name, path, r < 0 ? errno : 0);                           \
    return r;                                                       \
  }
TF_OPEN_LIKE(open)
TF_OPEN_LIKE(open64)
#undef TF_OPEN_LIKE
int openat(int dir, const char* path, int flags, ...) {
  static auto real = Next<int (*)(int, const char*, int, ...)>("openat");
  va_list ap;
  va_start(ap, flags);
  int mode = va_arg(ap, int);
  va_end(ap);
  int r = real(dir, path, flags, mode);
  Note("openat", path, r < 0 ? errno : 0);
  return r;
}
FILE* fopen(const char* path, const char* mode) {
  static auto real = Next<FILE* (*)(const char*, const char*)>("fopen");
  FILE* f = real(path, mode);
  Note("fopen", path, f == nullptr ? errno : 0);
  return f;
}
FILE* fopen64(const char* path, const char* mode) {
  static auto real = Next<FILE* (*)(const char*, const char*)>("fopen64");
  FILE* f = real(path, mode);
  Note("fopen64", path, f == nullptr ? errno : 0);
  return f;
}
int access(const char* path, int mode) {
  static auto real = Next<int (*)(const char*, int)>("access");
  int r = real(path, mode);
  Note("access", path, r < 0 ? errno : 0);
  return r;
}
int stat(const char* path, struct stat* st) {
  static auto real = Next<int (*)(const char*, struct stat*)>("stat");
  int r = real(path, st);
  Note("stat", path, r < 0 ? errno : 0);
  return r;
}
int stat64(const char* path, struct stat64* st) {
  static auto real = Next<int (*)(const char*, struct stat64*)>("stat64");
  int r = real(path, st);
  Note("stat64", path, r < 0 ? errno : 0);
  return r;
}
DIR* opendir(const char* path) {
  static auto real = Next<DIR* (*)(const char*)>("opendir");
  DIR* d = real(path);
  Note("opendir", path, d == nullptr ? errno : 0);
  return d;
}
ssize_t readlink(const char* path, char* buf, size_t n) {
  static auto real = Next<ssize_t (*)(const char*, char*, size_t)>("readlink");
  ssize_t r = real(path, buf, n);
  Note("readlink", path, r < 0 ? errno : 0);
  return r;
}
}

int main(int argc, char** argv) {
  using tunefarm::runtime::CudaDriver;
  const bool confined = argc > 1 && std::strcmp(argv[1], "confined") == 0;
  g_all = !confined;
  setenv("CUDA_CACHE_DISABLE", "1", 1);
  CudaDriver::Preload();
  std::printf("mode: %s; threads at start: %d\n", confined ? "confined" : "open", Threads());
  std::string started = "not started";
  const CudaDriver* d = nullptr;
  auto start = [&] {
    absl::StatusOr<const CudaDriver*> got = CudaDriver::Get();
    if (!got.ok()) {
      started = std::string(got.status().message());
      return;
    }
    if (!confined) std::printf("threads after cuInit: %d\n", Threads());
    absl::StatusOr<CudaDriver::CUdevice> dev = (*got)->RetainDevice0();
    if (!dev.ok()) {
      started = std::string(dev.status().message());
      return;
    }
    if (!confined) std::printf("threads after the context: %d\n", Threads());
    d = *got;
    started = "ok";
  };
  if (confined) {
    tunefarm::runtime::ConfineOptions o;
    o.gpu = true;
    o.on_violation = OnRefused;
    o.start_threads = start;
    std::fflush(stdout);
    absl::StatusOr<tunefarm::runtime::Confined> c = tunefarm::runtime::Confine(o);
    if (!c.ok()) {
      std::printf("confine: %s\n", std::string(c.status().message()).c_str());
      return 1;
    }
    std::printf("namespaces: %d, filter: %d\n", c->namespaces, c->filtered);
  } else {
    start();
  }
  std::printf("driver: %s\n", started.c_str());
  int rc = 1;
  if (d != nullptr) {
    CudaDriver::CUdeviceptr p = 0;
    std::string steps;
    const size_t n = 1 << 20;
    std::string host(n, 'x'), back(n, '\0');
    absl::Status s = d->Check(d->cuMemAlloc(&p, n), "alloc");
    if (s.ok()) s = d->Check(d->cuMemcpyHtoD(p, host.data(), n), "copy up");
    if (s.ok()) s = d->Check(d->cuMemcpyDtoH(back.data(), p, n), "copy down");
    if (s.ok()) s = d->Check(d->cuMemFree(p), "free");
    if (s.ok() && back != host) s = absl::DataLossError("the copy came back different");
    std::printf("memory: %s\n", s.ok() ? "ok" : std::string(s.message()).c_str());
    rc = s.ok() ? 0 : 1;
  }
  for (int i = 0; i < g_n_failed; ++i) std::printf("  file: %s\n", g_failed[i]);
  std::fflush(stdout);
  return rc;
}
