#!/bin/sh
# Lane push throughput with the optimizer step run chunk by chunk on a
# staged copy (strata-ps --chunked_apply, the default) against the step run
# once the push is whole (--chunked_apply=false), alternated RUNS times in
# one script on loopback, for SGD and Adam variables; prints each run's
# rows and the medians.
#   RUNS=5 SIZES=4194304,16777216 bench/chunked_apply.sh
set -eu
cd "$(dirname "$0")/.."
BENCH=${BENCH:-build/bin/ps_bench}
RUNS=${RUNS:-5}
SIZES=${SIZES:-4194304,16777216}
OUT=$(mktemp)
trap 'rm -f "$OUT"' EXIT
for opt in sgd adam; do
  i=0
  while [ "$i" -lt "$RUNS" ]; do
    for mode in on off; do
      flags=""
      [ "$mode" = off ] && flags="--chunked_apply=false"
      "$BENCH" --sizes "$SIZES" --optimizer "$opt" --ps_flags "$flags" 2>&1 |
        grep '^push (lane)' | while read -r line; do
          # push (lane)    4 MB x1 clients:   2.09 GB/s   raw ... ratio 0.43
          set -- $line
          echo "$opt $mode $3$4 $5 $7 ${14}"
        done >> "$OUT"
    done
    i=$((i + 1))
  done
done
echo "optimizer mode size clients GB/s ratio_to_raw_socket"
cat "$OUT"
echo
echo "Medians (GB/s; on / off):"
awk '{ k = $1 " " $3 " " $4; v[k " " $2] = v[k " " $2] " " $5; keys[k] = 1 }
  function median(s,   a, n, i, j, t) {
    n = split(s, a, " ")
    for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++)
      if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
    return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
  }
  END { for (k in keys) {
    on = median(v[k " on"]); off = median(v[k " off"])
    printf "%s: on %.2f, off %.2f, on/off %.2f\n", k, on, off, on / off } }' \
  "$OUT" | sort
