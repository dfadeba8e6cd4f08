#!/usr/bin/env bash
# Installs the Debian 12 packages tunefarm builds against. Idempotent: only
# missing packages are installed. Works as root, or through sudo otherwise.
#
#   scripts/install-deps.sh                 # everything (server, worker, CLI, tests)
#   scripts/install-deps.sh --agent         # only what the device agent needs
#   scripts/install-deps.sh --agent-aarch64 # cross-building the agent for arm64
#                                           # boards (cmake/aarch64-linux-gnu.cmake)
set -euo pipefail

AGENT_PKGS=(
  build-essential cmake ninja-build pkg-config
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev libspdlog-dev libssl-dev
)
# The agent's libraries for arm64 (Debian multiarch, beside the host's), the
# cross compiler and qemu-user to run what it builds.
AARCH64_PKGS=(
  build-essential cmake ninja-build pkg-config
  protobuf-compiler-grpc protobuf-compiler
  g++-aarch64-linux-gnu qemu-user
  libgrpc++-dev:arm64 libprotobuf-dev:arm64 libabsl-dev:arm64 libspdlog-dev:arm64
  libssl-dev:arm64
)
FULL_PKGS=(
  "${AGENT_PKGS[@]}"
  "${AARCH64_PKGS[@]}"
  libsqlite3-dev sqlite3
  libxgboost-dev xgboost
  llvm-19-dev lld-19 libzstd-dev
  libgtest-dev libgmock-dev openssl curl
  qemu-user g++-aarch64-linux-gnu
  libdnnl-dev libopenblas-dev
  libonnx-dev python3-onnx libonnx-testdata
  chromium
)

pkgs=("${FULL_PKGS[@]}")
case "${1:-}" in
  --agent) pkgs=("${AGENT_PKGS[@]}") ;;
  --agent-aarch64) pkgs=("${AARCH64_PKGS[@]}") ;;
  "") ;;
  *) echo "install-deps: unknown option $1 (--agent, --agent-aarch64)" >&2; exit 2 ;;
esac

missing=()
for p in "${pkgs[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [[ ${#missing[@]} -eq 0 ]]; then
  echo "install-deps: all ${#pkgs[@]} packages present"
  exit 0
fi

SUDO=""
if [[ $(id -u) -ne 0 ]]; then
  if command -v sudo >/dev/null; then
    SUDO="sudo"
  else
    echo "install-deps: not root and no sudo; please install: ${missing[*]}" >&2
    exit 1
  fi
fi

echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
if [[ " ${missing[*]}" == *":arm64"* ]] && ! dpkg --print-foreign-architectures | grep -qx arm64; then
  $SUDO dpkg --add-architecture arm64
fi
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
