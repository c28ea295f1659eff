#!/usr/bin/env bash
# Regenerates every picture under docs/figures/ except the benchmark plots (tools/bench-report
# draws those): schedule timelines predicted by the verifier (mpp-schedule), measured timelines
# and curves written by the labs themselves through the library's renderers (mpp::render_svg,
# mpp::trace::render_line_plot / render_bar_chart / render_lanes). Nothing is drawn by hand.
#
#   tools/docs/mpp-docs figures [--build DIR] [--only NAME...]
#
# DIR is a configured build tree (default build/release); the targets it needs are listed by
# `--list`. Multi-rank labs run on 2 ranks (4 for the hybrid lab) through DIR/tools/mpprun/mpprun,
# with one thread per rank. Measured figures depend on the machine and on what else runs on it:
# each chapter states the machine it measured on, so rerun them on an idle machine when you can.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=build/release
only=()
while (($#)); do
  case $1 in
    --build) build=$2; shift 2 ;;
    --only) shift; while (($#)) && [[ $1 != --* ]]; do only+=("$1"); shift; done ;;
    --list)
      echo "targets: mpprun mpp-schedule monolith manual_split pingpong memory_wall naive_pipeline gpipe one_f_one_b"
      echo "         interleaved zero_bubble recompute manual_dp naive_dp ddp hybrid train_tiny_transformer"
      echo "         mpp-plot lab17_multinode"
      echo "figures: schedules pipeline recompute monolith manual_split pingpong memory_wall data_parallel (or:"
      echo "         manual_dp hybrid, its chapters 11 and 14 alone) ddp (ddp_link: its link run alone)"
      echo "         transformer multinode faults"
      exit 0 ;;
    -h|--help) sed -n '2,12p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "figures: unknown argument $1 (try --help)" >&2; exit 2 ;;
  esac
