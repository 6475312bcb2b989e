#!/usr/bin/env bash
# Single-process training against Strata's ParameterServerStrategy on the
# same job, in one script: test accuracy and examples/s side by side.
#
#   bench/train_compare.sh [JOB] [EPOCHS]
#
# Runs (1) build/bin/local_train, (2) strata launch with 1 PS + 1 worker,
# (3) strata launch with 2 PS + 2 workers, (4) 1 PS + 1 worker with every
# byte over gRPC (--ps_shared_memory=false), and prints a Markdown table.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
job=${1:-examples/fashion_mnist/job.json}
epochs=${2:-10}
bin=build/bin
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

echo "train_compare: $job, $epochs epochs" >&2
"$bin/local_train" --job "$job" --epochs "$epochs" --summary "$out/local.json" >&2
"$bin/strata" launch --job "$job" --epochs "$epochs" --ps 1 --workers 1 \
  --summary "$out/ps1w1.json" >&2
"$bin/strata" launch --job "$job" --epochs "$epochs" --ps 2 --workers 2 \
  --summary "$out/ps2w2.json" >&2
"$bin/strata" launch --job "$job" --epochs "$epochs" --ps 1 --workers 1 \
  --ps_shared_memory=false --summary "$out/ps1w1_grpc.json" >&2

python3 - "$out" <<'PY'
import json, sys, os
d = sys.argv[1]
local = json.load(open(os.path.join(d, "local.json")))
rows = [("single process (local_train)", local),
        ("strata launch, 1 PS + 1 worker", json.load(open(os.path.join(d, "ps1w1.json")))),
        ("strata launch, 2 PS + 2 workers", json.load(open(os.path.join(d, "ps2w2.json")))),
        ("strata launch, 1 PS + 1 worker, gRPC only", json.load(open(os.path.join(d, "ps1w1_grpc.json"))))]
# Training throughput: examples over the epochs' training time (local_train
# times its epochs; strata times each epoch from its first step handed out
# to its last step reported), so neither side counts start-up or
# evaluations. The wall-clock column adds the distributed runs' start-up
# (processes, data loading, variable creation) and evaluations.
base = local["train_examples_per_second"]
print("| run | test accuracy | train examples/s | vs single process | examples/s over the whole run |")
print("|---|---|---|---|---|")
for name, s in rows:
    print(f"| {name} | {s['test_accuracy']:.4f} | {s['train_examples_per_second']:.0f} | {s['train_examples_per_second']/base:.2f} | {s['examples_per_second']:.0f} |")
for name, s in rows[1:]:
    print(f"\n{name} summary: " + json.dumps({k: s[k] for k in s if k not in ('run_dir', 'epochs_detail')}))
PY
