"""GPipe over two ranks with torch.distributed send/recv: the Python reference for
benchmarks/pipeline (same model, same batch, same M = 8, Adam, one thread per rank).

    mpprun --nproc-per-node 2 /usr/bin/python3 benchmarks/reference/pipeline_reference.py [--config course|compute|large|both|all]

Rank 0 prints one JSON line per configuration: {"config": ..., "samples_per_second": ...}.
Run with Debian's python3-torch (/usr/bin/python3).
"""
import argparse
import json
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

CONFIGS = {
    "course": dict(name="course_h128_b32", hidden=128, batch=32, iterations=100),
    "compute": dict(name="compute_h1024_b128", hidden=1024, batch=128, iterations=10),
    "large": dict(name="compute_h1024_b512", hidden=1024, batch=512, iterations=4),
}
LAYERS = 16
M = 8
WARMUP = 3


def make_stage(hidden, begin, end):
    layers = []
    for i in range(begin, end):
        layers.append(nn.Linear(hidden, hidden))
        if i + 1 < LAYERS:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


def run(config):
    rank = dist.get_rank()
    hidden, batch = config["hidden"], config["batch"]
    torch.manual_seed(1 + rank)
    stage = make_stage(hidden, rank * LAYERS // 2, (rank + 1) * LAYERS // 2)
    adam = torch.optim.Adam(stage.parameters(), lr=1e-4)
    x = torch.randn(batch, hidden)
    y = torch.tanh(torch.randn(batch, hidden))
    xs, ys = x.chunk(M), y.chunk(M)
    mb = batch // M

    def step():
        adam.zero_grad()
        sends = []
        loss_sum = torch.zeros(1, dtype=torch.float64)
        if rank == 0:
            outs = []
            for i in range(M):
                out = stage(xs[i])
                outs.append(out)
                sends.append(dist.isend(out.detach(), 1, tag=i))
            grads = [torch.empty(mb, hidden) for _ in range(M)]
            recvs = [dist.irecv(grads[i], 1, tag=M + i) for i in range(M)]
            for i in range(M):
                recvs[i].wait()
                outs[i].backward(grads[i])
        else:
            bufs = [torch.empty(mb, hidden) for _ in range(M)]
            recvs = [dist.irecv(bufs[i], 0, tag=i) for i in range(M)]
            losses = []
            for i in range(M):
                recvs[i].wait()
                inp = bufs[i].requires_grad_(True)
                loss = F.mse_loss(stage(inp), ys[i]) / M
                loss_sum += loss.item()
                losses.append((inp, loss))
            for i, (inp, loss) in enumerate(losses):
                loss.backward()
                sends.append(dist.isend(inp.grad, 0, tag=M + i))
        for s in sends:
            s.wait()
        dist.broadcast(loss_sum, src=1)
        adam.step()

    for _ in range(WARMUP):
        step()
    dist.barrier()
    start = time.perf_counter()
    for _ in range(config["iterations"]):
        step()
    elapsed = time.perf_counter() - start
    if rank == 0:
        print(json.dumps({"config": config["name"],
                          "samples_per_second": config["iterations"] * batch / elapsed,
                          "ms_per_step": 1e3 * elapsed / config["iterations"]}), flush=True)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", choices=["course", "compute", "large", "both", "all"], default="both",
                        help="both: course and compute; all: also large (h1024, batch 512)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    if dist.get_world_size() != 2:
        raise SystemExit("pipeline_reference.py runs on 2 ranks (mpprun --nproc-per-node 2 ...)")
    keys = {"both": ["course", "compute"], "all": ["course", "compute", "large"]}.get(args.config, [args.config])
    for key in keys:
        run(CONFIGS[key])
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
