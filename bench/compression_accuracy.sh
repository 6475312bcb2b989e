#!/usr/bin/env bash
# The accuracy and throughput cost of gradient compression on the reference
# job, in one script: local_train, then strata launch (parameter_server,
# every byte over gRPC: --ps_shared_memory=false) with
# strategy.gradient_compression none, bf16 and fp16, RUNS times each, for
# 1 PS + 1 worker and 2 PS + 2 workers. Prints a Markdown table and writes
# it to bench/results/compression_accuracy.md.
#
#   bench/compression_accuracy.sh [EPOCHS]        # default 10
#   RUNS=3 bench/compression_accuracy.sh
#
# Needs a built tree (build/bin; BIN_DIR overrides).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
epochs=${1:-10}
runs=${RUNS:-1}
bin=${BIN_DIR:-build/bin}
base_job=examples/fashion_mnist/job.json
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
md=bench/results/compression_accuracy.md

for b in local_train strata; do
  if [[ ! -x $bin/$b ]]; then
    echo "compression_accuracy: $bin/$b not found: build the tree first" >&2
    exit 1
  fi
done

for c in none bf16 fp16; do
  python3 - "$base_job" "$out/job_$c.json" "$c" <<'PY'
import json, sys
job = json.load(open(sys.argv[1]))
job.setdefault("strategy", {})["gradient_compression"] = sys.argv[3]
json.dump(job, open(sys.argv[2], "w"), indent=2)
PY
done

echo "compression_accuracy: $base_job, $epochs epochs, $runs run(s) each" >&2
for r in $(seq 1 "$runs"); do
  "$bin/local_train" --job "$base_job" --epochs "$epochs" \
    --summary "$out/local_$r.json" >&2
  for topo in 1 2; do
    for c in none bf16 fp16; do
      "$bin/strata" launch --job "$out/job_$c.json" --epochs "$epochs" \
        --ps "$topo" --workers "$topo" --ps_shared_memory=false \
        --summary "$out/ps${topo}_${c}_$r.json" >&2
    done
  done
done

python3 - "$out" "$runs" "$epochs" "$md" <<'PY'
import json, os, statistics, sys
d, runs, epochs, md = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
def load(name):
    return json.load(open(os.path.join(d, name)))
local = [load(f"local_{r}.json") for r in range(1, runs + 1)]
def fmt(values, spec):
    if len(values) == 1:
        return format(values[0], spec)
    return f"{format(min(values), spec)}-{format(max(values), spec)}"
lines = []
lines.append(f"Command: `RUNS={runs} bench/compression_accuracy.sh {epochs}` "
             f"(reference job, {epochs} epochs, every byte over gRPC)\n")
lines.append("| run | gradient_compression | test accuracy | vs local_train | "
             "train examples/s | vs uncompressed |")
lines.append("|---|---|---|---|---|---|")
la = [s["test_accuracy"] for s in local]
lines.append(f"| local_train | - | {fmt(la, '.4f')} | - | "
             f"{fmt([s['train_examples_per_second'] for s in local], '.0f')} | - |")
for topo in (1, 2):
    base = None
    for c in ("none", "bf16", "fp16"):
        s = [load(f"ps{topo}_{c}_{r}.json") for r in range(1, runs + 1)]
        acc = [x["test_accuracy"] for x in s]
        eps = [x["train_examples_per_second"] for x in s]
        if c == "none":
            base = statistics.median(eps)
        diff = [a - statistics.median(la) for a in acc]
        lines.append(
            f"| {topo} PS + {topo} worker(s), async | {c} | {fmt(acc, '.4f')} | "
            f"{fmt(diff, '+.4f')} | {fmt(eps, '.0f')} | "
            f"{statistics.median(eps) / base:.2f} |")
text = "\n".join(lines) + "\n"
print(text)
os.makedirs(os.path.dirname(md), exist_ok=True)
open(md, "w").write(text)
PY
