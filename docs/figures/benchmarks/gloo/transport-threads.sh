#!/usr/bin/env bash
# The course's model over Gloo and Shm on 2 ranks, with the transport's threads as SCHED_BATCH
# (the default) and as the transport starts them (MPP_TRANSPORT_THREADS=normal): the same
# pipeline_bench binary, the two settings alternated (normal, batch, normal, batch, ...).
#
#   docs/figures/benchmarks/gloo/transport-threads.sh [BUILD_DIR] [ROUNDS]
#
# Writes the raw Google Benchmark JSON of every run next to this script
# (DATE_transport_threads_MODE_ROUND.json) and their summary, transport_threads.json: per setting
# and benchmark, the median over rounds of each figure ("batch.gloo_1F1B.ms"; bubbles in %). Run
# it on an idle machine. With SUMMARISE_ONLY=1 it only summarises the raw files already there.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../../../.." && pwd)
build=${1:-$root/build/release}
rounds=${2:-3}
stamp=$(date +%Y-%m-%d)
gloo='paired/GPipe<8>/Async<Gloo>/Uniform<2>_over_hand_written/course'
gloo+='|(hand_written/GPipe<8>/raw c10d Gloo|(GPipe<8>|OneFOneB<8>|ZeroBubbleH1<8>|Interleaved1F1B<8,2>)/Async<Gloo>/Uniform<2>)/P?=?2?/?course'
shm='paired/GPipe<8>/Async<Shm>/Uniform<2>_over_hand_written/course'
shm+='|(hand_written/GPipe<8>/raw c10d Shm|(GPipe<8>|OneFOneB<8>)/Async<Shm>/Uniform<2>)/P?=?2?/?course'
runs=()
if [[ ${SUMMARISE_ONLY:-} == 1 ]]; then
  for f in "$here"/*_transport_threads_*_*.json; do
    mode=${f%_*.json}; mode=${mode##*_}; runs+=("$mode=$f")
  done
  rounds=0
fi
for ((round = 1; round <= rounds; ++round)); do
  for mode in normal batch; do
    out=$here/${stamp}_transport_threads_${mode}_${round}.json
    echo "round $round: $mode" >&2
    MPP_TRANSPORT_THREADS=$mode timeout 900 "$build/tools/mpprun/mpprun" --nproc-per-node 2 \
      "$build/benchmarks/pipeline/pipeline_bench" --benchmark_filter="$gloo|$shm" \
      --benchmark_out="$out" --benchmark_out_format=json > /dev/null
    runs+=("$mode=$out")
  done
done
python3 - "$here/transport_threads.json" "${runs[@]}" <<'EOF'
import json, statistics, sys
short = {"hand_written/GPipe<8>/raw c10d Gloo": "gloo_hand_written", "paired/GPipe<8>/Async<Gloo>": "gloo_paired",
         "GPipe<8>/Async<Gloo>": "gloo_GPipe", "OneFOneB<8>/Async<Gloo>": "gloo_1F1B",
         "ZeroBubbleH1<8>/Async<Gloo>": "gloo_ZB-H1", "Interleaved1F1B<8,2>/Async<Gloo>": "gloo_interleaved",
         "hand_written/GPipe<8>/raw c10d Shm": "shm_hand_written", "paired/GPipe<8>/Async<Shm>": "shm_paired",
         "GPipe<8>/Async<Shm>": "shm_GPipe", "OneFOneB<8>/Async<Shm>": "shm_1F1B"}
figures = ["overhead_pct", "ci_lo_pct", "ci_hi_pct", "bubble", "bubble_pred_lat", "bubble_recv_wait",
           "bubble_send", "bubble_recv_post", "bubble_step_end", "bubble_untraced", "msg_latency_us",
           "send_overhead_us", "recv_overhead_us", "step_us_timed",
           "other_threads_cpu_us", "compute_thread_waiting_us"]
samples = {}
for arg in sys.argv[2:]:
    mode, path = arg.split("=", 1)
    for b in json.load(open(path))["benchmarks"]:
        key = next((v for k, v in short.items() if b["name"].startswith(k)), None)
        if key is None:
            continue
        into = samples.setdefault(mode, {}).setdefault(key, {})
        unit = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}[b["time_unit"]]
        into.setdefault("ms", []).append(b["real_time"] * unit)
        for f in figures:
            if f in b:
                scale = 100.0 if f.startswith("bubble") else 1.0
                into.setdefault(f, []).append(b[f] * scale)
summary = {f"{mode}.{key}.{f}": round(statistics.median(v), 2)
           for mode, by_key in samples.items() for key, figs in by_key.items() for f, v in figs.items()}
summary["rounds"] = len(sys.argv[2:]) // 2
summary["remake"] = "docs/figures/benchmarks/gloo/transport-threads.sh"
json.dump(summary, open(sys.argv[1], "w"), indent=1, sort_keys=True)
print(json.dumps(summary, indent=1, sort_keys=True))
EOF
