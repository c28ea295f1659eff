#!/usr/bin/env python3
"""Writes DualPipeV's compute-only table in torch.distributed.pipelining's action CSV format.

The order follows the rules of PyTorch's ScheduleDualPipeV (V placement: rank r holds stages r
and 2P - 1 - r; eight phases per rank; overlapped forward and backward written as
`(aFm;bBn)OVERLAP_F_B`). The file it writes is what `mpp-schedule --import-csv` reads in the
tests, independently of mpp's own DualPipeV generator.

    python3 dualpipev_torch.py RANKS MICRO_BATCHES > table.csv
"""
import sys


def rank_actions(rank, ranks, micro_batches):
    down, up = rank, 2 * ranks - 1 - rank  # the rank's two stages
    count = {}  # (stage, kind) -> next micro-batch; kind F, or "bwd" for B and I alike
    pending_w = []  # (stage, micro-batch) of each I whose W is still to come
    out = []

    def nxt(stage, kind):
        mb = count.get((stage, kind), 0)
        count[(stage, kind)] = mb + 1
        return mb

    def forward(stage):
        return f"{stage}F{nxt(stage, 'F')}"

    def backward(stage, split):
        mb = nxt(stage, "bwd")
        if split:
            pending_w.append((stage, mb))
            return f"{stage}I{mb}"
        return f"{stage}B{mb}"

    def weight():
        if pending_w:
            stage, mb = pending_w.pop(0)
            out.append(f"{stage}W{mb}")

    def pair(f_stage, b_stage):
        f = forward(f_stage)
        out.append(f"({f};{backward(b_stage, False)})OVERLAP_F_B")

    rest = ranks - rank - 1
    for _ in range(2 * rest):
        out.append(forward(down))
    for _ in range(rank + 1):
        out.append(forward(down))
        out.append(forward(up))
    for _ in range(rest):
        out.append(backward(up, True))
        weight()
        out.append(forward(up))
    for i in range(micro_batches - 2 * ranks + rank + 1):
        if i == 0 and rank == ranks - 1:  # its F(down) feeds its own F(up): not overlapped
            out.append(forward(down))
            out.append(backward(up, False))
        else:
            pair(down, up)
        pair(up, down)
    for _ in range(rest):
        out.append(backward(up, False))
        pair(up, down)
    split = False
    for i in range(rank + 1):
        if i == (rank + 1) // 2 and rank % 2 == 1:
            split = True
        out.append(backward(up, split))
        if i == (rank + 1) // 2 and rank % 2 == 0:
            split = True
        out.append(backward(down, split))
    for _ in range(rest):
        weight()
        out.append(backward(down, split))
    while pending_w:
        weight()
    return out


def main():
    ranks, micro_batches = int(sys.argv[1]), int(sys.argv[2])
    if micro_batches < 2 * ranks:
        sys.exit("DualPipeV needs at least as many micro-batches as stages (2 * ranks)")
    for rank in range(ranks):
        print(",".join(rank_actions(rank, ranks, micro_batches)))


if __name__ == "__main__":
    main()
