#!/bin/bash
# Packs a built tree for a GPU machine that has CUDA 13 and a driver but none
# of the project's Debian libraries: the stripped binaries that
# scripts/gpu-checks.sh runs (the tests and tunefarm-bench), every library
# they need but glibc, libstdc++ and CUDA's, and ld.lld. Writes
# DEST/pack.tar.xz (about 50 MB, under the 64 MiB a device call carries
# with the working tree) and DEST/run.sh, which on the GPU machine (from
# the repository root) unpacks it where the compiled-in paths expect it
# (/work/main/build) and runs `scripts/gpu-checks.sh MODE` (run.sh's
# argument: --floors, the default, --tests-only, or --all for everything).
#
# Two libraries travel as empty stand-ins: libz3 (LLVM's static analyser's
# solver) and ICU's data (libxml2's encodings, which LLVM links). Nothing
# of ours calls either; a call would stop at the missing symbol (the
# functions bind lazily), never run on wrong data.
#
#   usage: scripts/gpu-pack.sh [BUILD_DIR] [DEST]     (defaults: build .gpu)
#
# .gpu is git-ignored (never committed): a device call takes it by naming
# it, e.g. the device tool's run with carry [".gpu"] and the command
# `OUT=$OUT .gpu/run.sh --floors`.
set -eu
build=${1:-build}
dest=${2:-.gpu}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/bin" "$tmp/tests" "$tmp/lib" "$dest"
for t in cuda_test gpu_plan_test worker_test codegen_test search_test e2e_test gpu_device_test \
         gpu_farm_test tune_cli_test graph_test gpu_sandbox_probe bench_smoke_test; do
  strip -o "$tmp/tests/$t" "$build/tests/$t"
done
for b in tunefarm tunefarm-agent tunefarm-bench tunefarm-model-runner tunefarm-runner \
         tunefarm-server tunefarm-worker; do
  strip -o "$tmp/bin/$b" "$build/bin/$b"
done
ldd "$tmp"/bin/* "$tmp"/tests/* | awk '/=>/ {print $3}' | sort -u |
  grep -v -E '/(libc|libm|libdl|libpthread|librt|libstdc\+\+|libgcc_s)\.so|/cuda' |
  while read -r lib; do cp -L "$lib" "$tmp/lib/"; done
for lib in "$tmp"/lib/libz3.so.* "$tmp"/lib/libicudata.so.*; do
  [ -e "$lib" ] || continue
  # ICU's data library is one data symbol (bound at load): kept, empty.
  syms=$(nm -D --defined-only "$lib" | awk '$2 == "R" && $3 ~ /^icudt/ {print "const unsigned char " $3 "[32];"}')
  echo "$syms" | gcc -shared -fPIC -Wl,-soname,"$(basename "$lib")" -o "$lib.stub" -x c -
  mv "$lib.stub" "$lib"
done
cp /usr/lib/llvm-19/bin/lld "$tmp/lib/lld"
tar -C "$tmp" -cf - bin tests lib | xz -T0 -9 >"$dest/pack.tar.xz"
{
  echo '#!/bin/bash'
  cat <<'RUN'
set -u
mode=${1:---floors}
repo=$PWD
pack=$(dirname "$0")/pack.tar.xz
if [ "$repo" != /work/main ]; then mkdir -p /work && ln -sfn "$repo" /work/main; fi
mkdir -p build && tar -C build -xJf "$pack" || exit 3
libdir() { dirname "$(find / -xdev -name "$1" 2>/dev/null | head -1)"; }
# The runner starts with an empty environment (no LD_LIBRARY_PATH): the
# loader's own path list finds the packed libraries for it.
echo "$repo/build/lib" >/etc/ld.so.conf.d/tunefarm-pack.conf && ldconfig
export LD_LIBRARY_PATH=$repo/build/lib:$(libdir 'libnvrtc.so.13*'):$(libdir 'libcublas.so.13*'):$(libdir 'libcudnn.so.9*'):$(libdir 'libcudart.so.13*'):${LD_LIBRARY_PATH:-}
mkdir -p /usr/lib/llvm-19/bin && ln -sf "$repo/build/lib/lld" /usr/lib/llvm-19/bin/ld.lld
# The toolkit's libdevice (LLVM's PTX route) and ptxas (the tests' check).
export TUNEFARM_LIBDEVICE=$(find / -xdev -name libdevice.10.bc 2>/dev/null | head -1)
ptxas=$(find / -xdev -name ptxas -type f 2>/dev/null | head -1)
[ -n "$ptxas" ] && export CUDA_HOME=$(dirname "$(dirname "$ptxas")")
nvidia-smi --query-gpu=name,driver_version --format=csv
for b in build/tests/* build/bin/*; do ldd "$b" | grep "not found" | sed "s|^|$b: |"; done
# (BENCH_ARGS: the kernels bench's arguments, for --floors and --all.)
# shellcheck disable=SC2086  # BENCH_ARGS is a list of flags
if [ "$mode" = --all ]; then
  scripts/gpu-checks.sh build "${OUT:-gpu-checks}" ${BENCH_ARGS:-}
else
  scripts/gpu-checks.sh "$mode" build "${OUT:-gpu-checks}" ${BENCH_ARGS:-}
fi
rc=$?
grep -E "^\[  (PASSED|FAILED|SKIPPED) |^== |gpu-checks:|of [0-9]+ built|^(mode|threads|namespaces|driver|memory|confine|refused|  file|\[gpu sandbox\]|\[llvm ptx\])" "${OUT:-gpu-checks}/tests.log"
grep -B3 -A8 "Failure$" "${OUT:-gpu-checks}/tests.log" | head -120
exit $rc
RUN
} >"$dest/run.sh"
chmod +x "$dest/run.sh"
ls -la "$dest"