done
cd "$root"
[[ $build = /* ]] || build=$root/$build
out=$root/docs/figures

wanted() { ((${#only[@]} == 0)) && return 0; local n; for n in "${only[@]}"; do [[ $n == "$1" ]] && return 0; done; return 1; }
binary() {
  local path=$build/$1
  [[ -x $path ]] || { echo "figures: $path is missing; build it: cmake --build $build --target $(basename "$1")" >&2; exit 1; }
  echo "$path"
}
logs=$build/figure-logs  # what each run printed, to quote its numbers in the chapters
mkdir -p "$logs"
log_name=run
run() {
  echo "+ $*" >&2
  echo "$*" | sed "s|$root/||g" >"$logs/$log_name.cmd"
  "$@" 2>&1 | tee "$logs/$log_name.log"
}

# values FORMAT LOG_NAME GROUP JSON: the numbers the run LOG_NAME printed (rank 0's lines), as a
# flat JSON object beside the figure it drew, for the chapters' tied numbers (`<!-- value: ... -->`,
# tools/docs/mpp-docs check). FORMAT is what the lab prints:
#   pipeline  the pipeline labs: per schedule S (naive, gpipe, 1f1b, interleaved, zb-h1,
#             recompute+1f1b, recompute<segments>+1f1b) step_ms[S], samples_per_s[S], bubble_pct[S], predicted_pct[S] (unit
#             costs), predicted_measured_costs_pct[S], predicted_with_messages_pct[S], message_us[S], rank<r>_bubble_pct[S],
#             rank<r>_peak_kib[S], rank<r>_peak_mib[S], rank<r>_in_flight[S];
#             utilisation_pct[rank <r>] and utilisation_pct[pipeline] (lab 06); lab 07's table per M:
#             bubble_pct[M=<m>], predicted_pct[M=<m>], predicted_with_latency_pct[M=<m>],
#             samples_per_s[M=<m>], rank0_peak_kib[M=<m>], rank0_peak_mib[M=<m>], in_flight[M=<m>]
#   pingpong  lab 03's table per size Z ("4 B", "1 MiB"): median_us[Z], best_us[Z], median_ms[Z],
#             best_ms[Z], median_mbps[Z], best_mbps[Z], median_gbps[Z], best_gbps[Z]; and over the
#             sizes up to 16 KiB, best_us_min[<=16 KiB], best_us_max[<=16 KiB], best_us_median[<=16 KiB],
#             median_us_max[<=16 KiB]; over all sizes, best_gbps_max and median_over_best_max (the
#             largest median / best ratio)
#   naive_dp  lab 12's summary line: samples_per_s, compute_s (forward and backward), allreduce_s,
#             allreduce_pct (of the run)
#   ddp       lab 13: buckets, smallest_bucket_mib, largest_bucket_mib; per step in ms, the mean
#             over the timed steps: backward_alone_ms, allreduce_alone_ms, sum_alone_ms,
#             naive_span_ms, naive_backward_ms, naive_allreduce_ms (naive DP: backward, then the
#             all-reduce), ddp_span_ms, ddp_wait_ms (DDP: backward with the buckets, of which
#             waiting at its end), naive_exposed_ms, ddp_exposed_ms, hidden_pct (what is left to
#             wait for after the last gradient: naive DP's all-reduce, DDP's wait; and the share of
#             the first that the second hid), saved_ms, saved_pct (naive DP's span minus DDP's,
#             and that over naive DP's span), naive_forward_ms, ddp_forward_ms, naive_adam_ms, ddp_adam_ms,
#             naive_step_ms, ddp_step_ms, speedup (whole steps); the drawn step's landmarks, in ms
#             from its start: drawn_naive_backward_end_ms, drawn_naive_averaged_ms,
#             drawn_naive_allreduce_ms, drawn_ddp_first_bucket_ms, drawn_ddp_last_gradient_ms,
#             drawn_ddp_averaged_ms, drawn_ddp_wait_ms
# Every file also holds load_average: the 1-minute load average of the machine when the run ended.
# Fails naming the log when the run printed none of what FORMAT expects.
values() {
  local format=$1 name=$2 group=$3 json=$4
  { printf '{\n  "remake": "tools/docs/mpp-docs figures --only %s",\n' "$group"
    printf '  "command": "%s",\n' "$(sed 's/[\\"]/\\&/g' "$logs/$name.cmd")"
    printf '  "log": "build/release/figure-logs/%s.log",\n' "$name"
    printf '  "date": "%s",\n' "$(date -u +%Y-%m-%dT%H:%MZ)"
    # How busy the machine was: what else ran shows in every measured number.
    printf '  "load_average": %s' "$(cut -d' ' -f1 /proc/loadavg 2>/dev/null || echo 0)"
    awk -v format="$format" '
      function put(key, v) { printf ",\n  \"%s\": %s", key, v + 0; ++n }
      function kib(v, u) { return u ~ /^MiB/ ? v * 1024 : v }
      function id(type,    s) {  # Pipeline<Uniform<2>, GPipe<8>, Async<Shm>> -> gpipe
        s = type; sub(/^Pipeline</, "", s)
        r = ""
        if (s ~ /^Recompute</) {  # Recompute<Uniform<2>,4> -> recompute4+
          r = "recompute+"
          if (match(s, /^Recompute<[A-Za-z]+<[0-9]+>,[0-9]+>/)) {
            segments = substr(s, 1, RLENGTH - 1); sub(/.*,/, "", segments)
            r = "recompute" segments "+"; s = substr(s, RLENGTH + 1)
          }
        }
        sub(/^[^,]*, */, "", s); sub(/[<,].*$/, "", s)
        if (s == "Naive") return r "naive"
        if (s == "GPipe") return r "gpipe"
        if (s == "OneFOneB") return r "1f1b"
        if (s == "Interleaved1F1B") return r "interleaved"
        if (s == "ZeroBubbleH1") return r "zb-h1"
        return r tolower(s)
      }
      !/^\[rank0\]: / { next }
      { sub(/^\[rank0\]: /, "") }
      format == "pipeline" && /^Pipeline</ { s = id($0); next }
      format == "pipeline" && s != "" && / ms\/step, / {
        for (i = 1; i <= NF; ++i) {
          if ($(i + 1) == "ms/step,") put("step_ms[" s "]", $i)
          if ($(i + 1) == "samples/s") put("samples_per_s[" s "]", $i)
        }
        next
      }
      format == "pipeline" && s != "" && /^ *bubble measured / {
        put("bubble_pct[" s "]", $3); put("predicted_pct[" s "]", $5)
        if ($9 ~ /^[0-9.]+%$/) put("predicted_measured_costs_pct[" s "]", $9)
        next
      }
      format == "pipeline" && s != "" && /with the measured .* per message/ {
        put("message_us[" s "]", $4); put("predicted_with_messages_pct[" s "]", $NF)
        next
      }
      format == "pipeline" && s != "" && /^ *rank [0-9]+: bubble / {
        r = $2; sub(/:$/, "", r)
        put("rank" r "_bubble_pct[" s "]", $4)
        put("rank" r "_peak_kib[" s "]", kib($7, $8)); put("rank" r "_peak_mib[" s "]", kib($7, $8) / 1024)
        put("rank" r "_in_flight[" s "]", $9)
        next
      }
      format == "pipeline" && /^Utilisation/ { util = 1; s = ""; next }
      format == "pipeline" && util && /^ *(rank [0-9]+|pipeline): [0-9.]+%/ {
        k = $0; sub(/^ */, "", k); sub(/:.*$/, "", k)
        v = $0; sub(/^[^:]*: */, "", v); sub(/%.*$/, "", v)
        put("utilisation_pct[" k "]", v)
        next
      }
      format == "pipeline" && /^ *[0-9]+ \| / {  # lab 07: M | bubble | predicted | +latency | samples/s | peak | in flight
        gsub(/[|%]/, " ")
        m = "[M=" $1 "]"
        put("bubble_pct" m, $2); put("predicted_pct" m, $3); put("predicted_with_latency_pct" m, $4)
        put("samples_per_s" m, $5); put("rank0_peak_kib" m, kib($6, $7))
        put("rank0_peak_mib" m, kib($6, $7) / 1024); put("in_flight" m, $8)
        next
      }
      format == "pingpong" && /^ *[0-9]+ (B|KiB|MiB|GiB) +[0-9]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ *$/ {
        z = "[" $1 " " $2 "]"
        put("median_us" z, $4); put("best_us" z, $5); put("median_ms" z, $4 / 1000); put("best_ms" z, $5 / 1000)
        put("median_mbps" z, $6); put("best_mbps" z, $7); put("median_gbps" z, $6 / 1000); put("best_gbps" z, $7 / 1000)
        if (bw_hi == "" || $7 + 0 > bw_hi) bw_hi = $7 + 0
        if ($5 > 0 && (spread == "" || $4 / $5 > spread)) spread = $4 / $5
        bytes = $1 * ($2 == "KiB" ? 1024 : $2 == "MiB" ? 1048576 : $2 == "GiB" ? 1073741824 : 1)
        if (bytes <= 16384) {
          small[++smalls] = $5 + 0
          if (lo == "" || $5 + 0 < lo) lo = $5 + 0
          if (hi == "" || $5 + 0 > hi) hi = $5 + 0
          if (median_hi == "" || $4 + 0 > median_hi) median_hi = $4 + 0
        }
        next
      }
      format == "naive_dp" && /^rank 0 +[A-Za-z]+: [0-9.]+ samples\/s/ {
        line = $0; gsub(/[(%|]/, " ", line); split(line, w, / +/)
        # rank 0 PerTensor: N samples/s backward+forward C s, all-reduce A s P of the run
        put("samples_per_s", w[4]); put("compute_s", w[7]); put("allreduce_s", w[10]); put("allreduce_pct", w[12])
        next
      }
      format == "ddp" && /^[0-9]+ buckets, / { put("buckets", $1); put("smallest_bucket_mib", $3); put("largest_bucket_mib", $5); next }
      format == "ddp" && /^  backward alone / { put("backward_alone_ms", $3); next }
      format == "ddp" && /^  all-reduce of the buckets alone / { put("allreduce_alone_ms", $6); next }
      format == "ddp" && /^  the two one after the other / { put("sum_alone_ms", $7); next }
      format == "ddp" && /^  naive DP, backward \+ all-reduce / {
        line = $0; gsub(/[(),]/, " ", line); split(line, w, / +/)
        # "" naive DP backward + all-reduce SPAN backward B all-reduce A
        put("naive_span_ms", w[7]); put("naive_backward_ms", w[9]); put("naive_allreduce_ms", w[11])
        next
      }
      format == "ddp" && /^  DDP, backward with the buckets / {
        line = $0; gsub(/[(),]/, " ", line); split(line, w, / +/)
        put("ddp_span_ms", w[7]); put("ddp_wait_ms", w[12])
        next
      }
      format == "ddp" && /^  left to wait for after the last gradient: / {
        line = $0; gsub(/[(%,)]/, " ", line); split(line, w, / +/)
        # "" left to wait for after the last gradient: naive DP N DDP D H hidden
        put("naive_exposed_ms", w[12]); put("ddp_exposed_ms", w[14]); put("hidden_pct", w[15])
        next
      }
      format == "ddp" && /^  span saved / {
        line = $0; gsub(/[(%]/, " ", line); split(line, w, / +/)
        put("saved_ms", w[4]); put("saved_pct", w[5])
        next
      }
      format == "ddp" && /^  forward: naive DP / {
        line = $0; gsub(/[,;]/, " ", line); split(line, w, / +/)
        # "" forward: naive DP F DDP F Adam step: naive DP A DDP A
        put("naive_forward_ms", w[5]); put("ddp_forward_ms", w[7]); put("naive_adam_ms", w[12]); put("ddp_adam_ms", w[14])
        next
      }
      format == "ddp" && /^whole step: / {
        line = $0; gsub(/[,x]/, " ", line); split(line, w, / +/)
        # whole step: naive DP N ms DDP D ms speedup S
        put("naive_step_ms", w[5]); put("ddp_step_ms", w[8]); put("speedup", w[11])
        next
      }
      format == "ddp" && /^drawn step: / {
        n0 = split($0, w, / +/)
        # numbers in order: naive backward end, naive averaged, DDP first bucket, last gradient, averaged
        k = 0
        for (i = 1; i <= n0; ++i) if (w[i] ~ /^[0-9.]+$/) dn[++k] = w[i]
        put("drawn_naive_backward_end_ms", dn[1]); put("drawn_naive_averaged_ms", dn[2])
        put("drawn_naive_allreduce_ms", dn[2] - dn[1]); put("drawn_ddp_first_bucket_ms", dn[3])
        put("drawn_ddp_last_gradient_ms", dn[4]); put("drawn_ddp_averaged_ms", dn[5])
        put("drawn_ddp_wait_ms", dn[5] - dn[4])
        next
      }
      END {
        if (lo != "") {
          for (i = 2; i <= smalls; ++i)  # insertion sort, for the median
            for (j = i; j > 1 && small[j - 1] > small[j]; --j) { t = small[j]; small[j] = small[j - 1]; small[j - 1] = t }
          put("best_us_min[<=16 KiB]", lo); put("best_us_max[<=16 KiB]", hi)
          put("best_us_median[<=16 KiB]", smalls % 2 ? small[(smalls + 1) / 2] : (small[smalls / 2] + small[smalls / 2 + 1]) / 2)
          put("median_us_max[<=16 KiB]", median_hi)
        }
        if (bw_hi != "") { put("best_gbps_max", bw_hi / 1000); put("median_over_best_max", spread) }
        if (n == 0) exit 1
      }' "$logs/$name.log" || { echo "figures: $logs/$name.log holds none of the $format numbers" >&2; exit 1; }
    printf '\n}\n'; } >"$json.tmp"
  mv "$json.tmp" "$json"
  echo "figures: values of $name in ${json#"$root"/}" >&2
}
ranks() {  # ranks N PROGRAM ARGS...: the program on N ranks, one thread each, bounded in time
  local n=$1; shift
  OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 run "$(binary tools/mpprun/mpprun)" --nproc-per-node "$n" \
    --log-dir "" --timeout 600 "$@"
}

