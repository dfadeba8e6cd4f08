/* The C ABI between generated CPU kernels and whoever runs them (the device
 * agent's runner, the graph runtime, tests).
 *
 * A kernel shared object exports one entry point per kernel:
 *
 *   int32_t tf_main(void* const* buffers, const TFRuntime* rt);
 *
 * `buffers` holds the kernel's tensors in argument order (inputs, then the
 * output), each a dense row-major float array aligned to 64 bytes. A weight
 * the schedule repacked (layout_pack) is passed in the packed layout its
 * KernelSignature describes (PackArgument of proto/kernel_signature.h fills
 * it). Parallel loops call rt->parallel_for; temporary buffers come from rt->alloc. The
 * kernel returns 0. The runtime is passed in, so the shared object has no
 * undefined symbols of ours (only libm's for exp/tanh). */
#ifndef TUNEFARM_COMMON_KERNEL_ABI_H_
#define TUNEFARM_COMMON_KERNEL_ABI_H_

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TF_KERNEL_ABI_VERSION 1
#define TF_KERNEL_ENTRY "tf_main"

typedef void (*TFParallelBody)(void* closure, int64_t begin, int64_t end);

typedef struct TFRuntime {
  int32_t abi_version;
  int32_t num_threads;
  /* Calls body(closure, begin, end) over chunks covering [0, n), possibly on
   * several threads, and returns when all have finished. Returns 0. */
  int32_t (*parallel_for)(void* ctx, int64_t n, void* closure, TFParallelBody body);
  void* ctx;
  void* (*alloc)(void* ctx, int64_t bytes); /* 64-byte aligned */
  void (*free)(void* ctx, void* ptr);
} TFRuntime;

typedef int32_t (*TFKernelFn)(void* const* buffers, const TFRuntime* rt);

#ifdef __cplusplus
}
#endif

#endif /* TUNEFARM_COMMON_KERNEL_ABI_H_ */
