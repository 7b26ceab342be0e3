"""A data-parallel PyTorch script as its users write it: torchrun starts it, DDP over gloo, a
DistributedSampler, no profiler code. On rank STRAGGLER_RANK (none by default) the script keeps a
per-step log sized up front and a record of every sample it has seen, the way a metrics history or
a "seen samples" cache grows in real jobs: its automatic full collections stall the other ranks.
On rank SLOW_LOAD_RANK (none by default) each sample takes 0.3 ms to load, as from slow storage:
the other ranks wait for its gradients at every step, with no stall of its own to show. On rank
SLOW_COMPUTE_RANK (none by default) each step's forward takes 2 ms more, as a larger shard or
longer sequences make it: the others wait for its gradients inside their backward.

    torchrun --nproc-per-node 2 -m profiler run --out runs/ddp tests/scripts/ddp_train.py --epochs 4
"""

import argparse
import os
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


class SlowStorage(TensorDataset):
    def __getitem__(self, index):
        end = time.perf_counter() + 0.0003
        while time.perf_counter() < end:
            pass
        return super().__getitem__(index)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--samples", type=int, default=4096)
    args = parser.parse_args()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    x = torch.randn(args.samples, 32)
    y = (x.sum(dim=1) > 0).long()
    slow = rank == int(os.environ.get("SLOW_LOAD_RANK", "-1"))
    data = (SlowStorage if slow else TensorDataset)(x, y)
    sampler = DistributedSampler(data, shuffle=True, seed=0)
    loader = DataLoader(data, batch_size=32, sampler=sampler)
    model = DistributedDataParallel(torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(),
                                                        torch.nn.Linear(64, 2)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    straggler = rank == int(os.environ.get("STRAGGLER_RANK", "-1"))
    heavier = rank == int(os.environ.get("SLOW_COMPUTE_RANK", "-1"))
    history = [{"step": i, "loss": [0.0]} for i in range(50_000)] if straggler else []
    seen = []
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        for xb, yb in loader:
            if straggler:
                seen.append([[epoch, i, int(label)] for i, label in enumerate(yb.tolist()) for _ in range(30)])
            optimizer.zero_grad()
            if heavier:
                end = time.perf_counter() + 0.002
                while time.perf_counter() < end:
                    pass
            loss = torch.nn.functional.cross_entropy(model(xb), yb)
            loss.backward()
            optimizer.step()
        if rank == 0:
            print(f"epoch {epoch}: loss {loss.item():.4f}", flush=True)
    print(f"rank {rank}: kept {len(history)} history entries and {len(seen)} batches of records")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
