#!/usr/bin/env bash
# Single-process training against Strata's ParameterServerStrategy with the
# workers in one network namespace and the coordinator and PS tasks in
# another, joined by a veth pair: every pull and push crosses two TCP stacks
# and no shared memory is possible (the PS client uses shared memory only
# with loopback targets). Test accuracy and examples/s side by side, as
# bench/train_compare.sh reports them for loopback.
#
#   sudo bench/train_netns.sh [JOB] [EPOCHS]   # defaults: fashion_mnist, 3
#
# Runs (1) build/bin/local_train in the root namespace, (2) 1 PS + 1 worker,
# (3) 2 PS + 2 workers, each cluster started by hand (strata-coordinator,
# strata-ps, strata-worker) and the job given with `strata submit --wait`.
# Prints a Markdown table and writes it to bench/results/train_netns.md.
#
# Needs root and iproute2 (skips, exit 0, otherwise) and a built tree
# (BIN_DIR, default build/bin). Creates namespaces strata-tn-ps
# (10.232.0.1/24) and strata-tn-w (10.232.0.2/24) and the veth pair between
# them, inside the namespaces only; the namespaces and every process this
# script started are removed on exit, also on failure (logs are then kept).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
job=${1:-examples/fashion_mnist/job.json}
epochs=${2:-3}
BIN_DIR=${BIN_DIR:-build/bin}
PS_NS=strata-tn-ps
W_NS=strata-tn-w
PS_ADDR=10.232.0.1
W_ADDR=10.232.0.2
RESULT_MD=bench/results/train_netns.md
START_TIMEOUT=60     # seconds for a daemon to report its address
JOB_TIMEOUT=600      # seconds for one distributed run, start to summary

skip() {
  echo "train_netns: skipped: needs root to create network namespaces"
  exit 0
}
[[ $(id -u) -eq 0 ]] || skip
command -v ip >/dev/null 2>&1 || skip
ip netns list >/dev/null 2>&1 || skip

for bin in local_train strata strata-coordinator strata-ps strata-worker; do
  if [[ ! -x $BIN_DIR/$bin ]]; then
    echo "train_netns: $BIN_DIR/$bin not found: build the tree first" >&2
    exit 1
  fi
done
if [[ ! -f $job ]]; then
  echo "train_netns: job file $job not found" >&2
  exit 1
fi

out=$(mktemp -d -t strata-train-netns.XXXXXX)
pids=()  # every process started here, in any namespace

