#!/usr/bin/env bash
# allreduce_bench with its 2 ranks as 2 processes across a real link, then
# on loopback, in one run: two network namespaces joined by a veth pair
# (bytes cross two TCP stacks, no shared memory), with rank 0 in one
# namespace and rank 1 and the raw-socket baseline's peer in the other;
# then the same 2 processes on loopback. Every all-reduce result is checked.
# Prints both tables and writes them to bench/results/.
#
#   sudo bench/allreduce_netns.sh [allreduce_bench flags...]
#   sudo bench/allreduce_netns.sh --pack_kb 256,1024 --iterations 10
#   sudo QUICK=1 bench/allreduce_netns.sh        # 3 timed all-reduces a case
#
# Needs root and iproute2 (skips, exit 0, otherwise) and a built tree
# (build/bin/allreduce_bench; BIN_DIR overrides build/bin). Creates
# namespaces strata-ar-a (10.233.0.1/24) and strata-ar-b (10.233.0.2/24)
# and the veth pair between them, inside the namespaces only; everything,
# including processes left in them, is removed on exit.
set -euo pipefail

cd "$(dirname "$0")/.."
BIN_DIR=${BIN_DIR:-build/bin}
A_NS=strata-ar-a
B_NS=strata-ar-b
A_ADDR=10.233.0.1
B_ADDR=10.233.0.2
NETNS_MD=bench/results/netns_allreduce.md
LOOPBACK_MD=bench/results/loopback_allreduce.md

skip() {
  echo "allreduce_netns: skipped: needs root to create network namespaces"
  exit 0
}
[[ $(id -u) -eq 0 ]] || skip
command -v ip >/dev/null 2>&1 || skip
ip netns list >/dev/null 2>&1 || skip

if [[ ! -x $BIN_DIR/allreduce_bench ]]; then
  echo "allreduce_netns: $BIN_DIR/allreduce_bench not found: build the tree" \
    "first" >&2
  exit 1
fi

# Stops what runs in our namespaces (processes started by this script or a
# killed earlier run of it), then deletes them; the veth pair goes with them.
cleanup() {
  local ns pids
  for ns in "$B_NS" "$A_NS"; do
    [[ -e /run/netns/$ns ]] || continue
    pids=$(ip netns pids "$ns" 2>/dev/null || true)
    if [[ -n $pids ]]; then
      # shellcheck disable=SC2086
      kill -TERM $pids 2>/dev/null || true
      sleep 1
      pids=$(ip netns pids "$ns" 2>/dev/null || true)
      # shellcheck disable=SC2086
      [[ -z $pids ]] || kill -KILL $pids 2>/dev/null || true
    fi
    ip netns del "$ns" 2>/dev/null || true
  done
}
cleanup
trap cleanup EXIT
trap 'exit 130' INT TERM

if ! ip netns add "$A_NS" 2>/dev/null || ! ip netns add "$B_NS" 2>/dev/null
then
  skip
fi
ip -n "$A_NS" link add veth-ar-a type veth peer name veth-ar-b netns "$B_NS"
ip -n "$A_NS" addr add "$A_ADDR/24" dev veth-ar-a
ip -n "$B_NS" addr add "$B_ADDR/24" dev veth-ar-b
for ns in "$A_NS" "$B_NS"; do
  ip -n "$ns" link set lo up
done
ip -n "$A_NS" link set veth-ar-a up
ip -n "$B_NS" link set veth-ar-b up

# The ranks' channels go direct, never through a proxy.
unset http_proxy https_proxy HTTP_PROXY HTTPS_PROXY grpc_proxy

quick=()
if [[ ${QUICK:-0} == 1 ]]; then
  quick=(--iterations 3)
fi
mkdir -p bench/results
rm -f "$NETNS_MD" "$LOOPBACK_MD"

echo "allreduce_netns: across the veth pair ($A_NS $A_ADDR <-> $B_NS $B_ADDR)"
netns_rc=0
ip netns exec "$A_NS" "$BIN_DIR/allreduce_bench" --processes \
  --peer_netns "$B_NS" --peer_addr "$B_ADDR" --self_addr "$A_ADDR" \
  --sizes_mb 4,64 --markdown "$NETNS_MD" ${quick[@]+"${quick[@]}"} "$@" \
  || netns_rc=$?

echo
echo "allreduce_netns: loopback"
loopback_rc=0
"$BIN_DIR/allreduce_bench" --processes --sizes_mb 4,64 \
  --markdown "$LOOPBACK_MD" ${quick[@]+"${quick[@]}"} "$@" || loopback_rc=$?

echo
for run in "veth between namespaces:$NETNS_MD:$netns_rc" \
           "loopback:$LOOPBACK_MD:$loopback_rc"; do
  IFS=: read -r title md rc <<<"$run"
  echo "== $title ($md) =="
  [[ $rc -eq 0 ]] || echo "(allreduce_bench failed: exit $rc)"
  [[ ! -f $md ]] || cat "$md"
  echo
done
[[ $netns_rc -eq 0 && $loopback_rc -eq 0 ]]
