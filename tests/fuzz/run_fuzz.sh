#!/usr/bin/env bash
# Runs libFuzzer targets built in a STRATA_FUZZ build, one after the other.
#
#   tests/fuzz/run_fuzz.sh BUILD_DIR SECONDS TARGET...
#
# Each target starts from its seed corpus (tests/fuzz/<target>/) and its
# regression inputs (tests/fuzz/regressions/<target>/), keeps what it finds
# in BUILD_DIR/fuzz-corpus/<target>/ (so later runs go on from there) and
# writes a crashing input to BUILD_DIR/fuzz-artifacts/<target>/. Prints one
# line per target (executions, coverage, result) and exits 1 when any
# target found something. A finding, once fixed, belongs in
# tests/fuzz/regressions/<target>/ (a descriptive file name), where
# `make test` replays it.
set -euo pipefail

if [ $# -lt 3 ]; then
  echo "usage: $0 BUILD_DIR SECONDS TARGET..." >&2
  exit 2
fi
build=$1
seconds=$2
shift 2
src=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

failed=()
summary=()
for target in "$@"; do
  bin="$build/bin/fuzz_$target"
  if [ ! -x "$bin" ]; then
    echo "run_fuzz: $bin is not built" >&2
    exit 2
  fi
  corpus="$build/fuzz-corpus/$target"
  artifacts="$build/fuzz-artifacts/$target"
  log="$build/fuzz-logs/$target.log"
  mkdir -p "$corpus" "$artifacts" "$(dirname "$log")"
  dirs=("$corpus" "$src/$target")
  if [ -d "$src/regressions/$target" ]; then
    dirs+=("$src/regressions/$target")
  fi
  echo "run_fuzz: $target for ${seconds}s (log: $log)"
  rc=0
  "$bin" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$artifacts/" "${dirs[@]}" \
    >"$log" 2>&1 || rc=$?
  # The last status line: "#N DONE cov: C ft: F corp: ..." (or the last
  # progress line when the run stopped on a finding).
  last=$(grep -E '^#[0-9]+' "$log" | tail -n 1 || true)
  execs=$(grep -E '^stat::number_of_executed_units:' "$log" |
    awk '{print $2}' || true)
  cov=$(sed -nE 's/.* cov: ([0-9]+).*/\1/p' <<<"$last")
  ft=$(sed -nE 's/.* ft: ([0-9]+).*/\1/p' <<<"$last")
  if [ "$rc" -eq 0 ]; then
    result="ok"
  else
    result="FINDING (exit $rc): $(grep -m1 -E 'ERROR|FUZZ_CHECK|runtime error' "$log" || true)"
    crash=$(ls -t "$artifacts" 2>/dev/null | head -n 1)
    [ -n "$crash" ] && result="$result; input: $artifacts/$crash"
    failed+=("$target")
  fi
  summary+=("$(printf '%-20s execs %-10s cov %-6s ft %-6s %s' \
    "$target" "${execs:-?}" "${cov:-?}" "${ft:-?}" "$result")")
done

echo
echo "run_fuzz: ${seconds}s per target"
printf '%s\n' "${summary[@]}"
if [ ${#failed[@]} -gt 0 ]; then
  echo "run_fuzz: findings in: ${failed[*]}" >&2
  exit 1
fi
