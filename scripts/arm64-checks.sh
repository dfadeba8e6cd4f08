#!/bin/bash
# The check that needs a real arm64 (aarch64) machine: the runners' seccomp
# filter for aarch64 has only been read, never run (qemu-user refuses
# seccomp filters, so the emulated board of the test suite runs with
# --seccomp_optional). On an arm64 Debian 12 machine with a full build
# (`make build` there: every dependency has an arm64 package), this runs the
# sandbox's tests natively: hostile kernels (compiled there with cc) must be
# killed by the aarch64 filter (SIGSYS) or find nothing, and model runners
# are confined the same way.
#
#   usage: scripts/arm64-checks.sh [BUILD_DIR] [OUT_DIR]
#
# Writes OUT_DIR/tests.log. Exit status: 0 when every sandbox test passed
# and none skipped; 1 otherwise (including on another architecture).
set -u
build=${1:-build}
out=${2:-arm64-checks}
mkdir -p "$out"
log="$out/tests.log"
: >"$log"

arch=$(uname -m)
if [ "$arch" != aarch64 ]; then
  echo "arm64-checks: this machine is $arch; run it on an arm64 board or server" | tee -a "$log"
  exit 1
fi
if [ ! -x "$build/tests/sandbox_test" ]; then
  echo "arm64-checks: $build/tests/sandbox_test is missing (make build first)" | tee -a "$log"
  exit 1
fi
{
  echo "== $(uname -a)"
  grep -m1 -i -E 'model name|cpu part' /proc/cpuinfo || true
} >>"$log"

rc=0
echo "== sandbox_test --gtest_filter=Sandbox.*" | tee -a "$log"
timeout 600 "$build/tests/sandbox_test" --gtest_filter='Sandbox.*' 2>&1 | tee -a "$log" >"$out/sandbox.log"
status=${PIPESTATUS[0]}
if [ "$status" -ne 0 ]; then
  echo "arm64-checks: sandbox_test exited with $status" | tee -a "$log"
  rc=1
elif grep -q '^\[  SKIPPED \]' "$out/sandbox.log"; then
  echo "arm64-checks: sandbox_test skipped a test (nothing may skip here)" | tee -a "$log"
  rc=1
fi
rm -f "$out/sandbox.log"
echo "arm64-checks: $([ $rc -eq 0 ] && echo passed || echo FAILED)" | tee -a "$log"
exit $rc
