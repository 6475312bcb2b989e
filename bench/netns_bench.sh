#!/usr/bin/env bash
# ps_bench across a real link, then on loopback, in one run: two network
# namespaces joined by a veth pair (bytes cross two TCP stacks, no shared
# memory), with the PS, the gRPC echo server and the raw-socket peers in
# one namespace and the clients in the other; then the loopback run. Prints
# both tables and writes them to bench/results/.
#
#   sudo bench/netns_bench.sh [ps_bench flags...]   # e.g. --sizes 4K,1M
#   sudo QUICK=1 bench/netns_bench.sh               # fewer iterations
#
# Needs root and iproute2 (skips, exit 0, otherwise) and a built tree
# (build/bin/ps_bench and strata-ps; BIN_DIR overrides build/bin). Creates
# namespaces strata-nb-ps (10.231.0.1/24) and strata-nb-w (10.231.0.2/24)
# and the veth pair between them, inside the namespaces only; everything,
# including processes left in them, is removed on exit.
set -euo pipefail

cd "$(dirname "$0")/.."
BIN_DIR=${BIN_DIR:-build/bin}
PS_NS=strata-nb-ps
W_NS=strata-nb-w
PS_ADDR=10.231.0.1
W_ADDR=10.231.0.2
NETNS_MD=bench/results/netns_ps_bench.md
LOOPBACK_MD=bench/results/loopback_ps_bench.md

skip() {
  echo "netns_bench: skipped: needs root to create network namespaces"
  exit 0
}
[[ $(id -u) -eq 0 ]] || skip
command -v ip >/dev/null 2>&1 || skip
ip netns list >/dev/null 2>&1 || skip

for bin in ps_bench strata-ps; do
  if [[ ! -x $BIN_DIR/$bin ]]; then
    echo "netns_bench: $BIN_DIR/$bin not found: build the tree first" >&2
    exit 1
  fi
done

# Stops what runs in our namespaces (processes started by this script or a
# killed earlier run of it), then deletes them; the veth pair goes with them.
cleanup() {
  local ns pids
  for ns in "$W_NS" "$PS_NS"; do
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

# The benchmark's channels go direct, never through a proxy.
unset http_proxy https_proxy HTTP_PROXY HTTPS_PROXY grpc_proxy

quick=()
if [[ ${QUICK:-0} == 1 ]]; then
  quick=(--quick)
fi
mkdir -p bench/results
rm -f "$NETNS_MD" "$LOOPBACK_MD"

echo "netns_bench: across the veth pair ($W_NS $W_ADDR -> $PS_NS $PS_ADDR)"
netns_rc=0
ip netns exec "$W_NS" "$BIN_DIR/ps_bench" --peer_netns "$PS_NS" \
  --peer_addr "$PS_ADDR" --self_addr "$W_ADDR" --markdown "$NETNS_MD" \
  ${quick[@]+"${quick[@]}"} "$@" || netns_rc=$?

echo
echo "netns_bench: loopback"
loopback_rc=0
"$BIN_DIR/ps_bench" --markdown "$LOOPBACK_MD" ${quick[@]+"${quick[@]}"} \
  "$@" || loopback_rc=$?

echo
for run in "veth between namespaces:$NETNS_MD:$netns_rc" \
           "loopback:$LOOPBACK_MD:$loopback_rc"; do
  IFS=: read -r title md rc <<<"$run"
  echo "== $title ($md) =="
  [[ $rc -eq 0 ]] || echo "(ps_bench failed: exit $rc)"
  [[ ! -f $md ]] || cat "$md"
  echo
done
[[ $netns_rc -eq 0 && $loopback_rc -eq 0 ]]
