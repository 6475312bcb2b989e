#!/usr/bin/env bash
# A job (default the residual-block example) under local_train and the
# strategies named, EPOCHS epochs on the whole data: test accuracy, its gap
# to local_train, train examples/s and its ratio. Writes
# bench/results/model_strategies_<job name>.md.
#   bench/model_strategies.sh [JOB] [EPOCHS]
#   STRATEGIES="parameter_server mirrored" bench/model_strategies.sh ...
set -euo pipefail
cd "$(dirname "$0")/.."
JOB=${1:-examples/fashion_mnist/resnet_block.json}
EPOCHS=${2:-3}
STRATEGIES=${STRATEGIES:-"parameter_server central_storage multi_worker_mirrored mirrored"}
BIN=build/bin
DIR=$(mktemp -d /tmp/strata-model-strategies-XXXXXX)
trap 'rm -rf "$DIR"' EXIT
python3 - "$JOB" "$EPOCHS" "$DIR/job.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
j["epochs"] = int(sys.argv[2])
j.setdefault("checkpoint", {})["every_steps"] = 0
json.dump(j, open(sys.argv[3], "w"))
PY
NAME=$(python3 -c "import json;print(json.load(open('$DIR/job.json'))['name'])")
"$BIN/local_train" --job "$DIR/job.json" --summary "$DIR/local.json" | tail -n 1
for s in $STRATEGIES; do
  case $s in
    parameter_server) flags="--ps 2 --workers 2" ;;
    central_storage) flags="--ps 1 --workers 2" ;;
    multi_worker_mirrored) flags="--collective ring --ps 0 --workers 2" ;;
    mirrored) flags="--ps 0 --workers 2" ;;
    *) flags="--ps 0 --workers 1" ;;
  esac
  echo "== $s $flags"
  "$BIN/strata" launch --job "$DIR/job.json" --strategy "$s" $flags \
    --summary "$DIR/$s.json" --run-dir "$DIR/run_$s" | tail -n 1 || true
done
mkdir -p bench/results
OUT="bench/results/model_strategies_${NAME}.md"
python3 - "$DIR" "$JOB" "$EPOCHS" "$STRATEGIES" > "$OUT" <<'PY'
import json, sys
d, job, epochs, strategies = sys.argv[1:]
local = json.load(open(d + "/local.json"))
print(f"`bench/model_strategies.sh {job} {epochs}`, {epochs} epoch(s), whole data "
      f"(2 workers; parameter_server on 2 PS tasks, async).\n")
print("| run | test accuracy | gap to local_train | train examples/s | vs local_train |")
print("|---|---|---|---|---|")
la, le = local["test_accuracy"], local["train_examples_per_second"]
print(f"| local_train | {la:.4f} | 0 | {le:.0f} | 1.00 |")
for s in strategies.split():
    try:
        r = json.load(open(f"{d}/{s}.json"))
    except Exception:
        print(f"| {s} | failed | | | |")
        continue
    a, e = r["test_accuracy"], r["train_examples_per_second"]
    print(f"| {s} | {a:.4f} | {a - la:+.4f} | {e:.0f} | {e / le:.2f} |")
PY
cat "$OUT"
