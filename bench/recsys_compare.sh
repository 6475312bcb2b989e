#!/usr/bin/env bash
# The recommendation models of examples/criteo_like/ in Keras's model
# format (dlrm.json: bottom MLP + DotInteraction + top MLP; dcn.json:
# DCN-v2's Cross layers; wide_deep.json: two inputs) on one generated set
# (strata datagen --split, train and test files), each under local_train,
# 1 PS + 1 worker and 2 PS + 2 workers (parameter_server async): test AUC
# and train examples/s beside the generator's ceilings of the test rows
# (Bayes AUC, and the AUC of an oracle that knows the ids seen at least
# twice in training). Writes bench/results/recsys_compare.md.
#   bench/recsys_compare.sh [TRAIN_EXAMPLES] [TEST_EXAMPLES] [EPOCHS]
set -euo pipefail
cd "$(dirname "$0")/.."
TRAIN=${1:-400000}
TEST=${2:-50000}
EPOCHS=${3:-2}
BIN=build/bin
DIR=$(mktemp -d /tmp/strata-recsys-bench-XXXXXX)
trap 'rm -rf "$DIR"' EXIT
"$BIN/strata" datagen --out "$DIR/data/train.tsv" --test-out "$DIR/data/test.tsv" \
  --examples $((TRAIN + TEST)) --split "$TRAIN" --seed 1 > "$DIR/datagen.json"
for m in job dlrm dcn wide_deep; do
  python3 - "$DIR" "$EPOCHS" "$m" <<'PY'
import json, sys
d, epochs, m = sys.argv[1], int(sys.argv[2]), sys.argv[3]
j = json.load(open(f"examples/criteo_like/{m}.json"))
j["data"]["train"]["path"] = d + "/data/train.tsv"
j["data"]["test"]["path"] = d + "/data/test.tsv"
j["epochs"] = epochs
json.dump(j, open(f"{d}/{m}.json", "w"))
PY
  echo "== $m"
  "$BIN/local_train" --job "$DIR/$m.json" --summary "$DIR/${m}_local.json" | tail -n 1
  "$BIN/strata" launch --job "$DIR/$m.json" --ps 1 --workers 1 \
    --summary "$DIR/${m}_11.json" --run-dir "$DIR/run_${m}_11" | tail -n 1
  "$BIN/strata" launch --job "$DIR/$m.json" --ps 2 --workers 2 \
    --summary "$DIR/${m}_22.json" --run-dir "$DIR/run_${m}_22" | tail -n 1
done
mkdir -p bench/results
python3 - "$DIR" "$TRAIN" "$TEST" "$EPOCHS" > bench/results/recsys_compare.md <<'PY'
import json, sys
d, train, test, epochs = sys.argv[1:]
g = json.load(open(d + "/data/train.tsv.summary.json"))
bayes, seen2 = g["test_bayes_auc"], g["seen_ids_auc"]["2"]
print(f"`bench/recsys_compare.sh {train} {test} {epochs}`: generated Criteo-format "
      f"data (seed 1), {train} training and {test} test examples, {epochs} "
      f"epoch(s), 26 tables of dimension 8 (the MLP job: 1) on the PS. "
      f"Ceilings of the test rows: Bayes AUC {bayes:.4f}; an oracle that "
      f"knows every id seen at least twice in training {seen2:.4f}.\n")
print("| model | run | train examples/s | vs local_train | test AUC | seen-ids ceiling - AUC |")
print("|---|---|---|---|---|---|")
names = {"job": "MLP (job.json)", "dlrm": "DLRM", "dcn": "DCN-v2",
         "wide_deep": "wide & deep"}
for m in ("job", "dlrm", "dcn", "wide_deep"):
    local = json.load(open(f"{d}/{m}_local.json"))
    base = local["train_examples_per_second"]
    rows = [("local_train", local)]
    for tag, label in (("11", "1 PS + 1 worker"), ("22", "2 PS + 2 workers")):
        try:
            rows.append((label, json.load(open(f"{d}/{m}_{tag}.json"))))
        except Exception:
            rows.append((label, None))
    for label, s in rows:
        if s is None:
            print(f"| {names[m]} | {label} | failed | | | |")
            continue
        eps = s["train_examples_per_second"]
        auc = s["test_auc"]
        print(f"| {names[m]} | {label} | {eps:.0f} | {eps / base:.2f} | "
              f"{auc:.4f} | {seen2 - auc:.4f} |")
PY
cat bench/results/recsys_compare.md
