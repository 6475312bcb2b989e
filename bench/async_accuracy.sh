#!/usr/bin/env bash
# Async accuracy against the single process on the reference job, in one
# script (issue 14: "async accuracy holds as the plane gets faster"):
# local_train, then strata launch (parameter_server, async) RUNS times each
# for 1 PS + 1 worker and 2 PS + 2 workers, on the same-host shared-memory
# plane and with every byte over gRPC (--ps_shared_memory=false), each
# worker running STEPS_IN_FLIGHT steps at once. Prints a Markdown table
# (every run's test accuracy, its gap to local_train, examples/s) and writes
# it to bench/results/async_accuracy_s<STEPS_IN_FLIGHT>.md.
#
#   bench/async_accuracy.sh [EPOCHS]                      # default 10
#   RUNS=5 STEPS_IN_FLIGHT=1 bench/async_accuracy.sh
#   STALENESS_LR=inverse STALENESS_TOLERANCE=1 bench/async_accuracy.sh
#   BETA_1=0.8 bench/async_accuracy.sh      # Adam's beta_1 in the async runs
#   STRATEGY='{"staleness_compensation": "dc", "dc_lambda": 0.04}' TAG=dc \
#     bench/async_accuracy.sh                # any strategy fields (async runs)
#   TOPOLOGIES="1:1 2:2 1:4" bench/async_accuracy.sh   # PS:workers per row
#
# STALENESS_LR (and STALENESS_TOLERANCE) set the job's strategy fields of
# the same names (a staleness-scaled learning rate); the table then goes
# to bench/results/async_accuracy_s<STEPS_IN_FLIGHT>_<STALENESS_LR>_t<TOL>.md.
# BETA_1 sets the optimizer's beta_1 of the async runs only (local_train
# keeps the job's), to test whether the momentum that asynchrony adds is
# what costs accuracy; the table's name then ends in _b<BETA_1>.
# STRATEGY merges its JSON object into the async runs' job.strategy (the
# table's name then ends in _<TAG>). TOPOLOGIES lists the rows' PS tasks
# and workers (default "1:1 2:2"). Every table gives the PS tasks'
# measured staleness (mean / max of the pushes, from the launch summaries)
# and the gap to local_train as mean, min and max over the runs.
#
# Needs a built tree (build/bin; BIN_DIR overrides).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
epochs=${1:-10}
runs=${RUNS:-5}
sif=${STEPS_IN_FLIGHT:-2}
bin=${BIN_DIR:-build/bin}
job=examples/fashion_mnist/job.json
slr=${STALENESS_LR:-none}
stol=${STALENESS_TOLERANCE:-0}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
mkdir -p bench/results
md=bench/results/async_accuracy_s$sif.md
if [[ $slr != none ]]; then
  md=bench/results/async_accuracy_s${sif}_${slr}_t$stol.md
  # The reference job with the staleness fields (local_train ignores them).
  python3 - "$job" "$out/job.json" "$slr" "$stol" <<'PY'
import json, sys
src, dst, lr, tol = sys.argv[1:5]
j = json.load(open(src))
j["strategy"]["staleness_lr"] = lr
j["strategy"]["staleness_tolerance"] = int(tol)
json.dump(j, open(dst, "w"), indent=2)
PY
  job=$out/job.json
fi
beta1=${BETA_1:-}
ajob=$job
if [[ -n $beta1 ]]; then
  md=${md%.md}_b$beta1.md
  python3 - "$job" "$out/job_async.json" "$beta1" <<'PY'
import json, sys
src, dst, beta1 = sys.argv[1:4]
j = json.load(open(src))
j["optimizer"]["beta_1"] = float(beta1)
json.dump(j, open(dst, "w"), indent=2)
PY
  ajob=$out/job_async.json
fi
strategy=${STRATEGY:-}
tag=${TAG:-}
if [[ -n $strategy ]]; then
  md=${md%.md}_${tag:-strategy}.md
  python3 - "$ajob" "$out/job_strategy.json" "$strategy" <<'PY'
import json, sys
src, dst, extra = sys.argv[1:4]
j = json.load(open(src))
j["strategy"].update(json.loads(extra))
json.dump(j, open(dst, "w"), indent=2)
PY
  ajob=$out/job_strategy.json
