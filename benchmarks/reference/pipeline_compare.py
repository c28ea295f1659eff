#!/usr/bin/python3
"""mpp's pipeline next to a hand-written C++ loop and a torch.distributed reference, side by side.

Runs benchmarks/pipeline's pipeline_bench on 2 ranks through mpprun (the single-process model, the
compute-only bound, the hand-written GPipe loop on raw c10d of each transport, and
Pipeline<Uniform<2>, GPipe<8>, Async<Gloo|Shm>> plus the other schedules), then
pipeline_reference.py (GPipe with torch.distributed isend/irecv over Gloo) on the same
configurations, and prints samples/s and the ratios:
  library / hand-written loop on the same transport
  best schedule / compute-only bound (both stages on their cores, no message, x M/(M+1))
  best schedule / Python reference

    /usr/bin/python3 benchmarks/reference/pipeline_compare.py [--build build/release] [--all]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
CONFIGS = ["course_h128_b32", "compute_h1024_b128", "compute_h1024_b512"]
TRANSPORTS = ["Gloo", "Shm"]


def run(cmd, env):
    print("$ " + " ".join(cmd), flush=True)
    out = subprocess.run(cmd, env=env, check=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return out.stdout


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", default="build/release")
    p.add_argument("--all", action="store_true", help="run the whole Schedule x Comm x Partition matrix")
    args = p.parse_args()
    bench = os.path.join(args.build, "benchmarks", "pipeline", "pipeline_bench")
    mpprun = os.path.join(args.build, "tools", "mpprun", "mpprun")
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")

    with tempfile.TemporaryDirectory() as tmp:
        out_json = os.path.join(tmp, "pipeline.json")
        selection = [] if args.all else [
            "--benchmark_filter=single_process|compute_only/both|hand_written|/Async<(Gloo|Shm)>/Uniform<2>/"]
        text = run([mpprun, "--nproc-per-node", "2", "--log-dir", os.path.join(tmp, "logs"), bench] + selection +
                   ["--benchmark_out=" + out_json, "--benchmark_out_format=json"], env)
        blas = [l for l in text.splitlines() if "BLAS" in l]
        with open(out_json) as f:
            runs = json.load(f)["benchmarks"]
        ref_text = run([mpprun, "--nproc-per-node", "2", "--log-dir", os.path.join(tmp, "logs-py"), sys.executable,
                        os.path.join(HERE, "pipeline_reference.py"), "--config", "all"], env)
    python = {}
    for line in ref_text.splitlines():
        if "{" in line:
            r = json.loads(line[line.index("{"):])
            python[r["config"]] = r["samples_per_second"]

    def find(prefix, config):
        for r in runs:
            if r["name"].startswith(prefix) and f"/{config}/" in r["name"] + "/":
                return r
        raise RuntimeError(f"no benchmark {prefix}.../{config} in the output")

    print()
    for line in blas:
        print(line.split("]: ", 1)[-1])
    print()
    print(f"{'configuration':<20} {'what':<46} {'samples/s':>10}  ratio")
    for config in CONFIGS:
        single = find("single_process", config)
        bound = find("compute_only/both_stages_no_comm", config)["pipeline_bound_P2_M8"]
        rows = [
            ("single process, one core", single["items_per_second"], ""),
            ("compute-only bound (2 cores, no message, x 8/9)", bound, ""),
        ]
        py = python.get(config)
        rows.append(("Python torch.distributed GPipe (Gloo)", py if py else float("nan"), "" if py else "missing"))
        for transport in TRANSPORTS:
            hand = find(f"hand_written/GPipe<8>/raw c10d {transport}", config)["items_per_second"]
            rows.append((f"hand-written GPipe loop (raw c10d {transport})", hand, ""))
            best = None
            for r in runs:
                if f"/{config}/" in r["name"] + "/" and f"/Async<{transport}>/Uniform<2>/" in r["name"]:
                    name = r["name"].split("/" + config)[0]
                    rate = r["items_per_second"]
                    ratio = f"bubble {100 * r.get('bubble', 0):.1f}% (predicted {100 * r.get('bubble_pred_meas', 0):.1f}%)"
                    if name.startswith("GPipe<8>/"):
                        ratio += f", {rate / hand:.3f} of hand-written"
                    rows.append(("mpp " + name, rate, ratio))
                    if best is None or rate > best[1]:
                        best = (name, rate)
            if best:
                ratio = f"{best[1] / bound:.3f} of the bound"
                if py:
                    ratio += f", {best[1] / py:.2f}x Python"
                rows.append((f"best over {transport}: {best[0]}", best[1], ratio))
        for what, value, ratio in rows:
            print(f"{config:<20} {what:<46} {value:>10.0f}  {ratio}")
        print()


if __name__ == "__main__":
    main()
