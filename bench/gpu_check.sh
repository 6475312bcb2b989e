#!/usr/bin/env bash
# bench/gpu_check.sh: the CUDA path's check on a GPU machine, in one run.
#
#   bench/gpu_check.sh [--no-device-ok] [OUTPUT.json]
#
# 1. Configures build-cuda (-DSTRATA_WITH_CUDA=ON, Release; ccache is used
#    by the project's CMake where installed) and builds the CUDA tests (the
#    executables of every CMake file that labels tests "cuda") and the GPU
#    benchmarks, with $JOBS parallel jobs (default: nproc).
# 2. Runs `ctest -L cuda`. With a device, FAILS if any CUDA test failed or
#    was skipped: the kernels must have run.
# 3. Runs build-cuda/bin/gpu_optimizer_bench (optimizer apply throughput
#    against the GPU's memory bandwidth), gpu_dense_bench (a Dense training
#    step, GPU against CPU) and gpu_nccl_bench (the Mirrored NCCL
#    all-reduce); each prints one JSON line. A missing binary is reported
#    as missing.
# 4. Writes everything, with nvidia-smi's output, into one JSON file:
#    OUTPUT.json (default bench/results/gpu_check-YYYYmmdd-HHMMSS.json), and
#    a copy into $OUT/ when $OUT is set.
#
# Every step has a time limit, within an overall budget of
# $GPU_CHECK_BUDGET_S seconds (default 470, under 8 minutes; the build's
# own limit is $GPU_CHECK_BUILD_S, default 330). $GPU_CHECK_BUILD_DIR
# overrides the build directory.
# Without a GPU: exits 3 with a message after the build; with
# --no-device-ok it runs the (skipping) tests and the benchmarks anyway and
# exits 0 unless something else failed (a check of this script on a machine
# without a GPU).
# Exit status: 0 all passed; 1 a step failed or is missing; 3 no GPU.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

NO_DEVICE_OK=0
OUTPUT=""
for arg in "$@"; do
  case "$arg" in
    --no-device-ok) NO_DEVICE_OK=1 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | grep '^#' | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "gpu_check: unknown flag $arg" >&2; exit 2 ;;
    *) OUTPUT="$arg" ;;
  esac
done
STAMP="$(date +%Y%m%d-%H%M%S)"
OUTPUT="${OUTPUT:-bench/results/gpu_check-$STAMP.json}"
BUILD_DIR="${GPU_CHECK_BUILD_DIR:-build-cuda}"
JOBS="${JOBS:-$(nproc)}"
BUDGET="${GPU_CHECK_BUDGET_S:-470}"
LOGS="$BUILD_DIR/gpu_check-logs"
mkdir -p "$(dirname "$OUTPUT")" "$LOGS"

START=$SECONDS
FAILED=0
STEPS=()      # JSON objects, one per step
MESSAGES=()   # human-readable problems

log() { echo "gpu_check [$((SECONDS - START))s]: $*" >&2; }

# JSON string of $1.
json_str() {
  local s="$1"
  s="${s//\\/\\\\}"
  s="${s//\"/\\\"}"
  s="${s//$'\n'/\\n}"
  s="${s//$'\r'/\\r}"
  s="${s//$'\t'/\\t}"
  # Other control characters: dropped.
  s="$(printf '%s' "$s" | tr -d '\000-\010\013\014\016-\037')"
  printf '"%s"' "$s"
}

# The last $2 lines of file $1 as a JSON string.
json_tail() { json_str "$(tail -n "${2:-40}" "$1" 2>/dev/null || true)"; }

# Seconds step may take: min(wanted, what is left of the budget - 5).
limit() {
  local left=$((BUDGET - (SECONDS - START) - 5))
  if (( left < 1 )); then echo 0; elif (( $1 < left )); then echo "$1"; else echo "$left"; fi
}