fi
topologies=${TOPOLOGIES:-1:1 2:2}

for b in local_train strata; do
  if [[ ! -x $bin/$b ]]; then
    echo "async_accuracy: $bin/$b not found: build the tree first" >&2
    exit 1
  fi
done

echo "async_accuracy: $job, $epochs epochs, $runs run(s) each," \
  "--steps_in_flight $sif, staleness_lr $slr (tolerance $stol)" >&2
"$bin/local_train" --job "$job" --epochs "$epochs" --summary "$out/local.json" >&2
for r in $(seq 1 "$runs"); do
  for topo in $topologies; do
    for plane in shm grpc; do
      shm=true
      [[ $plane == grpc ]] && shm=false
      "$bin/strata" launch --job "$ajob" --epochs "$epochs" \
        --ps "${topo%%:*}" --workers "${topo##*:}" --ps_shared_memory=$shm \
        --steps_in_flight "$sif" \
        --summary "$out/ps${topo/:/x}_${plane}_$r.json" >&2
    done
  done
done

python3 - "$out" "$runs" "$epochs" "$sif" "$md" "$job" "$slr" "$stol" "$beta1" \
  "$strategy" "$tag" "$topologies" <<'PY'
import json, os, statistics, sys
(d, runs, epochs, sif, md, job, slr, stol, beta1, strategy, tag,
 topologies) = sys.argv[1:13]
runs = int(runs)
def load(name):
    return json.load(open(os.path.join(d, name)))
local = load("local.json")
base = local["test_accuracy"]
env = f"RUNS={runs} STEPS_IN_FLIGHT={sif}"
if slr != "none":
    env += f" STALENESS_LR={slr} STALENESS_TOLERANCE={stol}"
if beta1:
    env += f" BETA_1={beta1}"
if strategy:
    env += f" STRATEGY='{strategy}' TAG={tag}"
if topologies != "1:1 2:2":
    env += f' TOPOLOGIES="{topologies}"'
lines = [f"Command: `{env} bench/async_accuracy.sh {epochs}` "
         f"(examples/fashion_mnist/job.json, async, staleness_lr {slr}"
         + (f" with tolerance {stol}" if slr != "none" else "")
         + (f"; beta_1 {beta1} in the async runs" if beta1 else "")
         + (f"; strategy fields {strategy}" if strategy else "")
         + f"; local_train test accuracy {base:.4f}, "
         f"{local['train_examples_per_second']:.0f} train examples/s)", "",
         "| run | steps in flight per worker | test accuracy, each run | gap to local_train (mean / min / max) | runs within 0.01 | lost steps | staleness of the pushes (mean / max) | train examples/s (median) | vs local_train |",
         "|---|---|---|---|---|---|---|---|---|"]
for topo in topologies.split():
    ps, workers = (int(x) for x in topo.split(":"))
    for plane, name in (("shm", "shared memory"), ("grpc", "gRPC only")):
        s = [load(f"ps{ps}x{workers}_{plane}_{r}.json")
             for r in range(1, runs + 1)]
        acc = [x["test_accuracy"] for x in s]
        gaps = [a - base for a in acc]
        eps = statistics.median(x["train_examples_per_second"] for x in s)
        lost = sum(x.get("lost_steps", 0) for x in s)
        within = sum(1 for g in gaps if abs(g) <= 0.01)
        st = [x.get("staleness") for x in s if x.get("staleness")]
        stal = (f"{statistics.mean(t['mean'] for t in st):.2f} / "
                f"{max(t['max'] for t in st)}") if st else "n/a"
        lines.append(
            f"| {ps} PS + {workers} worker{'s' if workers > 1 else ''}, {name} | {sif} | "
            + ", ".join(f"{a:.4f}" for a in acc)
            + f" | {statistics.mean(gaps):+.4f} / {min(gaps):+.4f} / {max(gaps):+.4f} | {within} of {runs} | {lost} | {stal} | {eps:.0f} | "
            + f"{eps / local['train_examples_per_second']:.2f} |")
text = "\n".join(lines) + "\n"
print(text)
open(md, "w").write(text)
PY
