#!/usr/bin/python3
"""mpp's pipeline next to a hand-written C++ loop and a torch.distributed reference, side by side.

Runs benchmarks/pipeline's pipeline_bench on 2 ranks through mpprun (the single-process model,
the hand-written GPipe loop on raw c10d, and Pipeline<Uniform<2>, GPipe<8>, Async<Gloo>> plus the
best schedule of the matrix), then pipeline_reference.py (GPipe with torch.distributed
isend/irecv) on the same two configurations, and prints samples/s and the ratios:
  library / hand-written loop      (target >= 0.98: the library costs at most 2 %)
  library / ideal 2 x M/(M+1) x single process   (target >= 0.90 on the compute-bound configuration)
  library / Python reference       (target >= 1.5)

    /usr/bin/python3 benchmarks/reference/pipeline_compare.py [--build build] [--all]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
CONFIGS = ["course_h128_b32", "compute_h1024_b128"]
LIBRARY = "GPipe<8>/Async<Gloo>/Uniform<2>"


def run(cmd, env):
    print("$ " + " ".join(cmd), flush=True)
    out = subprocess.run(cmd, env=env, check=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return out.stdout


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", default="build")
    p.add_argument("--all", action="store_true", help="run the whole Schedule x Comm x Partition matrix")
    args = p.parse_args()
    bench = os.path.join(args.build, "benchmarks", "pipeline", "pipeline_bench")
    mpprun = os.path.join(args.build, "tools", "mpprun", "mpprun")
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")

    with tempfile.TemporaryDirectory() as tmp:
        out_json = os.path.join(tmp, "pipeline.json")
        selection = [] if args.all else [
            "--benchmark_filter=single_process|hand_written|GPipe<8>/Async<Gloo>/Uniform<2>|"
            "OneFOneB<8>/Async<Gloo>/Uniform<2>|ZeroBubbleH1<8>/Async<Gloo>/Uniform<2>|"
            "Interleaved1F1B<8,2>/Async<Gloo>/Uniform<2>"]
        text = run([mpprun, "--nproc-per-node", "2", "--log-dir", os.path.join(tmp, "logs"), bench] + selection +
                   ["--benchmark_out=" + out_json, "--benchmark_out_format=json"], env)
        blas = [l for l in text.splitlines() if "BLAS" in l]
        with open(out_json) as f:
            runs = json.load(f)["benchmarks"]
        ref_text = run([mpprun, "--nproc-per-node", "2", "--log-dir", os.path.join(tmp, "logs-py"), sys.executable,
                        os.path.join(HERE, "pipeline_reference.py")], env)
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
    print(f"{'configuration':<20} {'what':<42} {'samples/s':>10}  ratio")
    for config in CONFIGS:
        single = find("single_process", config)
        ideal = single["ideal_P2_M8"]
        hand = find("hand_written", config)["items_per_second"]
        lib = find(LIBRARY, config)
        rate = lib["items_per_second"]
        rows = [
            ("single process, one core", single["items_per_second"], ""),
            ("ideal 2 x 8/9 x single", ideal, ""),
            ("hand-written GPipe loop (raw c10d)", hand, ""),
            ("mpp " + LIBRARY, rate, f"{rate / hand:.3f} of hand-written, {rate / ideal:.3f} of ideal"),
            ("Python torch.distributed GPipe", python.get(config, float("nan")),
             f"mpp is {rate / python[config]:.2f}x" if config in python else "missing"),
        ]
        for r in runs:
            if f"/{config}/" in r["name"] + "/" and "/Uniform<2>/" in r["name"] and not r["name"].startswith(LIBRARY):
                rows.append(("mpp " + r["name"].split("/" + config)[0], r["items_per_second"],
                             f"bubble {100 * r.get('bubble', 0):.1f}% (predicted {100 * r.get('bubble_pred_meas', 0):.1f}%)"))
        for what, value, ratio in rows:
            print(f"{config:<20} {what:<42} {value:>10.0f}  {ratio}")
        print()


if __name__ == "__main__":
    main()
