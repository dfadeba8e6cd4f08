// Built with aarch64-linux-gnu-g++ and run under qemu-aarch64: loads an
// aarch64 kernel shared object, runs it on float inputs read from files and
// writes the output. Serial parallel_for; a plain, independent runtime.
//
//   aarch64_runner KERNEL.so OUT_FILE OUT_COUNT IN_FILE...
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

#include <vector>

#include "common/kernel_abi.h"

static int32_t SerialFor(void*, int64_t n, void* closure, TFParallelBody body) {
  body(closure, 0, n);
  return 0;
}
static void* Alloc(void*, int64_t bytes) { return aligned_alloc(64, (bytes + 63) / 64 * 64); }
static void Free(void*, void* p) { free(p); }

static float* ReadFloats(const char* path, long* count) {
  FILE* f = fopen(path, "rb");
  if (!f) return nullptr;
  fseek(f, 0, SEEK_END);
  long bytes = ftell(f);
  fseek(f, 0, SEEK_SET);
  float* data = static_cast<float*>(aligned_alloc(64, (bytes + 63) / 64 * 64 + 64));
  *count = bytes / 4;
  size_t got = fread(data, 1, bytes, f);
  fclose(f);
  return got == size_t(bytes) ? data : nullptr;
}

int main(int argc, char** argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: aarch64_runner KERNEL.so OUT_FILE OUT_COUNT IN_FILE...\n");
    return 2;
  }
  void* lib = dlopen(argv[1], RTLD_NOW);
  if (!lib) {
    fprintf(stderr, "dlopen: %s\n", dlerror());
    return 1;
  }
  TFKernelFn fn = reinterpret_cast<TFKernelFn>(dlsym(lib, TF_KERNEL_ENTRY));
  if (!fn) return 1;
  std::vector<void*> buffers;
  for (int i = 4; i < argc; ++i) {
    long n = 0;
    float* p = ReadFloats(argv[i], &n);
    if (!p) return 1;
    buffers.push_back(p);
  }
  long out_count = atol(argv[3]);
  float* out = static_cast<float*>(aligned_alloc(64, (out_count * 4 + 63) / 64 * 64 + 64));
  // NaN first: an output the kernel does not write cannot pass the check.
  for (long i = 0; i < out_count; ++i) out[i] = __builtin_nanf("");
  buffers.push_back(out);
  TFRuntime rt = {TF_KERNEL_ABI_VERSION, 1, SerialFor, nullptr, Alloc, Free};
  if (fn(buffers.data(), &rt) != 0) return 1;
  FILE* f = fopen(argv[2], "wb");
  if (!f || fwrite(out, 4, out_count, f) != size_t(out_count)) return 1;
  fclose(f);
  return 0;
}
