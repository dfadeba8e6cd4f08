// tunefarm-bench: performance against references measured in the same run.
//
//   tunefarm-bench kernels [--target host|cuda] [--samples N] [--threads 1,2]
//                          [--only S1,S2] [--json FILE]
//   tunefarm-bench search [--budgets 64,128,256,512] [--seeds 3] [--threads 1] [--only S1,S2]
//                         [--warm-db FILE [--pool-trials 128]] [--strategies random,evolutionary]
//                         [--objective O] [--run-to N] [--from-default] [--json FILE] [--svg FILE]
//                         [--trace]
//   tunefarm-bench farm [--agents 1,10,100] [--seconds 10] [--trials 96] [--json FILE]
//   tunefarm-bench models [--seconds 1200 | --trials N] [--threads 1,2] [--repeat 20]
//                         [--yolo-size 640] [--only S1,S2] [--db-dir DIR] [--json FILE]
//   tunefarm-bench gpu-models [--trials N] [--precision fp32,fp16,bf16,tf32] [--layout nchw,nhwc]
//                             [--repeat 50] [--only NAME] [--model-dir DIR] [--db-dir DIR]
//                             [--json FILE]
//   tunefarm-bench native
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace tunefarm::bench {
int RunKernelsBench(const std::vector<std::string>& args);
int RunSearchBench(const std::vector<std::string>& args);
int RunFarmBench(const std::vector<std::string>& args);
int RunModelsBench(const std::vector<std::string>& args);
int RunNativeBench(const std::vector<std::string>& args);
int RunGpuModelsBench(const std::vector<std::string>& args);
}  // namespace tunefarm::bench

int main(int argc, char** argv) {
  // Debian's OpenBLAS misdetects recent CPUs and falls back to slow kernels;
  // the core type is read when the library loads, so set it (from what this
  // CPU and its OS support: an AVX-512 kernel on a CPU without it dies of
  // SIGILL) and start again.
  if (getenv("OPENBLAS_CORETYPE") == nullptr) {
    __builtin_cpu_init();
    const char* core = __builtin_cpu_supports("avx512f")                                   ? "SkylakeX"
                       : __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") ? "Haswell"
                                                                                           : "Prescott";
    setenv("OPENBLAS_CORETYPE", core, 1);
    // OpenMP threads of oneDNN must not spin while our kernels are timed.
    setenv("OMP_WAIT_POLICY", "passive", 1);
    execv("/proc/self/exe", argv);
    std::perror("re-exec");
  }
  std::vector<std::string> args(argv + 1, argv + argc);
  // --help anywhere prints the usage (to stdout) and runs nothing.
  const bool help = std::any_of(args.begin(), args.end(),
                                [](const std::string& a) { return a == "--help" || a == "-h"; });
  if (help || args.empty() ||
      (args[0] != "kernels" && args[0] != "search" && args[0] != "farm" && args[0] != "models" &&
       args[0] != "native" && args[0] != "gpu-models")) {
    std::fprintf(
        help ? stdout : stderr,
        "usage: tunefarm-bench kernels [--target host|cuda[ -arch=sm_XX]] [--samples N] "
        "[--threads 1,2] [--only S1,S2] [--json FILE]\n"
        "       tunefarm-bench search [--budgets 64,128,256,512] [--seeds 3] [--threads 1] "
        "[--only S1,S2] [--warm-db FILE [--pool-trials 128]] [--strategies random,evolutionary] "
        "[--objective O] "
        "[--min-train N] [--population N] [--generations N] [--epsilon F] [--stalled-neighbors F] "
        "[--transferred N] [--run-to N] [--from-default] "
        "[--json FILE] [--svg FILE] [--trace]\n"
        "       tunefarm-bench farm [--agents 1,10,100] [--seconds 10] [--trials 96] "
        "[--json FILE]\n"
        "       tunefarm-bench models [--seconds 1200 | --trials N] [--threads 1,2] "
        "[--repeat 20] [--yolo-size 640] [--only S1,S2] [--db-dir DIR] [--json FILE]\n"
        "       tunefarm-bench gpu-models [--trials N] [--precision fp32,fp16,bf16,tf32] "
        "[--layout nchw,nhwc] [--repeat 50] [--only NAME] [--model-dir DIR] [--db-dir DIR] "
        "[--json FILE]\n"
        "       tunefarm-bench native\n");
    return help ? 0 : 2;
  }
  std::vector<std::string> rest(args.begin() + 1, args.end());
  if (args[0] == "search") return tunefarm::bench::RunSearchBench(rest);
  if (args[0] == "native") return tunefarm::bench::RunNativeBench(rest);
  if (args[0] == "farm") return tunefarm::bench::RunFarmBench(rest);
  if (args[0] == "models") return tunefarm::bench::RunModelsBench(rest);
  if (args[0] == "gpu-models") return tunefarm::bench::RunGpuModelsBench(rest);
  return tunefarm::bench::RunKernelsBench(rest);
}
