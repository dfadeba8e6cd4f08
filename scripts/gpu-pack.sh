#!/bin/bash
# Packs a built tree for a GPU machine that has CUDA 13 and a driver but none
# of the project's Debian libraries: the stripped binaries that
# scripts/gpu-checks.sh --tests-only runs, every library they need but glibc,
# libstdc++ and CUDA's, and ld.lld. Writes DEST/pack.tar.xz (about 55 MB) and
# DEST/run.sh, which on the GPU machine (from the repository root) unpacks it
# where the compiled-in paths expect it (/work/main/build) and runs the checks.
#
#   usage: scripts/gpu-pack.sh [BUILD_DIR] [DEST]     (defaults: build .gpu)
set -eu
build=${1:-build}
dest=${2:-.gpu}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/bin" "$tmp/tests" "$tmp/lib" "$dest"
for t in cuda_test gpu_plan_test worker_test codegen_test search_test e2e_test gpu_device_test \
         gpu_farm_test tune_cli_test graph_test gpu_sandbox_probe; do
  strip -o "$tmp/tests/$t" "$build/tests/$t"
done
for b in tunefarm tunefarm-agent tunefarm-model-runner tunefarm-runner tunefarm-server \
         tunefarm-worker; do
  strip -o "$tmp/bin/$b" "$build/bin/$b"
done
ldd "$tmp"/bin/* "$tmp"/tests/* | awk '/=>/ {print $3}' | sort -u |
  grep -v -E '/(libc|libm|libdl|libpthread|librt|libstdc\+\+|libgcc_s)\.so|/cuda' |
  while read -r lib; do cp -L "$lib" "$tmp/lib/"; done
cp /usr/lib/llvm-19/bin/lld "$tmp/lib/lld"
tar -C "$tmp" -cf - bin tests lib | xz -T0 -6 >"$dest/pack.tar.xz"
cat >"$dest/run.sh" <<'RUN'
#!/bin/bash
set -u
repo=$PWD
pack=$(dirname "$0")/pack.tar.xz
if [ "$repo" != /work/main ]; then mkdir -p /work && ln -sfn "$repo" /work/main; fi
mkdir -p build && tar -C build -xJf "$pack" || exit 3
libdir() { dirname "$(find / -xdev -name "$1" 2>/dev/null | head -1)"; }
# The runner starts with an empty environment (no LD_LIBRARY_PATH): the
# loader's own path list finds the packed libraries for it.
echo "$repo/build/lib" >/etc/ld.so.conf.d/tunefarm-pack.conf && ldconfig
export LD_LIBRARY_PATH=$repo/build/lib:$(libdir 'libnvrtc.so.13*'):$(libdir 'libcublas.so.13*'):$(libdir 'libcudnn.so.9*'):${LD_LIBRARY_PATH:-}
mkdir -p /usr/lib/llvm-19/bin && ln -sf "$repo/build/lib/lld" /usr/lib/llvm-19/bin/ld.lld
# The toolkit's libdevice (LLVM's PTX route) and ptxas (the tests' check).
export TUNEFARM_LIBDEVICE=$(find / -xdev -name libdevice.10.bc 2>/dev/null | head -1)
ptxas=$(find / -xdev -name ptxas -type f 2>/dev/null | head -1)
[ -n "$ptxas" ] && export CUDA_HOME=$(dirname "$(dirname "$ptxas")")
nvidia-smi --query-gpu=name,driver_version --format=csv
for b in build/tests/* build/bin/*; do ldd "$b" | grep "not found" | sed "s|^|$b: |"; done
scripts/gpu-checks.sh --tests-only build "${OUT:-gpu-checks}"
rc=$?
grep -E "^\[  (PASSED|FAILED|SKIPPED) |^== |gpu-checks:|of [0-9]+ built|^(mode|threads|namespaces|driver|memory|confine|refused|  file|\[gpu sandbox\]|\[llvm ptx\])" "${OUT:-gpu-checks}/tests.log"
grep -B3 -A8 "Failure$" "${OUT:-gpu-checks}/tests.log" | head -120
exit $rc
RUN
chmod +x "$dest/run.sh"
ls -la "$dest"