# run_step NAME WANTED_SECONDS CMD...: runs CMD under a time limit, output in
# $LOGS/NAME.log; sets STEP_RC (124: timed out; 125: no time left).
run_step() {
  local name="$1" wanted="$2"
  shift 2
  local t
  t="$(limit "$wanted")"
  if (( t < 1 )); then
    log "$name: no time left in the ${BUDGET}s budget"
    STEP_RC=125
    return 0
  fi
  log "$name (limit ${t}s): $*"
  local begin=$SECONDS
  set +e
  timeout --kill-after=10 "$t" "$@" >"$LOGS/$name.log" 2>&1
  STEP_RC=$?
  set -e
  STEP_SECONDS=$((SECONDS - begin))
  if (( STEP_RC == 124 || STEP_RC == 137 )); then
    log "$name: timed out after ${t}s"
  fi
}

add_step() {  # NAME STATUS EXTRA_JSON_FIELDS(without braces; may be empty)
  local fields="\"name\": $(json_str "$1"), \"status\": $(json_str "$2")"
  [[ -n "${3:-}" ]] && fields="$fields, $3"
  STEPS+=("{$fields}")
}

fail() { FAILED=1; MESSAGES+=("$1"); log "FAIL: $1"; }

# --- device -----------------------------------------------------------------
HAVE_DEVICE=0
SMI_TEXT="nvidia-smi not found"
SMI_QUERY=""
if command -v nvidia-smi >/dev/null 2>&1; then
  SMI_TEXT="$(timeout 30 nvidia-smi 2>&1 || true)"
  SMI_QUERY="$(timeout 30 nvidia-smi --format=csv \
    --query-gpu=index,name,memory.total,clocks.max.memory,clocks.max.sm,driver_version,pci.bus_id \
    2>&1 || true)"
  if timeout 30 nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
    HAVE_DEVICE=1
  fi
fi
log "device present: $HAVE_DEVICE; build dir $BUILD_DIR; jobs $JOBS; budget ${BUDGET}s"

# --- configure and build ----------------------------------------------------
run_step configure 120 cmake -S . -B "$BUILD_DIR" -DSTRATA_WITH_CUDA=ON \
  -DCMAKE_BUILD_TYPE=Release
if (( STEP_RC != 0 )); then
  add_step configure failed "\"rc\": $STEP_RC, \"log_tail\": $(json_tail "$LOGS/configure.log")"
  fail "configure failed (rc $STEP_RC); see $LOGS/configure.log"
else
  add_step configure ok "\"seconds\": $STEP_SECONDS"
fi

AVAILABLE=""
if (( FAILED == 0 )); then
  AVAILABLE="$(cmake --build "$BUILD_DIR" --target help 2>/dev/null |
    sed -nE 's/^\.\.\. ([A-Za-z0-9_.+-]+).*/\1/p' | sort -u)"
fi
has_target() { grep -qx "$1" <<<"$AVAILABLE"; }

# The CUDA tests: every executable of a CMake file that labels tests cuda.
mapfile -t CUDA_CMAKE < <(grep -rlE 'LABELS[^)]*cuda' --include='*.cmake' \
  --include=CMakeLists.txt kernels tests 2>/dev/null | sort)
mapfile -t TEST_TARGETS < <(
  for f in "${CUDA_CMAKE[@]}"; do
    sed -nE 's/^[[:space:]]*add_executable\(([A-Za-z0-9_.+-]+).*/\1/p' "$f"
  done | sort -u)
BENCHES=(gpu_optimizer_bench gpu_dense_bench gpu_nccl_bench)
BUILD_TARGETS=()
MISSING_TARGETS=()
for t in "${TEST_TARGETS[@]}" "${BENCHES[@]}"; do
  if has_target "$t"; then BUILD_TARGETS+=("$t"); else MISSING_TARGETS+=("$t"); fi
done

