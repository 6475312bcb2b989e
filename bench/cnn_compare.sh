#!/usr/bin/env bash
# The CNN of TensorFlow's "Distributed training with Keras" guide
# (examples/fashion_mnist/cnn.json) on Fashion-MNIST, batch 64, beside
# PyTorch (Debian's python3-torch; bench/cnn_torch.py, the same model):
#   1. one process: local_train against PyTorch, both on THREADS (1) threads;
#   2. two workers: multi_worker_mirrored (ring) against DDP with gloo;
#   3. with ACCURACY=1, EPOCHS (5) epochs under every strategy: test
#      accuracy beside local_train's.
# Throughput runs train TIMED_EPOCHS (1) epoch(s); examples/s is over all of
# them, training time only (Strata's train_examples_per_second, the same
# for PyTorch). Writes bench/results/cnn_compare.md. Run from the repository
# root after `make build`.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
BIN=build/bin
THREADS=${THREADS:-1}
TIMED_EPOCHS=${TIMED_EPOCHS:-1}
EPOCHS=${EPOCHS:-5}
ACCURACY=${ACCURACY:-0}
OUT=bench/results/cnn_compare.md
TMP=$(mktemp -d /tmp/strata-cnn-compare.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
PY=/usr/bin/python3
export OMP_NUM_THREADS=$THREADS

job_with_epochs() {  # job_with_epochs EPOCHS OUT
  $PY - "$1" "$2" <<'PYEOF'
import json, sys
job = json.load(open("examples/fashion_mnist/cnn.json"))
job["epochs"] = int(sys.argv[1])
json.dump(job, open(sys.argv[2], "w"))
PYEOF
}

field() { $PY -c "import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])" "$1" "$2"; }

job_with_epochs "$TIMED_EPOCHS" "$TMP/timed.json"
# ROUNDS rounds, each running the four side by side in turn (this machine's
# speed drifts by tens of per cent over minutes: medians of alternated runs).
ROUNDS=${ROUNDS:-3}
for r in $(seq 1 "$ROUNDS"); do
  echo "== round $r: local_train, $TIMED_EPOCHS epoch(s)"
  $BIN/local_train --job "$TMP/timed.json" --summary "$TMP/local_$r.json" | tail -n 1
  echo "== round $r: PyTorch, 1 process, $THREADS thread(s)"
  $PY bench/cnn_torch.py --workers 1 --threads "$THREADS" \
    --epochs "$TIMED_EPOCHS" > "$TMP/torch1_$r.json"
  cat "$TMP/torch1_$r.json"
  echo "== round $r: multi_worker_mirrored, 2 workers (ring)"
  $BIN/strata launch --job "$TMP/timed.json" --strategy multi_worker_mirrored \
    --collective ring --ps 0 --workers 2 --summary "$TMP/mwm_$r.json" \
    --run-dir "$TMP/mwm-run-$r" | tail -n 1
  echo "== round $r: PyTorch DDP (gloo), 2 processes"
  $PY bench/cnn_torch.py --workers 2 --threads "$THREADS" \
    --epochs "$TIMED_EPOCHS" > "$TMP/ddp_$r.json"
  cat "$TMP/ddp_$r.json"
done

mkdir -p bench/results
{
  echo "# CNN against PyTorch ($(date -u +%Y-%m-%d), $(getconf _NPROCESSORS_ONLN) cores, THREADS=$THREADS)"
  echo
  echo "Command: \`bench/cnn_compare.sh\` (TIMED_EPOCHS=$TIMED_EPOCHS)."
  echo "PyTorch: $($PY -c 'import torch; print(torch.__version__)'), BLAS:"
  echo "$(ls /usr/lib/x86_64-linux-gnu/libopenblas.so.0 2>/dev/null || echo 'reference BLAS (libopenblas0 not installed)');"
  echo "convolutions through its oneDNN (MKL-DNN) kernels."
  echo
  echo "Medians of $ROUNDS alternated rounds (each round: local_train, PyTorch, multi_worker_mirrored, DDP); every run's figure in brackets."
  echo
  echo "| run | examples/s (median) | ratio of medians | runs |"
  echo "|---|---|---|---|"
  $PY - "$TMP" "$ROUNDS" <<'PYEOF'
import json, statistics, sys
d, rounds = sys.argv[1], int(sys.argv[2])
def runs(name, key):
    return [json.load(open(f"{d}/{name}_{r}.json"))[key] for r in range(1, rounds + 1)]
l = runs("local", "train_examples_per_second")
t = runs("torch1", "examples_per_second")
m = runs("mwm", "train_examples_per_second")
p = runs("ddp", "examples_per_second")
med = statistics.median
fmt = lambda xs: ", ".join(f"{x:.0f}" for x in xs)
print(f"| local_train (1 process) | {med(l):.0f} | {med(l) / med(t):.2f} of PyTorch | {fmt(l)} |")
print(f"| PyTorch (1 process) | {med(t):.0f} | 1 | {fmt(t)} |")
print(f"| multi_worker_mirrored, 2 workers | {med(m):.0f} | {med(m) / med(p):.2f} of DDP | {fmt(m)} |")
print(f"| PyTorch DDP gloo, 2 processes | {med(p):.0f} | 1 | {fmt(p)} |")
PYEOF
} > "$OUT"

if [ "$ACCURACY" = 1 ]; then
  job_with_epochs "$EPOCHS" "$TMP/full.json"
  $BIN/local_train --job "$TMP/full.json" --summary "$TMP/full_local.json" | tail -n 1
  base=$(field "$TMP/full_local.json" test_accuracy)
  {
    echo
    echo "Test accuracy after $EPOCHS epochs (local_train: $base):"
    echo
    echo "| strategy | test accuracy | gap to local_train |"
    echo "|---|---|---|"
    echo "| local_train | $base | 0 |"
  } >> "$OUT"
  for s in "parameter_server --ps 2 --workers 2" \
           "central_storage --ps 1 --workers 2" \
           "multi_worker_mirrored --collective ring --ps 0 --workers 2" \
           "multi_worker_mirrored --collective ps --ps 1 --workers 2" \
           "mirrored --ps 0 --workers 2" \
           "one_device --ps 0 --workers 1"; do
    name=$(echo "$s" | tr ' ' '_' | tr -d '-')
    $BIN/strata launch --job "$TMP/full.json" --strategy $s \
      --summary "$TMP/$name.json" --run-dir "$TMP/$name-run" > "$TMP/$name.log" 2>&1 || true
    acc=$(field "$TMP/$name.json" test_accuracy 2>/dev/null || echo failed)
    gap=$($PY -c "print(f'{float(\"$acc\") - float(\"$base\"):+.4f}')" 2>/dev/null || echo -)
    echo "| $s | $acc | $gap |" >> "$OUT"
  done
fi
cat "$OUT"
