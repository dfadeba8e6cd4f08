#!/bin/bash
# The checks that need an NVIDIA GPU, run against a build that already
# exists (on the GPU machine or copied there with its libraries):
#   1. the tests that skip where there is no GPU (ctest label gpu, plus the
#      GPU cases of tune_cli_test and bench_smoke_test) and the NVRTC tests,
#      run as binaries so no ctest tree is needed;
#   2. tunefarm-bench kernels --target cuda, the table for docs/benchmarks.md;
#   3. with GPU_MODELS_TRIALS=N set, tunefarm-bench gpu-models --trials N
#      (tuned CUDA packages of ResNet-18 and MobileNetV2 against untuned and
#      cuDNN's layer sum; OUT_DIR/gpu-models.json), with GPU_MODELS_ARGS
#      added (e.g. "--precision fp16,tf32 --layout nchw,nhwc --only resnet18").
#
#   usage: scripts/gpu-checks.sh [--tests-only|--floors] [BUILD_DIR] [OUT_DIR] [BENCH_ARGS...]
#
# The GPU issue's kernel floors alone (fp32 GEMM 1024, fp16 GEMM 4096, the
# batch-16 ResNet 3x3 layers in fp16, NCHW and NHWC), with fewer samples:
#   scripts/gpu-checks.sh build out --only gemm_1024,gemm_4096_fp16,_b16_fp16,_b16_nhwc_fp16 \
#     --samples 48
# gpu-kernels.json then names each row's winning sketch and decisions
# (mma.sync, wgmma or SIMT).
#
# --tests-only runs part 1 alone, without the bench's binaries (a build
# copied to the GPU machine without oneDNN and OpenBLAS).
#
# --floors, for a short lease (scripts/gpu-pack.sh --floors): part 2 first,
# with the floors' BENCH_ARGS above where none are given, then of part 1
# only gpu_device_test (the NVRTC-only tests pass without a GPU), then
# part 3 where GPU_MODELS_TRIALS is set. Models for part 3 are written with
# whichever python3 has onnx (/usr/bin/python3, else the first on PATH).
#
# Writes OUT_DIR/tests.log, OUT_DIR/bench.log and OUT_DIR/gpu-kernels.json.
# Exit status: 0 when every test passed (none skipped) and the bench found
# no wrong result; 1 otherwise.
set -u
tests_only=0
floors=0
if [ "${1:-}" = --tests-only ]; then
  tests_only=1
  shift
elif [ "${1:-}" = --floors ]; then
  floors=1
  shift
