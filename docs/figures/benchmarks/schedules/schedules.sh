#!/usr/bin/env bash
# Every built-in schedule with one chunk or a V per rank, over Shm on 2 ranks, Uniform<2>: the
# course model (h128 b32) and h1024 b128, step time, bubble (measured and predicted from the
# step's own costs) and rank 0's peak activation memory, beside 1F1B's.
#
#   docs/figures/benchmarks/schedules/schedules.sh [BUILD_DIR] [ROUNDS]
#
# Writes each round's raw Google Benchmark JSON next to this script (DATE_schedules_ROUND.json)
# and values.json: per configuration and schedule the median over the rounds of each figure
# ("course_h128_b32.VHalf.ms"; bubbles in %), for docs/benchmarks.md's tied numbers. Run it on an
# idle machine. With SUMMARISE_ONLY=1 it only summarises the raw files already there.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../../../.." && pwd)
build=${1:-$root/build/release}
rounds=${2:-3}
stamp=$(date +%Y-%m-%d)
filter='^(OneFOneB|ZeroBubbleH1|ZeroBubbleH2|ZeroBubbleV|DualPipeV|VHalf|VMin|VZeroBubble)<8>'
filter+='/Async<Shm>/Uniform<2>/(course_h128_b32|compute_h1024_b128)/'
runs=()
if [[ ${SUMMARISE_ONLY:-} == 1 ]]; then
  runs=("$here"/*_schedules_*.json)
  rounds=0
fi
for ((round = 1; round <= rounds; ++round)); do
  out=$here/${stamp}_schedules_${round}.json
  echo "round $round" >&2
  timeout 1200 "$build/tools/mpprun/mpprun" --nproc-per-node 2 \
    "$build/benchmarks/pipeline/pipeline_bench" --benchmark_filter="$filter" \
    --benchmark_out="$out" --benchmark_out_format=json > /dev/null
  runs+=("$out")
done
python3 - "$here/values.json" "${runs[@]}" <<'PY'
import json, re, statistics, sys
figures = {"bubble": 100, "bubble_pred_meas": 100, "bubble_pred_lat": 100, "peak_act_MiB_r0": 1}
samples, loads = {}, []
for path in sys.argv[2:]:
    run = json.load(open(path))
    loads.append(run["context"].get("load_avg", [0])[0])
    for b in run["benchmarks"]:
        m = re.match(r"([A-Za-z0-9]+)<8>/Async<Shm>/Uniform<2>/(\w+)/", b["name"])
        if not m:
            continue
        into = samples.setdefault(f"{m.group(2)}.{m.group(1)}", {})
        unit = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}[b["time_unit"]]
        into.setdefault("ms", []).append(b["real_time"] * unit)
        for name, scale in figures.items():
            if name in b:
                into.setdefault(name, []).append(b[name] * scale)
values = {f"{key}.{name}": round(statistics.median(v), 3)
          for key, figs in samples.items() for name, v in figs.items()}
for key in {k.rsplit(".", 1)[0] for k in values}:
    config, sched = key.split(".")
    base = values.get(f"{config}.OneFOneB.peak_act_MiB_r0")
    if base:
        values[f"{key}.peak_vs_1F1B"] = round(values[f"{key}.peak_act_MiB_r0"] / base, 2)
values["rounds"] = len(sys.argv) - 2
values["load_avg_max"] = round(max(loads), 2) if loads else 0
json.dump(values, open(sys.argv[1], "w"), indent=1, sort_keys=True)
open(sys.argv[1], "a").write("\n")
PY
