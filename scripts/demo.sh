#!/usr/bin/env bash
# make demo: a whole farm on this machine, on loopback. Starts tunefarm-server
# (SQLite file in demo-run/), a compile worker and a device agent, waits for
# them to register, submits the bundled ResNet-18 blocks as a tuning job,
# watches it run through the farm and prints default vs tuned per task.
# Everything is stopped on exit.
set -euo pipefail
BUILD=${1:-build}
BIN="$BUILD/bin"
RUN=${DEMO_RUN:-demo-run}
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
"$BIN/tunefarm-agent" --server="$ADDR" --key=local-cpu --device_id=demo-agent \
  --server_key="$RUN/tunefarm.db.signing-key.pub" 2>"$RUN/agent.log" &
pids+=($!)
both_online() { [ "$("${TF[@]}" devices | grep -c ' online ')" -eq 2 ]; }
wait_for 30 both_online
echo
echo "== devices (both dialled in; nothing dials them)"
"${TF[@]}" devices

# The target `--target=host --threads=N` means for tune and build (LLVM's
# name for this CPU, N = its cores): records from here serve them.
TARGET=$("${TF[0]}" version | sed -n 's/^host target: //p')
CORES=$(echo "$TARGET" | sed -n 's/.*-num-cores=\([0-9]*\).*/\1/p')
echo
echo "== submitting scripts/demo/resnet18_blocks.json for target: $TARGET"
TRIALS=${DEMO_TRIALS:-150}
"${TF[@]}" submit scripts/demo/resnet18_blocks.json --target="$TARGET" --trials="$TRIALS"
echo
echo "== tuning through the farm: the worker builds, the agent measures ($TRIALS trials)"
echo "   (then the default schedule's time against the best found, per task)"
"${TF[@]}" watch 1
echo
# The job's first task, as `tune --workload` takes it.
FIRST='conv2d_nchw(N=1,C=64,H=56,W=56,K=64,R=3,S=3,pad=1)+bias+relu'
cat <<MSG
== next (the farm stops with this script; its database stays in $RUN/)
  $BIN/tunefarm-server --db=$RUN/tunefarm.db &
                                             a server on it again (127.0.0.1:7070), then:
  $BIN/tunefarm best --job=1 --target="$TARGET"
                                             the best record per task
  $BIN/tunefarm records --job=1              every measurement of the job, newest first
  $BIN/tunefarm export -o records.jsonl      records to share with another farm
Without a server, on the same database:
  $BIN/tunefarm tune --workload '$FIRST' --target=host --threads=$CORES --db=$RUN/tunefarm.db --trials=64
                                             more tuning of the first task here, from the job's records
  $BIN/tunefarm build MODEL.onnx --target=host --threads=$CORES --db=$RUN/tunefarm.db -o model.tfpkg
                                             a model package with the job's best schedules
MSG
