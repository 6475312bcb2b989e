#!/usr/bin/env bash
# Every strategy on the same job, in one script: `strata launch --strategy X`
# for parameter_server, central_storage, multi_worker_mirrored (ring and ps
# collectives) and mirrored, beside the single-process run (local_train).
# Prints a Markdown table and each run's summary JSON.
#
#   bench/strategies.sh [JOB] [EPOCHS] [SUMMARY_DIR]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
job=${1:-examples/fashion_mnist/job.json}
epochs=${2:-10}
out=${3:-$(mktemp -d)}
mkdir -p "$out"
bin=build/bin

echo "strategies: $job, $epochs epochs, summaries in $out" >&2
"$bin/local_train" --job "$job" --epochs "$epochs" --summary "$out/local.json" >&2
run() {
  local name=$1
  shift
  "$bin/strata" launch --job "$job" --epochs "$epochs" "$@" \
    --summary "$out/$name.json" >&2
}
run parameter_server --strategy parameter_server --ps 2 --workers 2
run central_storage --strategy central_storage --ps 1 --workers 2
run mwm_ring --strategy multi_worker_mirrored --collective ring --workers 2
run mwm_ps --strategy multi_worker_mirrored --collective ps --ps 1 --workers 2
run mirrored --strategy mirrored --workers 2

python3 - "$out" <<'PY'
import json, os, sys
d = sys.argv[1]
local = json.load(open(os.path.join(d, "local.json")))
rows = [("single process (local_train)", "local"),
        ("parameter_server, 2 PS + 2 workers", "parameter_server"),
        ("central_storage, 1 PS + 2 workers", "central_storage"),
        ("multi_worker_mirrored ring, 2 workers", "mwm_ring"),
        ("multi_worker_mirrored ps, 1 PS + 2 workers", "mwm_ps"),
        ("mirrored, 1 worker x 2 replicas", "mirrored")]
base = local["examples_per_second"]
print("| run | test accuracy | vs single process | examples/s | vs single process |")
print("|---|---|---|---|---|")
for name, key in rows:
    s = json.load(open(os.path.join(d, key + ".json")))
    print(f"| {name} | {s['test_accuracy']:.4f} | {s['test_accuracy'] - local['test_accuracy']:+.4f} "
          f"| {s['examples_per_second']:.0f} | {s['examples_per_second'] / base:.2f} |")
for name, key in rows[1:]:
    s = json.load(open(os.path.join(d, key + ".json")))
    print(f"\n{name}:\n```json\n" + json.dumps(
        {k: s[k] for k in s if k not in ("run_dir", "epochs_detail")}) + "\n```")
PY
