#!/usr/bin/env bash
# The criteo_like job (examples/criteo_like/job.json) on a generated set:
# local_train, 1 PS + 1 worker and 2 PS + 2 workers (async), and 2 PS + 2
# workers with update "sync", side by side in one run, with the generator's
# Bayes AUC of the test rows (datagen --split: the ceiling of the AUC any
# model reaches on them). Writes bench/results/criteo_compare.md.
#   bench/criteo_compare.sh [TRAIN_EXAMPLES] [TEST_EXAMPLES] [EPOCHS]
set -euo pipefail
cd "$(dirname "$0")/.."
TRAIN=${1:-10000000}
TEST=${2:-1000000}
EPOCHS=${3:-$(python3 -c "import json;print(json.load(open('examples/criteo_like/job.json'))['epochs'])")}
BIN=build/bin
DIR=$(mktemp -d /tmp/strata-criteo-bench-XXXXXX)
trap 'rm -rf "$DIR"' EXIT
"$BIN/strata" datagen --out "$DIR/all.tsv" --examples $((TRAIN + TEST)) \
  --seed 1 --split "$TRAIN" > "$DIR/datagen.json"
head -n "$TRAIN" "$DIR/all.tsv" > "$DIR/train.tsv"
tail -n "$TEST" "$DIR/all.tsv" > "$DIR/test.tsv"
rm "$DIR/all.tsv"
python3 - "$DIR" "$EPOCHS" <<'PY'
import json, sys
d, epochs = sys.argv[1], int(sys.argv[2])
j = json.load(open("examples/criteo_like/job.json"))
j["data"]["train"]["path"] = d + "/train.tsv"
j["data"]["test"]["path"] = d + "/test.tsv"
j["epochs"] = epochs
json.dump(j, open(d + "/job.json", "w"))
j["strategy"]["update"] = "sync"
json.dump(j, open(d + "/job_sync.json", "w"))
PY
BAYES=$(python3 -c "import json;print('%.4f' % json.load(open('$DIR/datagen.json'))['test_bayes_auc'])")
"$BIN/local_train" --job "$DIR/job.json" --summary "$DIR/local.json" | tail -n 2
"$BIN/strata" launch --job "$DIR/job.json" --ps 1 --workers 1 --summary "$DIR/l11.json" | tail -n 2
"$BIN/strata" launch --job "$DIR/job.json" --ps 2 --workers 2 --summary "$DIR/l22.json" | tail -n 2
"$BIN/strata" launch --job "$DIR/job_sync.json" --ps 2 --workers 2 --summary "$DIR/s22.json" | tail -n 2
mkdir -p bench/results
python3 - "$DIR" "$TRAIN" "$TEST" "$EPOCHS" "$BAYES" > bench/results/criteo_compare.md <<'PY'
import json, sys
d, train, test, epochs, bayes = sys.argv[1:]
local = json.load(open(d + "/local.json"))
job = json.load(open(d + "/job.json"))
e = job["model"]["embeddings"][0]
layers = "-".join(str(l["units"]) for l in job["model"]["layers"])
print("`bench/criteo_compare.sh %s %s %s`: examples/criteo_like/job.json "
      "(%d tables of dim %d, %s %g; layers %s, %s) on %s generated "
      "training and %s test examples (seed 1; the generator's Bayes AUC of "
      "the test rows %s), %s epoch(s).\n" % (
          train, test, epochs, len(job["model"]["embeddings"]),
          e["output_dim"], e["optimizer"]["type"],
          e["optimizer"]["learning_rate"], layers,
          job["optimizer"]["type"], train, test, bayes, epochs))
print("| run | train examples/s | vs local_train | test AUC | AUC - local | Bayes AUC - AUC | test log loss |")
print("|---|---|---|---|---|---|---|")
lt = local["train_examples_per_second"]
la = local["test_auc"]
print("| local_train | %.0f | 1.00 | %.4f | 0 | %.4f | %.4f |" % (lt, la, float(bayes) - la, local["test_loss"]))
for name, f in (("1 PS + 1 worker, async", "l11"),
                ("2 PS + 2 workers, async", "l22"),
                ("2 PS + 2 workers, sync", "s22")):
    s = json.load(open("%s/%s.json" % (d, f)))
    t = s.get("train_examples_per_second", 0)
    a = s["test_auc"]
    print("| %s | %.0f | %.2f | %.4f | %+.4f | %.4f | %.4f |" % (name, t, t / lt, a, a - la, float(bayes) - a, s["test_loss"]))
PY
cat bench/results/criteo_compare.md
