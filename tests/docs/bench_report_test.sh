#!/usr/bin/env bash
# Tests bench-report end to end on a made-up tree: a fake Google Benchmark binary (a script that
# writes the JSON Google Benchmark writes), a fake PyTorch reference, a missing group, a failing
# binary and a hand-written section that must survive.
#   tests/docs/bench_report_test.sh path/to/bench-report
set -uo pipefail
tool=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }
expect() { grep -qF -- "$2" "$1" || { fail "no '$2' in $1"; }; }

src=$work/src build=$work/build
mkdir -p "$src/docs" "$src/benchmarks/reference" "$build/benchmarks/pipeline" "$build/benchmarks/comm"

cat >"$build/benchmarks/pipeline/bench_fake" <<'SH'
#!/usr/bin/env bash
# Stands for a Google Benchmark binary: --benchmark_out=FILE gets the JSON.
echo "BLAS: OpenBLAS (openmp) 0.3.21 from /fake, threads per rank: $OMP_NUM_THREADS"
echo "bench_fake: a line on stderr" >&2
[[ " $* " == *" --benchmark_format=json "* ]] || { echo "expected --benchmark_format=json" >&2; exit 2; }
cat <<JSON
{"context": {"num_cpus": 2},
 "benchmarks": [
  {"name": "GPipe<8>/Async<Gloo>/Uniform<2>", "run_name": "GPipe<8>/Async<Gloo>/Uniform<2>", "run_type": "iteration",
   "iterations": 10, "real_time": 250.5, "cpu_time": 200.0, "time_unit": "ms", "items_per_second": 1021.5,
   "bubble_measured": 0.125, "bubble_predicted": 0.111},
  {"name": "Naive/Blocking<Gloo>/Uniform<2>", "run_name": "Naive/Blocking<Gloo>/Uniform<2>", "run_type": "iteration",
   "iterations": 10, "real_time": 400.0, "cpu_time": 300.0, "time_unit": "ms", "items_per_second": 640.0,
   "bubble_measured": 0.52, "bubble_predicted": 0.5}
 ]}
JSON
echo "summary: GPipe beats Naive by 1.6x {not json}"
SH
cat >"$build/benchmarks/comm/bench_broken" <<'SH'
#!/usr/bin/env bash
echo "mpp: rank 1 did not answer within 5000 ms" >&2
exit 3
SH
# A stand-in for mpprun: runs the program once as rank 0 of N, logs its stdout where mpprun does.
mkdir -p "$build/tools/mpprun"
cat >"$build/tools/mpprun/mpprun" <<'SH'
#!/usr/bin/env bash
[[ $1 == --nproc-per-node ]] || { echo "fake mpprun: expected --nproc-per-node" >&2; exit 2; }
n=$2; shift 2
[[ $1 == --log-dir ]] || { echo "fake mpprun: expected --log-dir" >&2; exit 2; }
logs=$2; shift 2
mkdir -p "$logs/rank_0"
echo "$n" >"$logs/ranks"
RANK=0 WORLD_SIZE=$n "$@" | tee "$logs/rank_0/stdout.log" | sed 's/^/[rank0]: /'
exit "${PIPESTATUS[0]}"
SH
chmod +x "$build/benchmarks/pipeline/bench_fake" "$build/benchmarks/comm/bench_broken" "$build/tools/mpprun/mpprun"
cat >"$src/benchmarks/reference/pipeline_fake.py" <<'PY'
import json, sys
print("log line: starting", sys.argv[1:])
if "--json" in sys.argv:
    print(json.dumps({"name": "torch GPipe m=8", "items_per_second": 900.0, "bubble_measured": 0.14}))
elif "--config" in sys.argv:
    import os
    print(json.dumps({"config": "course_h128_b32", "samples_per_second": 777.0, "ranks_seen": int(os.environ["WORLD_SIZE"])}))
else:
    print("RESULT torch_naive 500.0")
