"""Data-parallel training for the engine over torch.distributed (gloo): every rank takes its shard of
each global batch, and the ranks average their gradients before each update.

The model keeps all gradients in one flat float32 buffer (Sequential.flat_grads), so a step is one
all-reduce of that buffer, in place (torch.from_numpy shares its memory). Each rank weights its
gradient by its share of the global batch before the sum, so the result is the gradient of the
global batch's mean loss even when the last batch does not divide evenly. Torch is imported here
only, when a process group is started.
"""

import datetime

import numpy as np

from ...errors import WorkloadError

TIMEOUT_S = 120   # a rank that never reaches a collective fails the others after this long


def start(timeout_s=TIMEOUT_S):
    """Join the job torchrun started (env:// rendezvous, gloo); returns the DataParallel helper."""
    import torch.distributed as dist
    if not dist.is_initialized():
        dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=timeout_s))
    return DataParallel(dist)


class DataParallel:
    def __init__(self, dist):
        self.dist = dist
        self.rank, self.world_size = dist.get_rank(), dist.get_world_size()
        self.weight = 1.0 / self.world_size   # this rank's share of the current global batch
        self.op = None                        # session.op, to time the all-reduce (the wait)

    def shard(self, data):
        return Shards(data, self)

    def optimizer(self, optimizer):
        return AveragingOptimizer(optimizer, self)

    def broadcast(self, flat):
        """Rank 0's values of a flat buffer on every rank (the initial weights)."""
        import torch
        self.dist.broadcast(torch.from_numpy(flat), src=0)

    def all_reduce(self, flat):
        """The weighted sum over ranks of a flat float32 buffer, in place."""
        import torch
        flat *= np.float32(self.weight)
        if self.op is None:
            self.dist.all_reduce(torch.from_numpy(flat))
        else:
            with self.op("allreduce", backend="gloo"):
                self.dist.all_reduce(torch.from_numpy(flat))

    def stop(self):
        if self.dist.is_initialized():
            self.dist.destroy_process_group()


class Shards:
    """A rank's contiguous shard of each global batch of `data` (a Batches). A last batch with fewer
    samples than ranks is dropped on every rank (the ranks must take the same steps)."""

    def __init__(self, data, parallel):
        if data.batch_size < parallel.world_size:
            raise WorkloadError(f"batch size {data.batch_size} is smaller than the world size "
                                f"{parallel.world_size}: every rank needs at least one sample per step")
        self.data, self.parallel = data, parallel
        self.batch_size = data.batch_size

    def __len__(self):
        return len(self.data)

    def epoch(self, epoch):
        rank, world = self.parallel.rank, self.parallel.world_size
        for x, y in self.data.epoch(epoch):
            n = len(x)
            if n < world:
                continue
            lo, hi = n * rank // world, n * (rank + 1) // world
            self.parallel.weight = (hi - lo) / n
            yield x[lo:hi], y[lo:hi]


class AveragingOptimizer:
    """An optimizer whose step first replaces each rank's gradients by the global batch's."""

    def __init__(self, optimizer, parallel):
        self.inner, self.parallel = optimizer, parallel

    def step(self, params, grads):
        for g in grads:
            self.parallel.all_reduce(g)
        self.inner.step(params, grads)
