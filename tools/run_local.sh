#!/usr/bin/env bash
# Starts one parameter server on 127.0.0.1 (a free port), runs the quick PS
# benchmark against it, then stops the server with SIGTERM (`make ps-smoke`).
#
# Environment: STRATA_BUILD_DIR (default: build), STRATA_START_TIMEOUT
# (seconds to wait for "listening on HOST:PORT", default 30).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
build_dir="${STRATA_BUILD_DIR:-build}"
start_timeout="${STRATA_START_TIMEOUT:-30}"
ps_bin="$build_dir/bin/strata-ps"
bench_bin="$build_dir/bin/ps_bench"

for bin in "$ps_bin" "$bench_bin"; do
  if [[ ! -x "$bin" ]]; then
    echo "run_local: $bin not found; run 'make build' first" >&2
    exit 1
  fi
done

workdir="$(mktemp -d -t strata-run.XXXXXX)"
checkpoint_dir="$(mktemp -d -t strata-checkpoints.XXXXXX)"
ps_log="$workdir/strata-ps.log"
ps_pid=""
keep_logs=1

# Stops the PS if it is still running (SIGTERM, then SIGKILL after 10 s) and
# removes the temporary files unless a failure left them to inspect.
cleanup() {
  local rc=$?
  if [[ -n "$ps_pid" ]] && kill -0 "$ps_pid" 2>/dev/null; then
    kill -TERM "$ps_pid" 2>/dev/null || true
    for _ in $(seq 100); do
      kill -0 "$ps_pid" 2>/dev/null || break
      sleep 0.1
    done
    kill -KILL "$ps_pid" 2>/dev/null || true
    wait "$ps_pid" 2>/dev/null || true
  fi
  if [[ $rc -eq 0 && $keep_logs -eq 0 ]]; then
    rm -rf "$workdir" "$checkpoint_dir"
  else
    echo "run_local: failed (exit $rc); PS log: $ps_log" >&2
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

echo "run_local: starting $ps_bin (checkpoints in $checkpoint_dir)"
"$ps_bin" --port 0 --host 127.0.0.1 --checkpoint-dir "$checkpoint_dir" \
  >"$ps_log" 2>&1 &
ps_pid=$!

# Wait for "listening on HOST:PORT", bounded.
target=""
deadline=$((SECONDS + start_timeout))
while [[ -z "$target" ]]; do
  target="$(sed -n 's/^listening on \([^[:space:]]*\).*/\1/p' "$ps_log" |
    head -n 1)"
  [[ -n "$target" ]] && break
  if ! kill -0 "$ps_pid" 2>/dev/null; then
    wait "$ps_pid" && ps_rc=0 || ps_rc=$?
    ps_pid=""
    echo "run_local: strata-ps exited (status $ps_rc) before listening:" >&2
    tail -n 20 "$ps_log" >&2
    exit 1
  fi
  if ((SECONDS >= deadline)); then
    echo "run_local: strata-ps did not print 'listening on HOST:PORT'" \
      "within ${start_timeout}s:" >&2
    tail -n 20 "$ps_log" >&2
    exit 1
  fi
  sleep 0.1
done
echo "run_local: strata-ps (pid $ps_pid) listening on $target"

echo "run_local: $bench_bin --target $target --quick"
"$bench_bin" --target "$target" --quick

echo "run_local: stopping strata-ps (SIGTERM)"
kill -TERM "$ps_pid"
deadline=$((SECONDS + start_timeout))
while kill -0 "$ps_pid" 2>/dev/null && ((SECONDS < deadline)); do
  sleep 0.1
done
if kill -0 "$ps_pid" 2>/dev/null; then
  echo "run_local: strata-ps did not exit within ${start_timeout}s of SIGTERM" >&2
  exit 1
fi
wait "$ps_pid" && ps_rc=0 || ps_rc=$?
ps_pid=""
if ((ps_rc != 0)); then
  echo "run_local: strata-ps exited with status $ps_rc after SIGTERM" >&2
  tail -n 20 "$ps_log" >&2
  exit 1
fi
keep_logs=0
echo "run_local: done (strata-ps drained and exited 0)"