fi
build=${1:-build}
out=${2:-gpu-checks}
shift $(($# < 2 ? $# : 2))
if [ "$floors" -eq 1 ] && [ $# -eq 0 ]; then
  set -- --only gemm_1024,gemm_4096_fp16,_b16_fp16,_b16_nhwc_fp16 --samples 48
fi
mkdir -p "$out"
: >"$out/tests.log"

if ! nvidia-smi -L >>"$out/tests.log" 2>&1; then
  echo "gpu-checks: nvidia-smi found no GPU" | tee -a "$out/tests.log"
  exit 1
fi

# The CUDA driver under the GPU runner's confinement and without it: what
# it could not open or call there (information; the tests below decide).
if [ -x "$build/tests/gpu_sandbox_probe" ]; then
  for mode in open confined; do
    echo "== gpu_sandbox_probe $mode" | tee -a "$out/tests.log"
    timeout 120 "$build/tests/gpu_sandbox_probe" $mode 2>&1 | cat | tee -a "$out/tests.log"
  done
fi

rc=0
# run NAME BINARY [ARGS...]: one gtest binary; a skip counts as a failure,
# since on a GPU machine nothing here has a reason to skip.
run() {
  local name=$1
  shift
  echo "== $name" | tee -a "$out/tests.log"
  local start=$SECONDS
  timeout "${RUN_TIMEOUT:-300}" "$@" 2>&1 | tee -a "$out/tests.log" >"$out/$name.log"
  local status=${PIPESTATUS[0]}
  echo "gpu-checks: $name took $((SECONDS - start)) s" | tee -a "$out/tests.log"
  if [ "$status" -ne 0 ]; then
    echo "gpu-checks: $name exited with $status" | tee -a "$out/tests.log"
    rc=1
  elif skipped=$(sed -n 's/^\[  SKIPPED \] \([0-9]*\) tests\{0,1\}, listed below:.*/\1/p' "$out/$name.log");
       [ "${skipped:-0}" -ne "$(grep -c '^\[has-gpu\] ' "$out/$name.log")" ]; then
    # A skip's message starts with its cause (tests/testing/skip.h); only
    # the no-driver checks skip (cause has-gpu) on a machine with a GPU.
    echo "gpu-checks: $name skipped a test" | tee -a "$out/tests.log"
    rc=1
  fi
  rm -f "$out/$name.log"
}

# The hardware test: every generated kernel family run on the GPU against
# the reference (it builds some 130 kernels with NVRTC, 34 of them large
# tensor-core ones).
device_test() { RUN_TIMEOUT=480 run gpu_device_test "$build/tests/gpu_device_test"; }

# The kernels bench (its arguments: this script's BENCH_ARGS).
kernels_bench() {
  echo "== tunefarm-bench kernels --target cuda $*" | tee -a "$out/tests.log"
  local start=$SECONDS
  timeout 480 "$build/bin/tunefarm-bench" kernels --target cuda --json "$out/gpu-kernels.json" "$@" \
    2>&1 | tee "$out/bench.log"
  [ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
  echo "gpu-checks: the kernels bench took $((SECONDS - start)) s" | tee -a "$out/tests.log"
}

# Whole models, where GPU_MODELS_TRIALS is set.
models_bench() {
  [ -n "${GPU_MODELS_TRIALS:-}" ] || return 0
  local args=${GPU_MODELS_ARGS:-} py
  if ! /usr/bin/python3 -c "import onnx" 2>/dev/null && [[ "$args" != *--model-dir* ]]; then
    py=$(command -v python3)
    if [ -n "$py" ] && "$py" -c "import onnx" 2>/dev/null &&
      "$py" tests/deploy/make_zoo.py "$out/zoo" --yolo-size 160 >>"$out/tests.log" 2>&1; then
      args="$args --model-dir $out/zoo"
    fi
  fi
  echo "== tunefarm-bench gpu-models --trials $GPU_MODELS_TRIALS $args" | tee -a "$out/tests.log"
  local start=$SECONDS
  # shellcheck disable=SC2086  # args is a list of flags
  timeout 1800 "$build/bin/tunefarm-bench" gpu-models --trials "$GPU_MODELS_TRIALS" $args \
    --json "$out/gpu-models.json" 2>&1 | tee "$out/gpu-models.log"
  [ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
  echo "gpu-checks: the models bench took $((SECONDS - start)) s" | tee -a "$out/tests.log"
}

if [ "$floors" -eq 1 ]; then
  kernels_bench "$@"
  device_test
  models_bench
  exit $rc
fi

# The CUDA toolkit's half of the suite (NVRTC builds, no GPU needed): here,
# too, none of it may skip.
run cuda_test "$build/tests/cuda_test"
run gpu_plan_test "$build/tests/gpu_plan_test"
run worker_test "$build/tests/worker_test"
run codegen_test "$build/tests/codegen_test"
run search_test "$build/tests/search_test" --gtest_filter='SearchPolicy.ProposesGpu*'
run e2e_test "$build/tests/e2e_test" --gtest_filter='*Cuda*'
device_test
run gpu_farm_test "$build/tests/gpu_farm_test"
run tune_cli_test "$build/tests/tune_cli_test" --gtest_filter='TuneCli.Cuda*'
# CUDA model packages (the test writes its models with python3-onnx).
if /usr/bin/python3 -c "import onnx" 2>/dev/null; then
  run graph_test "$build/tests/graph_test" --gtest_filter='GraphTest.Cuda*'
else
  echo "gpu-checks: GraphTest.Cuda* not run: no python3-onnx to write its models" | tee -a "$out/tests.log"
fi
[ "$tests_only" -eq 1 ] && exit $rc
run bench_smoke_test "$build/tests/bench_smoke_test" --gtest_filter='BenchSmoke.Gpu*'

kernels_bench "$@"
models_bench
exit $rc
