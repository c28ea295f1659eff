#!/usr/bin/env python3
"""Two builds of one benchmark binary, measured back to back: is the candidate slower?

Runs the baseline's and the candidate's binary in alternating rounds (A B, then B A, ...), each
round one run of every benchmark the filter selects, and compares their throughput
(`items_per_second`, samples/s for the pipeline and DP matrices) benchmark by benchmark. Rounds
pair the two builds under the same machine state, so slow drifts of the machine (another job, the
CPU clock) fall out of the ratio; the interval is over rounds.

    benchmarks/compare_builds.py --baseline /tmp/prev/pipeline_bench \\
        --candidate build/release/benchmarks/pipeline/pipeline_bench \\
        --filter 'course_h128_b32' --rounds 5 --out /tmp/compare

Multi-rank binaries run under mpprun (--mpprun, --nproc). Prints one line per benchmark:
candidate/baseline throughput, geometric mean over rounds with a 95 % interval (Student's t on
the log ratios), then the same for the whole matrix (per round, the geometric mean over the
benchmarks). A regression is an interval wholly below 1. --repetitions N runs each benchmark N
times per launch and keeps their median. Raw JSON of every run is kept under --out.
"""
import argparse
import json
import math
import os
import statistics
import subprocess
import sys

# Student's t, two-sided 95 %, by degrees of freedom (1..30); beyond that 1.96.
T95 = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179,
       2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064,
       2.060, 2.056, 2.052, 2.048, 2.045, 2.042]


def run(binary, args, out_path):
    cmd = []
    if args.mpprun:
        cmd = [args.mpprun, "--nproc-per-node", str(args.nproc), "--log-dir", "", "--timeout",
               str(args.timeout)]
    cmd += [binary, f"--benchmark_filter={args.filter}", f"--benchmark_out={out_path}",
            "--benchmark_out_format=json", f"--benchmark_repetitions={args.repetitions}"]
    result = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            timeout=args.timeout + 30)
    if result.returncode != 0:
        sys.exit(f"compare_builds: {binary} failed (exit {result.returncode}):\n{result.stderr}")
    with open(out_path) as f:
        data = json.load(f)
    runs = {}  # name -> items_per_second of each repetition
    for b in data["benchmarks"]:
        if b.get("run_type", "iteration") == "iteration" and "items_per_second" in b:
            runs.setdefault(b.get("run_name", b["name"]), []).append(b["items_per_second"])
    return {name: statistics.median(rates) for name, rates in runs.items()}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--baseline", required=True, help="the binary built from the baseline")
    parser.add_argument("--candidate", required=True, help="the binary built from the candidate")
    parser.add_argument("--filter", required=True, help="--benchmark_filter for both")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--mpprun", default="", help="launcher for multi-rank binaries")
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--repetitions", type=int, default=1,
                        help="runs of each benchmark per launch; their median is the launch's")
    parser.add_argument("--timeout", type=int, default=900, help="seconds per run")
    parser.add_argument("--out", required=True, help="directory for the raw JSON")
    args = parser.parse_args()
    if args.rounds < 2:
        sys.exit("compare_builds: --rounds must be >= 2 for an interval")
    os.makedirs(args.out, exist_ok=True)

    ratios = {}  # name -> [log(candidate / baseline) per round]
    matrix = []  # per round: the mean log ratio over the benchmarks both builds ran
    for r in range(args.rounds):
        order = [("baseline", args.baseline), ("candidate", args.candidate)]
        if r % 2:
            order.reverse()
        got = {}
        for label, binary in order:
            got[label] = run(binary, args, os.path.join(args.out, f"round{r}_{label}.json"))
            print(f"round {r + 1}/{args.rounds}: {label} done", file=sys.stderr, flush=True)
        round_logs = []
        for name, base in got["baseline"].items():
            cand = got["candidate"].get(name)
            if cand and base > 0:
                ratios.setdefault(name, []).append(math.log(cand / base))
                round_logs.append(math.log(cand / base))
        if round_logs:
            matrix.append(statistics.fmean(round_logs))

    if not ratios:
        sys.exit("compare_builds: no benchmark with items_per_second ran in both builds")
    width = max(len(n) for n in ratios)
    print(f"{'benchmark':<{width}}  candidate/baseline  95% interval      rounds")
    for name in sorted(ratios):
        mean, low, high = interval(ratios[name])
        print(f"{name:<{width}}  {mean:18.3f}  [{low:.3f}, {high:.3f}]  {len(ratios[name]):6d}")
    mean, low, high = interval(matrix)
    # The matrix as a whole: per round the geometric mean over its benchmarks, then the interval
    # over rounds. Noise of single benchmarks averages out within a round; what the two builds
    # share (the same code path) does not.
    print(f"geometric mean over {len(ratios)} benchmarks: {mean:.3f} [{low:.3f}, {high:.3f}] "
          f"(95 % interval over {len(matrix)} rounds)")


def interval(logs):
    """Geometric mean of the ratios whose logs are given, with its 95 % Student interval."""
    mean = statistics.fmean(logs)
    half = 0.0
    if len(logs) > 1:
        t = T95[min(len(logs) - 2, len(T95) - 1)] if len(logs) - 1 <= 30 else 1.96
        half = t * statistics.stdev(logs) / math.sqrt(len(logs))
    return math.exp(mean), math.exp(mean - half), math.exp(mean + half)


if __name__ == "__main__":
    main()
