#!/usr/bin/python3
"""PyTorch's own DistributedDataParallel on the configurations of benchmarks/data_parallel.

The reference peer for mpp's DDP: the same model (16 x Linear(hidden, hidden), ReLU between),
Adam, the same global batch split over the ranks, Gloo on loopback, one thread per rank.
Prints one line per run:  RESULT <name> <samples_per_second>

    /usr/bin/python3 ddp_reference.py --hidden 1024 --global-batch 128 --iterations 12 [--world 2]
    /usr/bin/python3 ddp_reference.py ... --world 1      # single process, no DDP: the baseline
"""
import argparse
import os
import socket
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel


def make_model(hidden, layers):
    mods = []
    for i in range(layers):
        mods.append(torch.nn.Linear(hidden, hidden))
        if i + 1 < layers:
            mods.append(torch.nn.ReLU())
    return torch.nn.Sequential(*mods)


def train(rank, world, args, port, results):
    torch.set_num_threads(1)
    torch.manual_seed(1)
    local_batch = args.global_batch // world
    model = make_model(args.hidden, args.layers)
    if world > 1:
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
        model = DistributedDataParallel(model, bucket_cap_mb=args.bucket_mb)
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    gen = torch.Generator().manual_seed(100 + rank)
    teacher = torch.randn(args.hidden, args.hidden, generator=gen) / args.hidden ** 0.5
    x = torch.randn(local_batch, args.hidden, generator=gen)
    y = torch.tanh(x @ teacher)

    def step():
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()

    for _ in range(3):
        step()
    if world > 1:
        dist.barrier()
    start = time.perf_counter()
    for _ in range(args.iterations):
        step()
    elapsed = time.perf_counter() - start
    if world > 1:
        dist.barrier()
        dist.destroy_process_group()
    if rank == 0:
        results.put(args.iterations * args.global_batch / elapsed)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--layers", type=int, default=16)
    p.add_argument("--global-batch", type=int, default=128)
    p.add_argument("--iterations", type=int, default=12)
    p.add_argument("--bucket-mb", type=float, default=25)
    p.add_argument("--world", type=int, default=2)
    p.add_argument("--name", default="")
    args = p.parse_args()
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = "1"
    ctx = mp.get_context("spawn")  # fresh processes, never fork() after torch started
    results = ctx.Queue()
    if args.world == 1:
        train(0, 1, args, 0, results)
    else:
        mp.start_processes(train, args=(args.world, args, free_port(), results), nprocs=args.world,
                           start_method="spawn", join=True)
    name = args.name or f"torch_ddp/h{args.hidden}_b{args.global_batch}/world{args.world}"
    print(f"RESULT {name} {results.get():.1f}")


if __name__ == "__main__":
    main()