# Stops what this script started and what runs in our namespaces (also
# what a killed earlier run left there), then deletes the namespaces; the
# veth pair goes with them. Logs are kept when the run failed.
cleanup() {
  local rc=$? ns left p
  left=${pids[*]-}
  for ns in "$W_NS" "$PS_NS"; do
    [[ -e /run/netns/$ns ]] || continue
    left+=" $(ip netns pids "$ns" 2>/dev/null | tr '\n' ' ' || true)"
  done
  # shellcheck disable=SC2086
  [[ -z ${left// /} ]] || kill -TERM $left 2>/dev/null || true
  for _ in $(seq 50); do
    local alive=0
    for p in $left; do
      if kill -0 "$p" 2>/dev/null; then alive=1; fi
    done
    [[ $alive -eq 1 ]] || break
    sleep 0.2
  done
  # shellcheck disable=SC2086
  [[ -z ${left// /} ]] || kill -KILL $left 2>/dev/null || true
  wait 2>/dev/null || true
  for ns in "$W_NS" "$PS_NS"; do
    [[ -e /run/netns/$ns ]] || continue
    ip netns del "$ns" 2>/dev/null || true
  done
  if [[ $rc -eq 0 ]]; then
    rm -rf "$out"
  else
    echo "train_netns: failed (exit $rc); logs in $out" >&2
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

for ns in "$W_NS" "$PS_NS"; do
  [[ ! -e /run/netns/$ns ]] || ip netns del "$ns"
done
if ! ip netns add "$PS_NS" 2>/dev/null || ! ip netns add "$W_NS" 2>/dev/null
then
  skip
fi
ip -n "$PS_NS" link add veth-ps type veth peer name veth-w netns "$W_NS"
ip -n "$PS_NS" addr add "$PS_ADDR/24" dev veth-ps
ip -n "$W_NS" addr add "$W_ADDR/24" dev veth-w
for ns in "$PS_NS" "$W_NS"; do
  ip -n "$ns" link set lo up
done
ip -n "$PS_NS" link set veth-ps up
ip -n "$W_NS" link set veth-w up

# The channels go direct, never through a proxy.
unset http_proxy https_proxy HTTP_PROXY HTTPS_PROXY grpc_proxy GRPC_PROXY
unset no_proxy NO_PROXY

# The job with its epochs overridden (strata submit takes the file as is).
python3 - "$job" "$epochs" "$out/job.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
j["epochs"] = int(sys.argv[2])
json.dump(j, open(sys.argv[3], "w"), indent=2)
PY

# start NAME NS ARGV...: runs ARGV in namespace NS (the root namespace when
# NS is empty) in the background, output to $out/NAME.log; sets $started.
start() {
  local name=$1 ns=$2
  shift 2
  if [[ -n $ns ]]; then
    ip netns exec "$ns" "$@" >"$out/$name.log" 2>&1 &
  else
    "$@" >"$out/$name.log" 2>&1 &
  fi
  started=$!
  pids+=("$started")
}

# address_of NAME PID: waits for the daemon's "listening on HOST:PORT" line
# and prints HOST:PORT; fails when it exits or takes too long.
address_of() {
  local name=$1 pid=$2 line deadline=$((SECONDS + START_TIMEOUT))
  while true; do
    line=$(grep -m1 '^listening on ' "$out/$name.log" 2>/dev/null || true)
    if [[ -n $line ]]; then
      echo "${line#listening on }"
      return 0
    fi
    if ! kill -0 "$pid" 2>/dev/null || ((SECONDS > deadline)); then
      echo "train_netns: $name did not report its address; its log:" >&2
      tail -n 20 "$out/$name.log" >&2 || true
      return 1
    fi
    sleep 0.1
  done
}

# Bytes the PS side of the veth carried so far (both directions).
veth_bytes() {
  ip -n "$PS_NS" -j -s link show veth-ps | python3 -c '
import json, sys
s = json.load(sys.stdin)[0]["stats64"]
print(s["rx"]["bytes"] + s["tx"]["bytes"])'
}

# stop_all: SIGTERM to every process started so far, bounded wait, then
# SIGKILL; leaves pids empty.
stop_all() {
  local p
  [[ ${#pids[@]} -gt 0 ]] || return 0
  kill -TERM "${pids[@]}" 2>/dev/null || true
  for _ in $(seq 100); do
    local alive=0
    for p in "${pids[@]}"; do
      if kill -0 "$p" 2>/dev/null; then alive=1; fi
    done
    [[ $alive -eq 1 ]] || break
    sleep 0.1
  done
  kill -KILL "${pids[@]}" 2>/dev/null || true
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  pids=()
}

# cluster TAG NUM_PS NUM_WORKERS: the coordinator and NUM_PS PS tasks in
# $PS_NS on $PS_ADDR, NUM_WORKERS workers in $W_NS on $W_ADDR, the job
# submitted from $PS_NS and followed to its end; writes $out/TAG.json (the
# submit summary plus the veth's bytes) and stops every process.
cluster() {
  local tag=$1 num_ps=$2 num_workers=$3 i coord ps_addr bytes0 submit_pid
  local rc=0 deadline servers=() server_names=()
  start "$tag-coordinator" "$PS_NS" "$BIN_DIR/strata-coordinator" \
    --host="$PS_ADDR" --port=0 --state-dir="$out/$tag/coordinator" \
    --topology-timeout-ms=120000
  coord=$(address_of "$tag-coordinator" "$started")
  servers+=("$started")
  server_names+=(coordinator)
  for ((i = 0; i < num_ps; i++)); do
    start "$tag-ps-$i" "$PS_NS" "$BIN_DIR/strata-ps" \
      --host="$PS_ADDR" --port=0 --task-index="$i" \
      --coordinator="$coord" --checkpoint-dir="$out/$tag/ps-$i"
    ps_addr=$(address_of "$tag-ps-$i" "$started")
    servers+=("$started")
    server_names+=("ps-$i")
    echo "train_netns: $tag: ps $i at $ps_addr ($PS_NS)" >&2
  done
  bytes0=$(veth_bytes)
  for ((i = 0; i < num_workers; i++)); do
    start "$tag-worker-$i" "$W_NS" "$BIN_DIR/strata-worker" \
      --coordinator="$coord" --task-index="$i" \
      --host="$W_ADDR" --advertise-host="$W_ADDR"
  done
  echo "train_netns: $tag: coordinator $coord, $num_ps ps, $num_workers" \
    "workers ($W_NS $W_ADDR)" >&2
  ip netns exec "$PS_NS" "$BIN_DIR/strata" submit --coordinator="$coord" \
    --job="$out/job.json" --wait-ps="$num_ps" --wait-workers="$num_workers" \
    --wait-timeout-seconds=120 --wait --summary="$out/$tag-submit.json" \
    > >(tee "$out/$tag-submit.log" >&2) 2>&1 &
  submit_pid=$!
  pids+=("$submit_pid")
  # Bounded: the whole run, and every server must stay up meanwhile.
  deadline=$((SECONDS + JOB_TIMEOUT))
  while kill -0 "$submit_pid" 2>/dev/null; do
    if ((SECONDS > deadline)); then
      echo "train_netns: $tag: no result after $JOB_TIMEOUT s" >&2
      return 1
    fi
    for i in "${!servers[@]}"; do
      if ! kill -0 "${servers[$i]}" 2>/dev/null; then
        echo "train_netns: $tag: ${server_names[$i]} exited during the run;" \
          "its log:" >&2
        tail -n 20 "$out/$tag-${server_names[$i]}.log" >&2 || true
        return 1
      fi
    done
    sleep 0.5
  done
  wait "$submit_pid" || rc=$?
  if [[ $rc -ne 0 ]]; then
    echo "train_netns: $tag: strata submit failed (exit $rc)" >&2
    return 1
  fi
  python3 - "$out/$tag-submit.json" "$bytes0" "$(veth_bytes)" \
    "$out/$tag.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
s["veth_bytes"] = int(sys.argv[3]) - int(sys.argv[2])
json.dump(s, open(sys.argv[4], "w"), indent=2)
PY
  stop_all
}

echo "train_netns: $job, $epochs epochs" >&2
start local "" "$BIN_DIR/local_train" --job "$job" --epochs "$epochs" \
  --summary "$out/local.json"
tail -f --pid="$started" "$out/local.log" >&2 &
local_tail=$!
rc=0
wait "$started" || rc=$?
wait "$local_tail" 2>/dev/null || true
pids=()
if [[ $rc -ne 0 ]]; then
  echo "train_netns: local_train failed (exit $rc)" >&2
  exit 1
fi
cluster ps1w1 1 1
cluster ps2w2 2 2

mkdir -p "$(dirname "$RESULT_MD")"
python3 - "$out" "bench/train_netns.sh $job $epochs" "$W_NS" "$PS_NS" \
  "$W_ADDR" "$PS_ADDR" <<'PY' | tee "$RESULT_MD"
import json, os, sys
d, command, w_ns, ps_ns, w_addr, ps_addr = sys.argv[1:7]
local = json.load(open(os.path.join(d, "local.json")))
rows = [("single process (local_train)", local),
        ("1 PS + 1 worker across the veth", json.load(open(os.path.join(d, "ps1w1.json")))),
        ("2 PS + 2 workers across the veth", json.load(open(os.path.join(d, "ps2w2.json"))))]
print(f"`{command}`: workers in netns {w_ns} ({w_addr}), coordinator and PS "
      f"tasks in {ps_ns} ({ps_addr}), one veth pair between them\n")
# Training throughput: examples over the epochs' training time. local_train
# times its epochs; for a cluster, strata submit sums the coordinator's
# per-epoch elapsed_seconds (first step handed out to last step reported),
# the same measure strata launch reports, so neither side counts start-up or
# evaluations. The whole-run column adds the cluster's start-up and
# evaluations (the coordinator's wall_seconds for the job).
base = local["train_examples_per_second"]
print("| run | test accuracy | train examples/s | vs single process | examples/s over the whole run | MiB across the veth |")
print("|---|---|---|---|---|---|")
for name, s in rows:
    veth = f"{s['veth_bytes'] / 2**20:.0f}" if "veth_bytes" in s else "—"
    print(f"| {name} | {s['test_accuracy']:.4f} | {s['train_examples_per_second']:.0f} | "
          f"{s['train_examples_per_second'] / base:.2f} | {s['examples_per_second']:.0f} | {veth} |")
for name, s in rows[1:]:
    keys = ("steps_scheduled", "steps_applied", "steps_applied_ps", "lost_steps",
            "train_seconds", "wall_seconds", "cluster")
    print(f"\n{name} summary: " + json.dumps({k: s[k] for k in keys if k in s}))
PY
