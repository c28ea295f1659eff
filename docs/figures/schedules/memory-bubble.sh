#!/bin/sh
# Peak activation memory against bubble for the schedules of chapter 09, as the verifier predicts
# them at unit costs: one line per schedule from `mpp-schedule NAME -p P -m M -q`. The V schedules
# (two chunks per rank) count in chunk passes and chunk activations, half a stage's each; `step`
# and `largest` put every schedule in stage units, and `/1F1B` divides the largest peak by 1F1B's
# (P micro-batches on rank 0), so that looped and V schedules compare.
#   docs/figures/schedules/memory-bubble.sh [P [M [path/to/mpp-schedule]]]   (default 4 8)
set -eu
ranks=${1:-4}
micro=${2:-8}
tool=${3:-build/release/tools/mpp-schedule/mpp-schedule}
echo "P = $ranks, M = $micro, unit costs; step and largest peak in stage units"
printf '%-16s %8s %6s %6s %7s %6s  %s\n' schedule makespan step bubble largest /1F1B "peak in flight per rank"
# schedule:chunks per rank (2: a V schedule)
for entry in 1f1b:1 zb-h1:1 zb-h2:1 zb-v:2 v-zb:2 dualpipev:2 v-half:2 v-min:2; do
  "$tool" "${entry%:*}" -p "$ranks" -m "$micro" -q | awk -v chunks="${entry#*:}" -v ranks="$ranks" '
    NR == 1 { schedule = $1 }
    /^makespan / {
      makespan = $2; sub(/,$/, "", makespan)
      bubble = $4; sub(/,$/, "", bubble)
      peaks = ""; largest = 0
      for (i = 12; i <= NF; ++i) {
        peaks = peaks (peaks == "" ? "" : " ") $i
        if ($i + 0 > largest) largest = $i + 0
      }
      printf "%-16s %8s %6.1f %6s %7.1f %6.2f  %s\n", schedule, makespan, makespan / chunks, bubble,
             largest / chunks, largest / chunks / ranks, peaks
    }'
done