PY
touch "$src/benchmarks/reference/helper.py" "$src/benchmarks/reference/unlisted.py"
mkdir -p "$src/tools/bench-report"
cat >"$src/tools/bench-report/report.json" <<'JSON'
// comments are allowed
{
  "binaries": {"bench_fake": {"ranks": 1, "note": "A fake binary."}},
  "references": [
    {"group": "pipeline", "script": "pipeline_fake.py", "args": ["--json", "{build}"],
     "compare_with": "GPipe<8>/Async<Gloo>"},
    {"group": "pipeline", "script": "pipeline_fake.py", "args": [],
     "compare_with": "Naive/Blocking<Gloo>/Uniform<2>"},
    {"group": "pipeline", "script": "pipeline_fake.py", "args": ["--config"], "ranks": 2},
    {"group": "data_parallel", "script": "ddp_missing.py", "args": []}
  ],
  "not_run": {"helper.py": "imported by the others"}
}
JSON
cat >"$src/docs/benchmarks.md" <<'MD'
# Benchmarks

What the pipeline numbers mean, written by hand.
MD

out=$("$tool" --build-dir "$build" --source-dir "$src" 2>&1) || { fail "bench-report failed:"; echo "$out" >&2; }
grep -qF "skipping data_parallel" <<<"$out" || fail "a missing group is not reported on stderr: $out"
report=$src/docs/benchmarks.md
expect "$report" "| CPU |"
expect "$report" "| BLAS | BLAS: "
expect "$report" "OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1"
expect "$report" "What the pipeline numbers mean, written by hand."
expect "$report" "<!-- hand-written -->"
expect "$report" '| `GPipe<8>/Async<Gloo>/Uniform<2>` | 250.5 ms | 1022 | 0.1250 | 0.1110 | 900 | 1.14× |'
expect "$report" "it reported \`BLAS: OpenBLAS (openmp) 0.3.21 from /fake, threads per rank: 1\`"
expect "$report" "**Skipped:** no benchmark binary under ../build/benchmarks/data_parallel"
expect "$report" "**This binary failed** (exit 3)"
expect "$report" "mpp: rank 1 did not answer within 5000 ms"
expect "$report" "| \`pipeline_fake.py --json $build\` | torch GPipe m=8 | 900 | \`GPipe<8>/Async<Gloo>\` |"
expect "$report" '| `Naive/Blocking<Gloo>/Uniform<2>` | 400.0 ms | 640 | 0.5200 | 0.5000 | 500 | 1.28× |'
expect "$report" "| \`pipeline_fake.py\` | torch_naive | 500 | \`Naive/Blocking<Gloo>/Uniform<2>\` |"
expect "$report" "A fake binary."
expect "$report" "| \`ddp_missing.py\` | not run: benchmarks/reference/ddp_missing.py is not in this tree | – | – |"
expect "$report" "| load average | "
expect "$report" "summary: GPipe beats Naive by 1.6x {not json}"
expect "$report" "| \`pipeline_fake.py --config\` | course_h128_b32 | 777 | – |"
expect "$report" "\`../build/benchmarks/pipeline/bench_fake\` on 1 rank(s)"
[[ $(cat "$src/docs/figures/benchmarks/raw/pipeline__pipeline_fake.py_2_logs/ranks" 2>/dev/null) == 2 ]] ||
  fail "the 2-rank reference was not started through mpprun with 2 ranks"
expect "$report" "- \`benchmarks/reference/helper.py\`: imported by the others"
expect "$report" "- \`benchmarks/reference/unlisted.py\`: not listed in tools/bench-report/report.json"
expect "$report" "![bench_fake throughput](figures/benchmarks/pipeline_bench_fake.svg)"
for svg in pipeline_bench_fake.svg pipeline_bench_fake_bubble.svg; do
  f=$src/docs/figures/benchmarks/$svg
  [[ -s $f ]] || { fail "$svg was not written"; continue; }
  grep -qF "<svg" "$f" && grep -qF "GPipe&lt;8&gt;/Async&lt;Gloo&gt;/Uniform&lt;2&gt;" "$f" || fail "$svg lacks the labels"
done
grep -qF "PyTorch reference" "$src/docs/figures/benchmarks/pipeline_bench_fake.svg" || fail "the reference is not plotted"

# Rendering again from the raw data gives the same report, and keeps the hand-written part once.
cp "$report" "$work/first.md"
"$tool" --source-dir "$src" --render-only 2>/dev/null || fail "--render-only failed"
cmp -s "$report" "$work/first.md" || { fail "--render-only changed the report:"; diff "$work/first.md" "$report" >&2; }
[[ $(grep -c "written by hand" "$report") == 1 ]] || fail "the hand-written section is duplicated"

if ((failures)); then echo "bench_report_test: $failures failure(s)" >&2; exit 1; fi
echo "bench_report_test: all cases passed"
