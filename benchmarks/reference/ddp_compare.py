#!/usr/bin/python3
"""mpp's data parallelism next to PyTorch's DistributedDataParallel, side by side.

Runs benchmarks/data_parallel's dp_bench on 2 ranks through mpprun, then ddp_reference.py (PyTorch
DDP, and one process without DDP) on the same two configurations, and prints samples/s and the
ratios: mpp DDP / PyTorch DDP (target >= 1) and mpp DDP / (2 x single process) (target >= 0.8 on
the compute-bound configuration), for mpp's DDP over Gloo (as PyTorch's) and over shared memory.

    /usr/bin/python3 benchmarks/reference/ddp_compare.py [--build build] [--bucket-mb 25]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
CONFIGS = [  # name in dp_bench, hidden, global batch, iterations (as in dp_bench.cpp)
    ("course_h128_b32", 128, 32, 300),
    ("compute_h1024_b128", 1024, 128, 12),
]


def run(cmd, env=None):
    print("$ " + " ".join(cmd), flush=True)
    out = subprocess.run(cmd, env=env, check=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return out.stdout


def python_reference(hidden, batch, iters, world, bucket_mb, env):
    out = run([sys.executable, os.path.join(HERE, "ddp_reference.py"), "--hidden", str(hidden), "--global-batch",
               str(batch), "--iterations", str(iters), "--world", str(world), "--bucket-mb", str(bucket_mb)],
              env=env)
    for line in out.splitlines():
        if line.startswith("RESULT "):
            return float(line.split()[2])
    raise RuntimeError("ddp_reference.py printed no RESULT line:\n" + out)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", default="build")
    p.add_argument("--bucket-mb", type=int, default=25, choices=[1, 5, 25, 100])
    args = p.parse_args()
    bench = os.path.join(args.build, "benchmarks", "data_parallel", "dp_bench")
    mpprun = os.path.join(args.build, "tools", "mpprun", "mpprun")
    # Both sides run with one thread per process and, unless the caller set it otherwise, glibc
    # keeping freed memory as mpprun's ranks do by default.
    env = dict(MALLOC_TRIM_THRESHOLD_="68719476736", MALLOC_MMAP_THRESHOLD_="33554432")
    env.update(os.environ)
    env.update(OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")

    with tempfile.TemporaryDirectory() as tmp:
        out_json = os.path.join(tmp, "dp.json")
        text = run([mpprun, "--nproc-per-node", "2", "--log-dir", os.path.join(tmp, "logs"), bench,
                    f"--benchmark_filter=Single|DDP<Async<(Gloo|Shm)>>/.*bucket_mb:{args.bucket_mb}/",
                    "--benchmark_out=" + out_json, "--benchmark_out_format=json"], env=env)
        blas = [l for l in text.splitlines() if "BLAS" in l]
        with open(out_json) as f:
            runs = json.load(f)["benchmarks"]

    def mpp_rate(prefix, config):
        for r in runs:
            if r["name"].startswith(prefix) and f"/{config}" in r["name"]:
                return r["items_per_second"]
        raise RuntimeError(f"no dp_bench result for {prefix} / {config}")

    rows = []
    for name, hidden, batch, iters in CONFIGS:
        single = mpp_rate("Single", name)
        ours = mpp_rate("DDP<Async<Gloo>>", name)
        ours_shm = mpp_rate("DDP<Async<Shm>>", name)
        torch_ddp = python_reference(hidden, batch, iters, 2, args.bucket_mb, env)
        torch_single = python_reference(hidden, batch, iters, 1, args.bucket_mb, env)
        rows.append((name, single, ours, ours_shm, torch_single, torch_ddp))

    print()
    for line in blas:
        print(line)
    print(f"2 ranks, one thread each, bucket cap {args.bucket_mb} MiB, samples/s (global)")
    print(f"{'configuration':<20}{'mpp single':>11}{'torch single':>13}{'torch DDP':>10}{'mpp DDP':>14}"
          f"{'/torch DDP':>11}{'/(2x single)':>13}")
    for name, single, ours, ours_shm, torch_single, torch_ddp in rows:
        for backend, rate in (("Gloo", ours), ("Shm", ours_shm)):
            print(f"{name:<20}{single:>11.0f}{torch_single:>13.0f}{torch_ddp:>10.0f}{rate:>9.0f} {backend:<4}"
                  f"{rate / torch_ddp:>11.2f}{rate / (2 * single):>13.2f}")


if __name__ == "__main__":
    main()
