#!/usr/bin/env bash
# make demo: a whole farm on this machine, on loopback. Starts tunefarm-server
# (SQLite file in demo-run/), a compile worker and a device agent, waits for
# them to register, submits the bundled ResNet-18 blocks as a tuning job and
# shows what the server knows. Everything is stopped on exit.
set -euo pipefail
BUILD=${1:-build}
BIN="$BUILD/bin"
RUN=demo-run
rm -rf "$RUN"
mkdir -p "$RUN"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap cleanup EXIT

wait_for() {  # wait_for SECONDS COMMAND...: retry until it succeeds
  local deadline=$((SECONDS + $1)); shift
  until "$@" >/dev/null 2>&1; do
    if ((SECONDS > deadline)); then echo "demo: timed out waiting for: $*" >&2; return 1; fi
    sleep 0.1
  done
}

"$BIN/tunefarm-server" --listen=127.0.0.1:0 --db="$RUN/tunefarm.db" \
  --port_file="$RUN/port" --heartbeat_interval_ms=500 2>"$RUN/server.log" &
pids+=($!)
wait_for 30 test -s "$RUN/port"
ADDR="127.0.0.1:$(cat "$RUN/port")"
TF=("$BIN/tunefarm" "--server=$ADDR")
echo "== tunefarm-server on $ADDR, log database $RUN/tunefarm.db"

"$BIN/tunefarm-worker" --server="$ADDR" --device_id=demo-worker 2>"$RUN/worker.log" &
pids+=($!)
"$BIN/tunefarm-agent" --server="$ADDR" --key=local-cpu --device_id=demo-agent 2>"$RUN/agent.log" &
pids+=($!)
both_online() { [ "$("${TF[@]}" devices | grep -c ' online ')" -eq 2 ]; }
wait_for 30 both_online
echo
echo "== devices (both dialled in; nothing dials them)"
"${TF[@]}" devices

CPU=$( (gcc -march=native -Q --help=target 2>/dev/null || true) | awk '$1 == "-march=" {print $2}' | head -n1)
TARGET="llvm -mtriple=x86_64-linux-gnu -mcpu=${CPU:-generic} -num-cores=$(nproc)"
echo
echo "== submitting scripts/demo/resnet18_blocks.json for target: $TARGET"
"${TF[@]}" submit scripts/demo/resnet18_blocks.json --target="$TARGET"
"${TF[@]}" job 1
echo
cat <<'MSG'
== what this demo does not do yet
The farm does not run jobs yet: the server does not hand work to workers and
agents (a later issue). The job above is stored and listed, but stays queued,
so there is no before/after table to print yet. Tuning works locally, without
the farm, and stores its records the same way:
  tunefarm tune --workload 'conv2d_nchw(N=1,C=64,H=56,W=56,K=64,R=3,S=3,pad=1)' --trials 64
Records can be imported, queried and exported:
  tunefarm import FILE.jsonl / tunefarm best --workload=KEY --target=T / tunefarm export
MSG