if (( FAILED == 0 )); then
  if (( ${#BUILD_TARGETS[@]} == 0 )); then
    fail "no CUDA test or benchmark target in $BUILD_DIR"
  else
    run_step build "${GPU_CHECK_BUILD_S:-330}" cmake --build "$BUILD_DIR" -j "$JOBS" --target "${BUILD_TARGETS[@]}"
    if (( STEP_RC != 0 )); then
      add_step build failed "\"rc\": $STEP_RC, \"targets\": $(json_str "${BUILD_TARGETS[*]}"), \"log_tail\": $(json_tail "$LOGS/build.log" 60)"
      fail "build failed (rc $STEP_RC); see $LOGS/build.log"
    else
      add_step build ok "\"seconds\": $STEP_SECONDS, \"targets\": $(json_str "${BUILD_TARGETS[*]}"), \"missing_targets\": $(json_str "${MISSING_TARGETS[*]:-}")"
    fi
  fi
fi
for t in "${MISSING_TARGETS[@]:-}"; do
  [[ -z "$t" ]] && continue
  log "target $t is not defined in $BUILD_DIR (not written yet, or its CMake file is not included)"
done

if (( HAVE_DEVICE == 0 && NO_DEVICE_OK == 0 )); then
  MESSAGES+=("no GPU on this machine (nvidia-smi lists none): the CUDA tests and GPU benchmarks need one; --no-device-ok runs them anyway (they skip)")
  log "no GPU on this machine (nvidia-smi lists none); built only. Use --no-device-ok to run the skipping tests."
fi

# --- CUDA tests -------------------------------------------------------------
RUN_REST=0
if (( FAILED == 0 )) && (( HAVE_DEVICE == 1 || NO_DEVICE_OK == 1 )); then RUN_REST=1; fi
if (( RUN_REST == 1 )); then
  run_step ctest 150 ctest --test-dir "$BUILD_DIR" -L cuda --output-on-failure \
    --timeout 180
  CTEST_LOG="$LOGS/ctest.log"
  total="$(sed -nE 's/.*tests passed, ([0-9]+) tests failed out of ([0-9]+).*/\2/p' "$CTEST_LOG" | tail -1)"
  failed_n="$(sed -nE 's/.*tests passed, ([0-9]+) tests failed out of ([0-9]+).*/\1/p' "$CTEST_LOG" | tail -1)"
  skipped="$(grep -E '\*\*\*Skipped|\(Skipped\)|Not Run|\(Disabled\)' "$CTEST_LOG" |
    sed -nE 's/.*(Test +#[0-9]+: |- )([A-Za-z0-9_./-]+).*/\2/p' | sort -u | tr '\n' ' ' || true)"
  total="${total:-0}"; failed_n="${failed_n:-0}"
  status=ok
  if (( STEP_RC != 0 )); then status=failed; fi
  if (( total == 0 )); then status=failed; fi
  if (( HAVE_DEVICE == 1 )) && [[ -n "$skipped" ]]; then status=failed; fi
  add_step ctest "$status" "\"rc\": $STEP_RC, \"tests\": $total, \"failed\": $failed_n, \"skipped\": $(json_str "$skipped"), \"seconds\": ${STEP_SECONDS:-0}, \"log_tail\": $(json_tail "$CTEST_LOG" 60)"
  if [[ "$status" != ok ]]; then
    if (( total == 0 )); then
      fail "ctest -L cuda ran no test"
    elif (( HAVE_DEVICE == 1 )) && [[ -n "$skipped" ]]; then
      fail "CUDA tests skipped on a machine with a GPU: $skipped(see $CTEST_LOG)"
    else
      fail "CUDA tests failed ($failed_n of $total, rc $STEP_RC); see $CTEST_LOG"
    fi
  fi
  log "ctest -L cuda: $total tests, $failed_n failed, skipped: ${skipped:-none}"
fi

# --- benchmarks -------------------------------------------------------------
BENCH_JSON=()
run_bench() {  # NAME WANTED_SECONDS ARGS...
  local name="$1" wanted="$2"
  shift 2
  local bin="$BUILD_DIR/bin/$name"
  if [[ ! -x "$bin" ]]; then
    BENCH_JSON+=("$(json_str "$name"): {\"status\": \"missing\", \"message\": $(json_str "$bin was not built (target not defined yet, or its build failed)")}")
    if (( HAVE_DEVICE == 1 )); then fail "$name is missing ($bin)"; else log "$name is missing ($bin)"; fi
    return 0
  fi
  run_step "$name" "$wanted" "$bin" "$@"
  local out="$LOGS/$name.log"
  # The benchmark's one JSON line: the last stdout line that is an object.
  local line
  line="$(grep -E '^\{.*\}[[:space:]]*$' "$out" | tail -1 || true)"
  local status=ok
  # Exit 2 is "no device", unless it is a command-line error (whose one
  # line points to --help).
  if (( STEP_RC == 2 )) && ! grep -q -- '--help)$' "$out"; then
    status=no_device
  elif (( STEP_RC != 0 )) || [[ -z "$line" ]]; then
    status=failed
  fi
  local fields="\"status\": $(json_str "$status"), \"rc\": $STEP_RC, \"seconds\": ${STEP_SECONDS:-0}"
  if [[ -n "$line" ]]; then
    fields="$fields, \"result\": $line"
  else
    fields="$fields, \"output_tail\": $(json_tail "$out" 30)"
  fi
  BENCH_JSON+=("$(json_str "$name"): {$fields}")
  if [[ "$status" == failed ]] || { [[ "$status" == no_device ]] && (( HAVE_DEVICE == 1 )); }; then
    fail "$name: $status (rc $STEP_RC); see $out"
  fi
  log "$name: $status"
}
if (( RUN_REST == 1 )); then
  run_bench gpu_optimizer_bench 75
  run_bench gpu_dense_bench 75
  run_bench gpu_nccl_bench 60 --seconds=0.5
fi

# --- report -----------------------------------------------------------------
if (( HAVE_DEVICE == 0 && NO_DEVICE_OK == 0 )); then
  OVERALL=no_device
elif (( FAILED == 1 )); then
  OVERALL=failed
else
  OVERALL=ok
fi
{
  printf '{\n  "check": "gpu_check",\n  "time": %s,\n' "$(json_str "$(date -Iseconds)")"
  printf '  "commit": %s,\n' "$(json_str "$(git rev-parse --short HEAD 2>/dev/null || echo unknown)")"
  printf '  "host": %s,\n  "device_present": %s,\n' "$(json_str "$(hostname)")" \
    "$([[ $HAVE_DEVICE == 1 ]] && echo true || echo false)"
  printf '  "status": %s,\n  "seconds": %d,\n  "budget_seconds": %d,\n' \
    "$(json_str "$OVERALL")" "$((SECONDS - START))" "$BUDGET"
  printf '  "jobs": %s,\n  "build_dir": %s,\n' "$JOBS" "$(json_str "$BUILD_DIR")"
  printf '  "nvidia_smi": %s,\n  "nvidia_smi_query": %s,\n' \
    "$(json_str "$SMI_TEXT")" "$(json_str "$SMI_QUERY")"
  printf '  "messages": ['
  sep=""
  for m in "${MESSAGES[@]:-}"; do
    [[ -z "$m" ]] && continue
    printf '%s\n    %s' "$sep" "$(json_str "$m")"; sep=","
  done
  printf '\n  ],\n  "steps": ['
  sep=""
  for s in "${STEPS[@]:-}"; do
    [[ -z "$s" ]] && continue
    printf '%s\n    %s' "$sep" "$s"; sep=","
  done
  printf '\n  ],\n  "benchmarks": {'
  sep=""
  for b in "${BENCH_JSON[@]:-}"; do
    [[ -z "$b" ]] && continue
    printf '%s\n    %s' "$sep" "$b"; sep=","
  done
  printf '\n  }\n}\n'
} >"$OUTPUT"
if command -v python3 >/dev/null 2>&1 &&
   ! python3 -c 'import json,sys; json.load(open(sys.argv[1]))' "$OUTPUT" 2>/dev/null; then
  log "warning: $OUTPUT is not valid JSON (a benchmark printed a malformed line?)"
fi
if [[ -n "${OUT:-}" ]]; then
  mkdir -p "$OUT"
  cp "$OUTPUT" "$OUT/"
  cp -r "$LOGS" "$OUT/gpu_check-logs" 2>/dev/null || true
fi
log "wrote $OUTPUT (status $OVERALL, $((SECONDS - START))s)"

case "$OVERALL" in
  ok) exit 0 ;;
  no_device)
    echo "gpu_check: no GPU on this machine: built $BUILD_DIR, ran nothing on a device. Run on a machine with a GPU, or pass --no-device-ok to run the skipping tests." >&2
    exit 3 ;;
  *)
    printf 'gpu_check: FAILED:\n' >&2
    printf '  - %s\n' "${MESSAGES[@]}" >&2
    exit 1 ;;
esac
