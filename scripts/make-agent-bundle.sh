#!/bin/sh
# Packs a built device agent (tunefarm-agent, tunefarm-runner,
# tunefarm-model-runner) with every shared library they load, the C library
# and its program loader included, into one tarball that runs on any Linux
# of the same architecture whatever libraries that system has (JetPack 5
# and 6, Ubuntu 20.04/22.04, are older than the Debian 12 libraries the
# cross-build links):
#   scripts/make-agent-bundle.sh BIN_DIR OUT.tar.gz [SYSROOT_LIB_DIR...]
# BIN_DIR holds the three programs (build-aarch64/bin). The libraries are
# looked up in SYSROOT_LIB_DIRs (default: Debian's multiarch directories for
# the programs' architecture). The tarball unpacks to tunefarm-agent/:
#   bin/tunefarm-agent   the launcher to run (a shell script)
#   libexec/             the three programs
#   lib/                 their libraries and the loader
# The launcher runs the agent, and the agent its runners, through the
# bundled loader; with TUNEFARM_EMULATOR=qemu-aarch64 set it runs them
# under that emulator (a board on an x86-64 machine). docs/agent-install.md.
set -eu
if [ $# -lt 2 ]; then
  echo "usage: $0 BIN_DIR OUT.tar.gz [SYSROOT_LIB_DIR...]" >&2
  exit 2
fi
bin=$1
out=$2
shift 2
programs="tunefarm-agent tunefarm-runner tunefarm-model-runner"
for p in $programs; do
  [ -x "$bin/$p" ] || { echo "$0: $bin/$p is missing (build the agent first)" >&2; exit 2; }
done
interp=$(readelf -l "$bin/tunefarm-agent" | sed -n 's/.*program interpreter: \(.*\)]/\1/p')
loader=$(basename "$interp")
case $loader in
  ld-linux-aarch64.so.1) multiarch=aarch64-linux-gnu ;;
  ld-linux-x86-64.so.2) multiarch=x86_64-linux-gnu ;;
  *) echo "$0: unknown program loader '$interp'" >&2; exit 2 ;;
esac
[ $# -gt 0 ] || set -- "/usr/lib/$multiarch" "/lib/$multiarch"

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
root="$stage/tunefarm-agent"
mkdir -p "$root/bin" "$root/libexec" "$root/lib"

find_lib() {  # find_lib SONAME: its path in the library directories
  for d in $libdirs; do
    if [ -e "$d/$1" ]; then echo "$d/$1"; return 0; fi
  done
  return 1
}
libdirs="$*"
# Every NEEDED library, transitively, copied once (symlinks resolved).
queue=""
for p in $programs; do
  cp "$bin/$p" "$root/libexec/"
  queue="$queue $root/libexec/$p"
done
while [ -n "${queue# }" ]; do
  set -- $queue
  file=$1
  shift
  queue="$*"
  for soname in $(readelf -d "$file" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'); do
    [ -e "$root/lib/$soname" ] && continue
    path=$(find_lib "$soname") || { echo "$0: $soname (needed by $(basename "$file")) not found in $libdirs" >&2; exit 1; }
    cp -L "$path" "$root/lib/$soname"
    queue="$queue $root/lib/$soname"
  done
done
path=$(find_lib "$loader") || { echo "$0: the loader $loader not found in $libdirs" >&2; exit 1; }
cp -L "$path" "$root/lib/$loader"

cat > "$root/bin/tunefarm-agent" <<LAUNCHER
#!/bin/sh
# tunefarm-agent with its own libraries (scripts/make-agent-bundle.sh): the
# agent and its runners run through the bundled loader, so the system's
# libraries do not matter. TUNEFARM_EMULATOR (e.g. qemu-aarch64) runs them
# under an emulator. The directory must not contain spaces.
here=\$(cd "\$(dirname "\$0")/.." && pwd -P)
run="\$here/lib/$loader --library-path \$here/lib"
[ -z "\${TUNEFARM_EMULATOR:-}" ] || run="\$TUNEFARM_EMULATOR \$run"
TUNEFARM_RUNNER="\$here/libexec/tunefarm-runner"
TUNEFARM_MODEL_RUNNER="\$here/libexec/tunefarm-model-runner"
TUNEFARM_RUNNER_WRAPPER="\$run"
export TUNEFARM_RUNNER TUNEFARM_MODEL_RUNNER TUNEFARM_RUNNER_WRAPPER
exec \$run "\$here/libexec/tunefarm-agent" "\$@"
LAUNCHER
chmod 755 "$root/bin/tunefarm-agent"
mkdir -p "$(dirname "$out")"
tar -C "$stage" -czf "$out.partial" tunefarm-agent
mv "$out.partial" "$out"
echo "$out: tunefarm-agent for $multiarch with $(ls "$root/lib" | wc -l) libraries ($(du -sh "$root" | cut -f1) unpacked)"