if wanted schedules; then
  # Predicted timelines: P = 4, M = 8 (docs/schedules.md) and P = 2, M = 8 (next to the labs'
  # measured runs on 2 ranks in chapters 06-10).
  sched=$(binary tools/mpp-schedule/mpp-schedule)
  log_name=schedules run sh docs/figures/schedules/generate.sh "$sched"
  mkdir -p "$out/design"
  log_name=design_gpipe run "$sched" gpipe -p 4 -m 8 --comm blocking -q --svg "$out/design/gpipe_p4_m8_blocking.svg"
  log_name=design_1f1b run "$sched" 1f1b -p 4 -m 8 --comm blocking -q --svg "$out/design/1f1b_p4_m8_blocking.svg"
  mkdir -p "$out/pipeline"
  log_name=pipeline_predicted_naive_p2 run "$sched" naive -p 2 -q --svg "$out/pipeline/predicted_naive_p2.svg"
  for s in gpipe 1f1b zb-h1; do
    log_name=pipeline_predicted_${s}_p2 run "$sched" "$s" -p 2 -m 8 -q --svg "$out/pipeline/predicted_${s}_p2.svg"
  done
  log_name=pipeline_predicted_interleaved_p2 run "$sched" interleaved -p 2 -m 8 -v 2 -q --svg "$out/pipeline/predicted_interleaved_p2.svg"
fi

if wanted pipeline; then
  # Measured: the last training step of each lab, on 2 ranks over the labs' default transport
  # (Shm). Hidden 512 and batch 64 make each micro-batch's compute a few hundred microseconds, so
  # the picture shows the schedule at a readable scale. The GPipe run also draws its bubble
  # against M.
  mkdir -p "$out/pipeline"
  args=(--hidden 512 --batch 64 --steps 10)
  log_name=pipeline_measured_naive_p2 ranks 2 "$(binary examples/06_naive_pipeline/naive_pipeline)" "${args[@]}" --svg "$out/pipeline/measured_naive_p2.svg"
  log_name=pipeline_measured_gpipe_p2 ranks 2 "$(binary examples/07_gpipe/gpipe)" "${args[@]}" --svg "$out/pipeline/measured_gpipe_p2.svg" \
    --plot "$out/pipeline/gpipe_bubble_against_m_p2.svg"
  log_name=pipeline_measured_1f1b_p2 ranks 2 "$(binary examples/08_one_f_one_b/one_f_one_b)" "${args[@]}" --svg "$out/pipeline/measured_1f1b_p2.svg"
  log_name=pipeline_measured_interleaved_p2 ranks 2 "$(binary examples/09_interleaved_zero_bubble/interleaved)" "${args[@]}" --svg "$out/pipeline/measured_interleaved_p2.svg"
  log_name=pipeline_measured_zb-h1_p2 ranks 2 "$(binary examples/09_interleaved_zero_bubble/zero_bubble)" "${args[@]}" --svg "$out/pipeline/measured_zb-h1_p2.svg"
  for s in naive gpipe 1f1b interleaved zb-h1; do
    values pipeline "pipeline_measured_${s}_p2" pipeline "$out/pipeline/measured_${s}_p2.json"
  done
  # Lab 07's table as it printed it, for chapter 07 to quote (<!-- quote ... -->) next to the plot.
  sed -n 's/^\[rank0\]: \( *\(M\|[0-9][0-9]*\) |.*\)$/\1/p' "$logs/pipeline_measured_gpipe_p2.log" \
    >"$out/pipeline/measured_gpipe_p2.txt"
  [[ -s $out/pipeline/measured_gpipe_p2.txt ]] || { echo "figures: lab 07 printed no table" >&2; exit 1; }
fi

if wanted recompute; then
  # Lab 10 at the same scale as the pipeline labs: 1F1B with and without Recompute, and Recompute
  # in 2 and 4 segments per stage (chapter 10's memory figures).
  # Both runs' comparison lines, as rank 0 printed them, for chapter 10 to quote: the course's
  # model (the chapter's first command) and h = 512 (the figure's).
  mkdir -p "$out/pipeline"
  recompute_rows() {  # recompute_rows LOG TXT: the pair, "...", the segments' lines
    sed -n 's/^\[rank0\]: \(Recompute against .*\|  OneFOneB<8> .*\|  Recompute + .*\)$/\1/p' "$1" >"$2"
    echo "..." >>"$2"
    sed -n 's/^\[rank0\]: \(Recompute in segments.*\|  [0-9]* segments per stage .*\)$/\1/p' "$1" >>"$2"
    [[ $(wc -l <"$2") -eq 7 ]] || { echo "figures: lab 10 printed no comparison in $1" >&2; exit 1; }
  }
  log_name=pipeline_measured_recompute_course ranks 2 "$(binary examples/10_recompute/recompute)" --steps 10
  recompute_rows "$logs/pipeline_measured_recompute_course.log" "$out/pipeline/measured_recompute_course.txt"
  values pipeline pipeline_measured_recompute_course recompute "$out/pipeline/measured_recompute_course.json"
  log_name=pipeline_measured_recompute_p2 ranks 2 "$(binary examples/10_recompute/recompute)" \
    --hidden 512 --batch 64 --steps 10 --svg "$out/pipeline/measured_recompute_p2.svg"
  recompute_rows "$logs/pipeline_measured_recompute_p2.log" "$out/pipeline/measured_recompute_p2.txt"
  values pipeline pipeline_measured_recompute_p2 recompute "$out/pipeline/measured_recompute_p2.json"
fi

