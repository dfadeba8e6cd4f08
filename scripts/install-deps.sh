#!/usr/bin/env bash
# Installs the Debian 12 packages tunefarm builds against. Idempotent: only
# missing packages are installed. Works as root, or through sudo otherwise.
#
#   scripts/install-deps.sh           # everything (server, worker, CLI, tests)
#   scripts/install-deps.sh --agent   # only what the device agent needs
set -euo pipefail

AGENT_PKGS=(
  build-essential cmake ninja-build pkg-config
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev libspdlog-dev libssl-dev
)
FULL_PKGS=(
  "${AGENT_PKGS[@]}"
  libsqlite3-dev sqlite3
  libxgboost-dev xgboost
  llvm-19-dev lld-19 libzstd-dev
  libgtest-dev libgmock-dev openssl
  qemu-user g++-aarch64-linux-gnu
  libdnnl-dev libopenblas-dev
  libonnx-dev python3-onnx libonnx-testdata
)

pkgs=("${FULL_PKGS[@]}")
if [[ "${1:-}" == "--agent" ]]; then
  pkgs=("${AGENT_PKGS[@]}")
fi

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
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