# printed GROUP JSON PROGRAM LOG_NAME...: a values file like values' for the runs LOG_NAME... of
# one chapter, whose numbers are what the awk PROGRAM takes from their printed lines (rank 0's
# lines without their prefix, every rank's with all_ranks=1, and the lines of a program run
# without mpprun). PROGRAM calls put(KEY, NUMBER) and sees the log it reads as `run` (its
# LOG_NAME) and the line's rank as `rank`; an END block of its own can put numbers derived from
# several runs (ratios, speed-ups). A LOG_NAME holding a / is a file a run wrote (a figure whose
# subtitle holds a number), read as it is. Fails when PROGRAM put nothing.
printed() {
  local group=$1 json=$2 program=$3 name commands="" logged=() files=()
  shift 3
  for name; do
    if [[ $name == */* ]]; then files+=("$name"); continue; fi
    commands+="${commands:+ ; }$(cat "$logs/$name.cmd")"
    logged+=("build/release/figure-logs/$name.log")
    files+=("$logs/$name.log")
  done
  { printf '{\n  "remake": "tools/docs/mpp-docs figures --only %s",\n' "$group"
    printf '  "command": "%s",\n' "$(printf '%s' "$commands" | sed 's/[\\"]/\\&/g')"
    printf '  "log": "%s",\n' "${logged[*]}"
    printf '  "date": "%s",\n' "$(date -u +%Y-%m-%dT%H:%MZ)"
    printf '  "load_average": %s' "$(cut -d' ' -f1 /proc/loadavg 2>/dev/null || echo 0)"
    awk -v all_ranks="${all_ranks:-0}" -v CONVFMT=%.10g '
      function put(key, v) { printf ",\n  \"%s\": %s", key, v + 0 ""; ++n }
      FNR == 1 { run = FILENAME; sub(/^.*\//, "", run); sub(/\.log$/, "", run) }
      { rank = 0 }
      /^\[rank[0-9]+\]: / {
        rank = $0; sub(/^\[rank/, "", rank); sub(/\].*$/, "", rank); rank += 0
        if (rank != 0 && !all_ranks) next
        sub(/^\[rank[0-9]+\]: /, "")
      }
      '"$program"'
      END { if (n == 0) exit 1 }' "${files[@]}" ||
      { echo "figures: ${files[*]} hold none of the numbers ${json#"$root"/} wants" >&2; exit 1; }
    printf '\n}\n'; } >"$json.tmp"
  mv "$json.tmp" "$json"
  echo "figures: values of $* in ${json#"$root"/}" >&2
}

if wanted schedules; then
  # Chapter 09's table of peak memory against bubble (P = 4, M = 8, unit costs), and its numbers
  # per schedule S (1f1b, zb-h1, zb-h2, zb-v, v-zb, dualpipev, v-half, v-min): makespan[S] (the tool's
  # units), step[S] and largest_peak[S] (stage units), bubble_pct[S], peak_vs_1f1b[S],
  # rank0_peak[S] (the tool's units: chunk activations for the V schedules).
  log_name=schedules_memory_bubble_p4_m8 run docs/figures/schedules/memory-bubble.sh 4 8 "$(binary tools/mpp-schedule/mpp-schedule)"
  printed schedules "$out/schedules/memory_bubble_p4_m8.json" '
    /^[A-Za-z0-9]+<[0-9]+> / {
      s = $1; sub(/<.*$/, "", s)
      if (s == "OneFOneB") s = "1f1b"; else if (s == "ZeroBubbleH1") s = "zb-h1"
      else if (s == "ZeroBubbleH2") s = "zb-h2"; else if (s == "ZeroBubbleV") s = "zb-v"
      else if (s == "VZeroBubble") s = "v-zb"
      else if (s == "DualPipeV") s = "dualpipev"; else if (s == "VHalf") s = "v-half"
      else if (s == "VMin") s = "v-min"; else s = tolower(s)
      b = $4; sub(/%$/, "", b)
      put("makespan[" s "]", $2); put("step[" s "]", $3); put("bubble_pct[" s "]", b)
      put("largest_peak[" s "]", $5); put("peak_vs_1f1b[" s "]", $6); put("rank0_peak[" s "]", $7)
    }' schedules_memory_bubble_p4_m8
fi

if wanted monolith; then
  # Chapter 01: the default run draws the curve and is the output the chapter quotes
  # (monolith.txt); the exercise's runs (fresh batches at hidden 128; hidden 64 and 16) give the
  # numbers of its table. All in monolith/loss.json, keys suffixed by the run's flags.
  mkdir -p "$out/monolith"
  lab=$(binary examples/01_monolith/monolith)
  OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 log_name=monolith run "$lab" --svg "$out/monolith/loss.svg"
  OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 log_name=monolith_fresh run "$lab" --data fresh --steps 1500 --hidden 128
  OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 log_name=monolith_hidden_64 run "$lab" --hidden 64
  OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 log_name=monolith_hidden_16 run "$lab" --hidden 16
  grep -v '^loss curve written to ' "$logs/monolith.log" >"$out/monolith/monolith.txt"
  printed monolith "$out/monolith/loss.json" '
    { r = run; sub(/^monolith_?/, "", r); sub(/_/, " ", r); r = (r == "" ? "" : "[" r "]") }
    /^step +[0-9]+ +loss / { put("loss" r "[step " $2 "]", $4); last_step = $2 }
    / steps in [0-9.]+ s: [0-9]+ samples\/s/ {
      put("seconds" r, $4); put("samples_per_s" r, $6); put("step_ms" r, 1000 * $4 / $1)
      speed[r] = $6
    }
    /^loss [0-9.]+ -> [0-9.]+ / {
      put("first_loss" r, $2); put("last_loss" r, $4)
      p = $5; gsub(/[(%]/, "", p); put("last_pct_of_first" r, p)
    }
    END {  # what a narrower model buys: samples/s against the default width (hidden 256)
      for (k in speed) if (k ~ /hidden/ && speed[""] > 0) put("speedup_over_default" k, speed[k] / speed[""])
    }' monolith monolith_fresh monolith_hidden_64 monolith_hidden_16
fi

if wanted manual_split; then
  # Chapter 02 has no picture; its lab's output is quoted (manual_split.txt) and its numbers tied
  # (manual_split.json). The exercise's cuts, 1 and 15, must leave the parameters exactly equal to
  # the monolith's, as the chapter says; the group fails if they do not.
  mkdir -p "$out/manual_split"
  lab=$(binary examples/02_manual_split/manual_split)
  for cut in 8 1 15; do
    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 log_name=manual_split_cut_$cut run "$lab" --cut "$cut"
    grep -q '= 0\.000e+00$' "$logs/manual_split_cut_$cut.log" ||
      { echo "figures: lab 02 with --cut $cut did not end exactly equal to the monolith" >&2; exit 1; }
  done
  cp "$logs/manual_split_cut_8.log" "$out/manual_split/manual_split.txt"
  printed manual_split "$out/manual_split/manual_split.json" '
    run == "manual_split_cut_8" && /^step [0-9]+ +loss monolith / {
      put("loss[step " $2 "]", $5); put("activation_grad_norm[step " $2 "]", $NF)
      put("activation_grad_norm_in_1e-5[step " $2 "]", $NF * 1e5)
    }
    /^after [0-9]+ steps: max / { c = run; sub(/^manual_split_cut_/, "", c); put("max_diff[cut " c "]", $NF) }
  ' manual_split_cut_8 manual_split_cut_1 manual_split_cut_15
fi

if wanted pingpong; then
  mkdir -p "$out/basics"
  log_name=basics_pingpong ranks 2 "$(binary examples/03_pingpong/pingpong)" --svg "$out/basics/pingpong.svg"
  values pingpong basics_pingpong pingpong "$out/basics/pingpong.json"
  # The table as rank 0 printed it, for chapter 03 to quote next to the curve.
  sed -n 's/^\[rank0\]: \(one-way time = .*\| *size  *iters .*\| *[0-9][0-9]* [KMG]*i*B  .*\)$/\1/p' \
    "$logs/basics_pingpong.log" >"$out/basics/pingpong.txt"
  [[ -s $out/basics/pingpong.txt ]] || { echo "figures: lab 03 printed no table" >&2; exit 1; }
fi

if wanted memory_wall; then
  mkdir -p "$out/memory"
  log_name=memory_memory_wall run "$(binary examples/04_memory_wall/memory_wall)" --svg "$out/memory/memory_wall.svg"
  # Chapter 04's activation count against what the executor measures: lab 07 at the chapter's
  # sizes (L = 8 layers per stage, batch 128, h = 1024), its table quoted as printed.
  log_name=memory_gpipe_h1024 ranks 2 "$(binary examples/07_gpipe/gpipe)" --hidden 1024 --batch 128 --steps 2
  values pipeline memory_gpipe_h1024 memory_wall "$out/memory/gpipe_h1024.json"
  sed -n 's/^\[rank0\]: \( *\(M\|[0-9][0-9]*\) |.*\)$/\1/p' "$logs/memory_gpipe_h1024.log" >"$out/memory/gpipe_h1024.txt"
  [[ -s $out/memory/gpipe_h1024.txt ]] || { echo "figures: lab 07 printed no table" >&2; exit 1; }
fi

if wanted data_parallel || wanted manual_dp; then
  # Chapter 11: lab 11 as the chapter runs it (5 steps, its output quoted from manual_dp.txt) and
  # for 30 steps drawing the losses; the monolith at the compute-bound size (hidden 1024, batch
  # 128) for the samples/s the chapter's arithmetic starts from. Numbers in manual_dp.json.
  mkdir -p "$out/data_parallel"
  lab=$(binary examples/11_manual_dp/manual_dp)
  OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 log_name=data_parallel_manual_dp_5 run "$lab"
  OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 log_name=data_parallel_manual_dp run "$lab" 30 --svg "$out/data_parallel/manual_dp_losses.svg"
  OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 log_name=data_parallel_monolith_h1024 run "$(binary examples/01_monolith/monolith)" \
    --hidden 1024 --batch 128 --steps 30
  cp "$logs/data_parallel_manual_dp_5.log" "$out/data_parallel/manual_dp.txt"
  printed manual_dp "$out/data_parallel/manual_dp.json" '
    { r = (run == "data_parallel_manual_dp" ? "[30 steps]" : "") }
    run ~ /manual_dp/ && /^step [0-9]+ +loss: whole batch / {
      whole = $6; r0 = $12; r1 = $18; mean = $21
      if (run ~ /_5$/ || $2 == 1) {
        put("loss_whole" r "[step " $2 "]", whole); put("loss_replica0" r "[step " $2 "]", r0)
        put("loss_replica1" r "[step " $2 "]", r1); put("loss_mean" r "[step " $2 "]", mean)
      }
      d = mean - whole; if (d < 0) d = -d; if (d > mean_whole[r]) mean_whole[r] = d
      d = r0 - r1; if (d < 0) d = -d; if (d > replicas[r]) replicas[r] = d
      seen[r] = 1
    }
    run ~ /manual_dp/ && /^replicas bit-identical: / { put("replicas_identical" r, $NF == "yes") }
    run ~ /manual_dp/ && /^largest difference to the monolith after / {
      put("monolith_diff" r, $9); put("monolith_diff_in_1e-9" r, $9 * 1e9)
    }
    run ~ /monolith/ && / steps in [0-9.]+ s: [0-9]+ samples\/s/ {
      put("samples_per_s[monolith h1024 b128]", $6)
      put("epoch_minutes[1e6 samples]", 1e6 / $6 / 60); put("hours[100 epochs of 1e6 samples]", 1e8 / $6 / 3600)
    }
    END {
      for (r in seen) { put("mean_minus_whole_max" r, mean_whole[r]); put("replica_spread_max" r, replicas[r]) }
    }' data_parallel_manual_dp_5 data_parallel_manual_dp data_parallel_monolith_h1024
fi

if wanted data_parallel || wanted hybrid; then
  # Chapter 14: the hybrid lab on 4 ranks draws replica 0's step; its output is quoted, sorted by
  # rank (hybrid.txt), and its numbers are in hybrid.json: each rank's samples/s and all-reduce
  # time, and the bubble the lab wrote into the figure's subtitle.
  mkdir -p "$out/data_parallel"
  log_name=data_parallel_hybrid ranks 4 "$(binary examples/14_hybrid/hybrid)" 30 64 --svg "$out/data_parallel/hybrid_step.svg"
  log_name=data_parallel_predicted_1f1b_m4 run "$(binary tools/mpp-schedule/mpp-schedule)" 1f1b -p 2 -m 4 -q \
    --svg "$out/data_parallel/predicted_1f1b_m4_p2.svg"
  grep -a '^\[rank[0-9]*\]: ' "$logs/data_parallel_hybrid.log" | grep -av '^\[rank[0-9]*\]: BLAS: \| drawn in ' |
    sort -s -t: -k1,1 >"$out/data_parallel/hybrid.txt"
  all_ranks=1 printed hybrid "$out/data_parallel/hybrid.json" '
    rank == 0 && /^step +[0-9]+ +global mean loss / { put("loss[step " $2 "]", $NF) }
    /^rank [0-9]+: [0-9]+ samples\/s, [0-9.]+ ms per step averaging / {
      r = $2; sub(/:$/, "", r); put("samples_per_s[rank " r "]", $3); put("allreduce_ms[rank " r "]", $5); ++ranks
    }
    FILENAME ~ /\.svg$/ && match($0, /pipeline bubble measured [0-9.]+%, predicted [0-9.]+%/) {
      split(substr($0, RSTART, RLENGTH), w, /[ %,]+/); put("bubble_pct[rank 0]", w[4]); put("predicted_pct[rank 0]", w[6])
    }
    END { if (ranks != 4) { print "figures: lab 14 did not report 4 ranks" > "/dev/stderr"; exit 1 } }
    ' data_parallel_hybrid "$out/data_parallel/hybrid_step.svg"
fi

if wanted ddp; then
  # Chapters 12 and 13. Lab 12 on 2 ranks: per-tensor and coalesced, then wider layers and a
  # larger batch. Lab 13 twice: on 2 ranks of this host over loopback, and on one rank in each of
  # two network namespaces whose link is limited to 2 Gbit/s (scripts/netns shape), where a
  # transfer takes the link's time and leaves the CPU free. Each "node" gets a CPU of its own
  # (taskset), as two machines would; mpprun binds its one rank to the CPU it is given. Each
  # run's values beside its figure, and what rank 0 printed as text, for the chapters to quote.
  mkdir -p "$out/data_parallel"
  lab12=$(binary examples/12_naive_dp/naive_dp)
  for v in "naive_dp:" "naive_dp_coalesced:--coalesced" "naive_dp_h512:--hidden 512" "naive_dp_b256:--global-batch 256"; do
    name=${v%%:*}; read -r -a extra <<<"${v#*:}"
    log_name=data_parallel_$name ranks 2 "$lab12" "${extra[@]}" >/dev/null
    values naive_dp "data_parallel_$name" ddp "$out/data_parallel/$name.json"
  done
  sed -n 's/^\[rank[01]\]: //p' "$logs/data_parallel_naive_dp.log" | grep -E '^rank [01] ' |
    sed -E 's/ +$//' >"$out/data_parallel/naive_dp.txt"
  lab13=$(binary examples/13_ddp/ddp)
  rank0_text() { sed -n 's/^\[rank0\]: //p' "$1" | grep -vE '^(BLAS|one naive DP step)' | sed -E 's/ +$//' | cat -s; }
  log_name=data_parallel_ddp_loopback ranks 2 "$lab13" --steps 8 --svg "$out/data_parallel/ddp_overlap_loopback.svg"
  values ddp data_parallel_ddp_loopback ddp "$out/data_parallel/ddp_overlap_loopback.json"
  rank0_text "$logs/data_parallel_ddp_loopback.log" >"$out/data_parallel/ddp_overlap_loopback.txt"
fi

if wanted ddp || wanted ddp_link; then
  # Lab 13 over the 2 Gbit/s link (`--only ddp_link` alone): a global batch of 1024, so that the
  # backward lasts about as long as the link takes for the 64 MiB of gradients and has time to
  # hide them.
  mkdir -p "$out/data_parallel"
  lab13=$(binary examples/13_ddp/ddp)
  rank0_text() { sed -n 's/^\[rank0\]: //p' "$1" | grep -vE '^(BLAS|one naive DP step)' | sed -E 's/ +$//' | cat -s; }
  if ! why=$("$root/scripts/netns" check 2>&1); then
    echo "figures: SKIP ddp over a 2 Gbit/s link: ${why#netns: SKIP: } (the loopback run is drawn)" >&2
  else
    prefix="mpddp$$"; prefix=${prefix:0:10}
    trap '"$root/scripts/netns" down "$prefix" >/dev/null 2>&1 || true' EXIT
    "$root/scripts/netns" up "$prefix" >/dev/null
    "$root/scripts/netns" shape "$prefix" 2gbit >/dev/null
    master=$("$root/scripts/netns" addr "$prefix" 0)
    mpprun=$(binary tools/mpprun/mpprun)
    p=$((20000 + RANDOM % 20000))  # inside fresh namespaces: nobody else listens there
    args=(--steps 8 --global-batch 1024 --svg "$out/data_parallel/ddp_overlap.svg" --link "two network namespaces, 2 Gbit/s link")
    name=data_parallel_ddp_link
    echo "scripts/netns shape PREFIX 2gbit; one rank on each node, node i on CPU i: $lab13 ${args[*]}" | sed "s|$root/||g" >"$logs/$name.cmd"
    echo "+ two namespaces joined by a 2 Gbit/s link, one rank each: $lab13 ${args[*]}" >&2
    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 "$root/scripts/netns" exec "$prefix" 1 \
      timeout --kill-after=5 600 taskset -c 1 "$mpprun" --nnodes 2 --node-rank 1 --nproc-per-node 1 \
      --master-addr "$master" --master-port "$p" --log-dir "" "$lab13" "${args[@]}" >"$logs/$name.node1.log" 2>&1 &
    node1=$!
    rc=0
    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 "$root/scripts/netns" exec "$prefix" 0 \
      timeout --kill-after=5 600 taskset -c 0 "$mpprun" --nnodes 2 --node-rank 0 --nproc-per-node 1 \
      --master-addr "$master" --master-port "$p" --log-dir "" "$lab13" "${args[@]}" 2>&1 | tee "$logs/$name.log" || rc=$?
    wait "$node1" || rc=$?
    "$root/scripts/netns" down "$prefix" >/dev/null 2>&1 || true
    trap - EXIT
    ((rc == 0)) || { tail -n 30 "$logs/$name.log" "$logs/$name.node1.log" >&2; echo "figures: lab 13 over the link failed" >&2; exit 1; }
    values ddp "$name" ddp_link "$out/data_parallel/ddp_overlap.json"
    rank0_text "$logs/$name.log" >"$out/data_parallel/ddp_overlap.txt"
  fi
fi

if wanted transformer; then
  # Chapter 15's runs: the default config (2 blocks), the same with 4 blocks (each with the CPU
  # time it took, appended to its log: on shared cores the wall time says little), and the
  # 100-step reference run of its checkpoint exercise.
  mkdir -p "$out/transformer"
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  lab=$(binary examples/15_tiny_transformer/train_tiny_transformer)
  # CPU seconds between two outputs of `times` (user + system of this shell's finished children;
  # called in this shell, not in a $(...) subshell, whose children are its own).
  cpu_between() {
    awk 'FNR == 2 { for (i = 1; i <= 2; ++i) { split($i, t, "m"); sub(/s$/, "", t[2]); s[FILENAME] += t[1] * 60 + t[2] } }
         END { printf "%.2f", s[ARGV[2]] - s[ARGV[1]] }' "$1" "$2"
  }
  times >"$tmp/times0"
  OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 log_name=transformer_2_blocks run "$lab" --epochs 2 --out-dir "$tmp/l2"
  times >"$tmp/times1"
  echo "figures: cpu seconds $(cpu_between "$tmp/times0" "$tmp/times1")" >>"$logs/transformer_2_blocks.log"
  cp "$tmp/l2/loss_curve.svg" "$out/transformer/loss_curve_2_blocks.svg"
  grep -a '^greedy sample: ' "$logs/transformer_2_blocks.log" >"$out/transformer/greedy_sample_2_blocks.txt"
  sed 's/"num_hidden_layers": *[0-9]*/"num_hidden_layers": 4/' config/config.json >"$tmp/config4.json"
  times >"$tmp/times0"
  OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 log_name=transformer_4_blocks run "$lab" --config "$tmp/config4.json" --epochs 2 --out-dir "$tmp/l4"
  times >"$tmp/times1"
  echo "figures: cpu seconds $(cpu_between "$tmp/times0" "$tmp/times1")" >>"$logs/transformer_4_blocks.log"
  cp "$tmp/l4/loss_curve.svg" "$out/transformer/loss_curve_4_blocks.svg"
  OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 log_name=transformer_100_steps run "$lab" --max-steps 100 --out-dir "$tmp/s100"
  # Chapter 16: the same program on 2 ranks with DDP; each rank's train.log, drawn by mpp-plot.
  log_name=transformer_ddp2 ranks 2 "$lab" --ddp --epochs 2 --out-dir "$tmp/ddp2"
  log_name=transformer_ddp2_plot run "$(binary tools/docs/mpp-plot)" --x 1 --y 2 \
    --title "Lab 15 with --ddp on 2 ranks: each rank's loss on its own half of each batch" \
    --subtitle "logs/rank_<r>/train.log, every 5 steps; the same model on both ranks, different data" \
    --x-label "optimizer step" --y-label "cross-entropy (nats per character)" \
    "$tmp/ddp2/logs/rank_0/train.log=rank 0" "$tmp/ddp2/logs/rank_1/train.log=rank 1" \
    --svg "$out/transformer/ddp2_rank_losses.svg"
  # The numbers of chapters 15 and 16, from what the runs printed and the files they wrote
  # (metrics.csv: step,epoch,train_loss,validation_loss,...; train.log: step loss samples/s time).
  printed transformer "$out/transformer/transformer.json" '
    function label(    f) {
      f = FILENAME
      if (f ~ /\/l2\// || run == "transformer_2_blocks") return "[2 blocks]"
      if (f ~ /\/l4\// || run == "transformer_4_blocks") return "[4 blocks]"
      if (run == "transformer_100_steps") return "[100 steps]"
      if (f ~ /rank_0\/train\.log$/) return "[ddp2 rank 0]"
      if (f ~ /rank_1\/train\.log$/) return "[ddp2 rank 1]"
      return "[ddp2]"
    }
    function number_after(text,    v) {  # the number that follows text on this line
      if (!match($0, text " [0-9.]+")) return ""
      v = substr($0, RSTART, RLENGTH); sub(/^.* /, "", v); return v
    }
    { r = label() }
    /rank\(s\), [0-9]+ samples per rank per step/ {
      per_rank[r] = number_after("rank\\(s\\),"); ranks[r] = $0; sub(/ rank\(s\),.*/, "", ranks[r]); sub(/.* /, "", ranks[r])
      chars[r] = number_after("sequences of")
    }
    /^done: [0-9]+ steps in [0-9.]+ s / {
      put("seconds" r, $5); put("samples_per_s" r, $2 * per_rank[r] * ranks[r] / $5)
      put("characters_per_s" r, $2 * per_rank[r] * ranks[r] * chars[r] / $5)
      put("last_train_loss" r, number_after("last train loss")); put("last_validation_loss" r, number_after("validation loss"))
    }
    /^figures: cpu seconds / { put("cpu_seconds" r, $NF); cpu[r] = $NF }
    FILENAME ~ /metrics\.csv$/ && /^[0-9]/ {
      split($0, c, ","); s = c[1] + 0
      train[r, s] = c[3]; if (s > last[r]) last[r] = s
      if (s == 1 || s == 5 || s == 100 || s == 300 || s == 584) put("train_loss" r "[step " s "]", c[3])  # the tables steps
      if (c[4] != "") {
        put("validation_loss" r "[step " s "]", c[4])
        if (c[4] < 1 && !(r in below_1)) { below_1[r] = s; put("first_validation_below_1" r, s) }
      }
    }
    FILENAME ~ /train\.log$/ && /^[0-9]/ {
      rank_loss[r, $1 + 0] = $2; steps[$1 + 0] = 1
      if ($1 == 5 || $1 == 100 || $1 == 300 || $1 == 584) put("loss" r "[step " $1 "]", $2)
    }
    END {
      if (cpu["[2 blocks]"] > 0) put("cpu_ratio[4 blocks / 2 blocks]", cpu["[4 blocks]"] / cpu["[2 blocks]"])
      # How far the two ranks losses lie apart (chapter 16): the mean gap over the run, early, late.
      for (s in steps) {
        if (!(("[ddp2 rank 0]", s) in rank_loss) || !(("[ddp2 rank 1]", s) in rank_loss)) continue
        d = rank_loss["[ddp2 rank 0]", s] - rank_loss["[ddp2 rank 1]", s]; if (d < 0) d = -d
        gap += d; ++gaps
        if (s + 0 <= 50) { early += d; ++earlies }
        if (s + 0 > 400) { late += d; ++lates; level += (rank_loss["[ddp2 rank 0]", s] + rank_loss["[ddp2 rank 1]", s]) / 2 }
      }
      if (gaps) put("rank_gap_mean", gap / gaps)
      if (earlies) put("rank_gap_mean[steps <= 50]", early / earlies)
      if (lates) { put("rank_gap_mean[steps > 400]", late / lates); put("rank_loss_mean[steps > 400]", level / lates) }
      # Where 2 ranks and 1 process part (chapter 16): the first step whose train losses differ
      # by more than 1e-5, 1e-3, 1e-2.
      for (s = 1; s <= last["[ddp2]"]; ++s) {
        if (!(("[ddp2]", s) in train) || !(("[2 blocks]", s) in train)) continue
        d = train["[ddp2]", s] - train["[2 blocks]", s]; if (d < 0) d = -d
        if (d > 1e-5 && !a5) { a5 = 1; put("first_step_apart[1e-5]", s) }
        if (d > 1e-3 && !a3) { a3 = 1; put("first_step_apart[1e-3]", s) }
        if (d > 1e-2 && !a2) { a2 = 1; put("first_step_apart[1e-2]", s) }
      }
    }
  ' transformer_2_blocks transformer_4_blocks transformer_100_steps transformer_ddp2 \
    "$tmp/l2/metrics.csv" "$tmp/l4/metrics.csv" "$tmp/ddp2/metrics.csv" \
    "$tmp/ddp2/logs/rank_0/train.log" "$tmp/ddp2/logs/rank_1/train.log"
fi

if wanted multinode; then
  # Chapter 17: lab 17's 4-rank job across two network namespaces joined by a veth pair
  # (scripts/netns, needs root), 2 ranks in each, next to the same job on one host over loopback:
  # the loss per step of both, for DDP and for the pipeline (the chapter's model: 4 x Linear(64),
  # batch 32), and one pipeline step as the ranks measured it, with hidden 512 and batch 64 as in
  # the pipeline chapters so that compute shows next to the transfers. Skipped, with the reason,
  # where namespaces cannot be created.
  if ! why=$("$root/scripts/netns" check 2>&1); then
    echo "figures: SKIP multinode: ${why#netns: SKIP: } (the other groups are not affected)" >&2
  else
    mkdir -p "$out/17-cluster"
    mn=$(mktemp -d)
    prefix="mpfig$$"; prefix=${prefix:0:10}
    trap 'rm -rf "$mn" ${tmp:+"$tmp"}; "$root/scripts/netns" down "$prefix" >/dev/null 2>&1 || true' EXIT
    "$root/scripts/netns" up "$prefix" >/dev/null
    master=$("$root/scripts/netns" addr "$prefix" 0)
    lab=$(binary examples/17_multinode/lab17_multinode)
    mpprun=$(binary tools/mpprun/mpprun)
    plot=$(binary tools/docs/mpp-plot)
    port() {  # a TCP port nobody on this host listens on now
      local p
      for _ in $(seq 1 50); do
        p=$((20000 + RANDOM % 20000))
        ss -Htln "sport = :$p" 2>/dev/null | grep -q . || { echo "$p"; return; }
      done
      echo "figures: no free TCP port found" >&2; exit 1
    }
    veth() {  # bytes node0's end of the veth has sent (tx) or received (rx) so far
      ip -n "${prefix}0" -s -j link show "${prefix}v0" | sed "s/.*\"$1\":{\"bytes\":\([0-9]*\).*/\1/"
    }
    losses() {  # "step loss" columns from what rank 0 printed
      grep -ao 'mpp-job: step [0-9]* loss [-0-9.eE+]*' "$1" | awk '{print $3, $5}'
    }
    two_nodes() {  # two_nodes NAME JOB-ARGS...: node1 in the background, node0 here; NAME.node<i>.log
      local name=$1 p rc=0 node1 start; shift
      p=$(port)
      start=$(date +%s.%N)
      echo "+ two namespaces, node0 $master and node1 $("$root/scripts/netns" addr "$prefix" 1), 2 ranks each: $lab $*" >&2
      echo "scripts/netns exec $prefix 0|1 $mpprun --nnodes 2 --node-rank 0|1 --nproc-per-node 2 --master-addr $master --master-port $p --log-dir '' $lab $*" |
        sed "s|$root/||g" >"$logs/$name.node0.cmd"
      OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 "$root/scripts/netns" exec "$prefix" 1 \
        timeout --kill-after=5 300 "$mpprun" --nnodes 2 --node-rank 1 --nproc-per-node 2 \
        --master-addr "$master" --master-port "$p" --log-dir "" "$lab" "$@" >"$logs/$name.node1.log" 2>&1 &
      node1=$!
      OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 "$root/scripts/netns" exec "$prefix" 0 \
        timeout --kill-after=5 300 "$mpprun" --nnodes 2 --node-rank 0 --nproc-per-node 2 \
        --master-addr "$master" --master-port "$p" --log-dir "" "$lab" "$@" >"$logs/$name.node0.log" 2>&1 || rc=$?
      wait "$node1" || rc=$?
      ((rc == 0)) || { tail -n 30 "$logs/$name.node0.log" "$logs/$name.node1.log" >&2
                       echo "figures: the two-namespace run $name failed" >&2; exit 1; }
      echo "figures: wall seconds $(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }')" \
        >>"$logs/$name.node0.log"
    }
    final() { grep -ao 'mpp-job: final loss [-0-9.eE+naninf]*' "$1" | tail -n1 | awk '{print $4}'; }
    steps=20
    for mode in ddp pipeline; do
      args=(--mode "$mode" --steps "$steps")
      log_name=multinode_${mode}_one_host ranks 4 --master-port "$(port)" "$lab" "${args[@]}" >"$mn/one_host.out"
      tx=$(veth tx); rx=$(veth rx)
      two_nodes "multinode_${mode}" "${args[@]}"
      sent=$(($(veth tx) - tx)); received=$(($(veth rx) - rx))
      losses "$mn/one_host.out" >"$mn/one_host.txt"
      losses "$logs/multinode_${mode}.node0.log" >"$mn/two_nodes.txt"
      one=$(final "$mn/one_host.out"); two=$(final "$logs/multinode_${mode}.node0.log")
      if cmp -s "$mn/one_host.txt" "$mn/two_nodes.txt" && [[ -n $one && $one == "$two" ]]; then
        same="equal at every step (one host drawn under two namespaces)"
      else
        same="the losses differ"
      fi
      echo "figures: $mode: final loss two namespaces $two, one host $one; $same; veth node0 sent $sent B, received $received B in $steps steps" |
        tee -a "$logs/multinode_${mode}.node0.log" >&2
      name=$([[ $mode == ddp ]] && echo "DDP" || echo "pipeline, 1F1B")
      log_name=multinode_${mode}_plot run "$plot" --x 1 --y 2 \
        --title "Lab 17 ($name), 4 ranks: two namespaces against one host" \
        --subtitle "$same; veth: $((sent / 1024)) KiB out of node0, $((received / 1024)) KiB in; 2 shared cores" \
        --x-label "optimizer step" --y-label "MSE loss (rank 0)" \
        "$mn/one_host.txt=one host, loopback" "$mn/two_nodes.txt=two namespaces over the veth" \
        --svg "$out/17-cluster/netns_loss_$mode.svg"
    done
    two_nodes multinode_pipeline_timeline --mode pipeline --steps 10 --hidden 512 --batch 64 \
      --svg "$out/17-cluster/netns_measured_pipeline_1f1b_p4.svg"
    # The chapter's numbers: each mode's final loss and veth bytes (the "figures:" line above),
    # and the measured step's time and bubble, from the subtitle the lab wrote into its picture.
    printed multinode "$out/17-cluster/netns.json" '
      /^figures: (ddp|pipeline): final loss two namespaces / {
        m = $2; sub(/:$/, "", m)
        v = $7; sub(/,$/, "", v); put("final_loss_two_namespaces[" m "]", v)
        v = $10; sub(/;$/, "", v); put("final_loss_one_host[" m "]", v)
        put("losses_equal[" m "]", index($0, "equal at every step") > 0)
        put("veth_sent_mb[" m "]", number_after("sent") / 1e6); put("veth_received_mb[" m "]", number_after("received") / 1e6)
        put("veth_sent_kb_per_step[" m "]", number_after("sent") / 1e3 / number_after("B in"))
        put("veth_received_kb_per_step[" m "]", number_after("received") / 1e3 / number_after("B in"))
        put("steps[" m "]", number_after("B in"))
      }
      /^figures: wall seconds / { m = run; sub(/^multinode_/, "", m); sub(/\.node0$/, "", m); put("wall_s_two_namespaces[" m "]", $NF) }
      function number_after(text,    v) {
        if (!match($0, text " [0-9]+")) return ""
        v = substr($0, RSTART, RLENGTH); sub(/^.* /, "", v); return v
      }
      FILENAME ~ /\.svg$/ && match($0, /step [0-9.]+ ms, bubble [0-9.]+%/) {
        split(substr($0, RSTART, RLENGTH), w, /[ %,]+/); put("step_ms[timeline]", w[2]); put("bubble_pct[timeline]", w[5])
      }
    ' multinode_ddp.node0 multinode_pipeline.node0 "$out/17-cluster/netns_measured_pipeline_1f1b_p4.svg"
  fi
fi

if wanted faults; then
  # Chapter 17's fault table: the multi-node fault tests (a rank SIGKILLed or stalled at step 3,
  # with one launcher and with one per node; no root needed), whose PASS lines give how long
  # the job took to stop after the fault and how the launchers exited. Values in faults.json.
  mkdir -p "$out/17-cluster"
  for test in kill stall; do
    for mode in ddp pipeline; do
      log_name=faults_${test}_$mode run env MPP_SOURCE_DIR=. MPPRUN="$(binary tools/mpprun/mpprun)" \
        MPP_JOB="$(binary examples/17_multinode/lab17_multinode)" bash tests/multinode/fault_$test.sh "$mode"
    done
  done
  printed faults "$out/17-cluster/faults.json" '
    { m = run; sub(/^faults_(kill|stall)_/, "", m) }
    /^PASS: one launcher: exit [0-9]+, .* all ranks gone [0-9.]+ s after the kill/ {
      v = $0; sub(/^PASS: one launcher: exit /, "", v); sub(/,.*/, "", v); put("exit[kill, one launcher, " m "]", v)
      v = $0; sub(/ s after the kill.*/, "", v); sub(/.* /, "", v); put("stopped_s[kill, one launcher, " m "]", v)
    }
    /^node 1: exit [0-9]+; node 0: exit [0-9]+, [0-9.]+ s after the kill/ {
      v = $4; sub(/;$/, "", v); put("exit_node1[kill, one launcher per node, " m "]", v)
      v = $8; sub(/,$/, "", v); put("exit_node0[kill, one launcher per node, " m "]", v)
      put("stopped_s[kill, one launcher per node, " m "]", $9)
    }
    /^PASS: stall: .* job ended [0-9.]+ s after the stall began, exit [0-9]+/ {
      put("exit[stall, " m "]", $NF)
      v = $0; sub(/ s after the stall began.*/, "", v); sub(/.* /, "", v); put("stopped_s[stall, " m "]", v)
    }
  ' faults_kill_ddp faults_kill_pipeline faults_stall_ddp faults_stall_pipeline
fi

echo "figures: written under docs/figures/ (check them with tools/docs/mpp-docs check)"
