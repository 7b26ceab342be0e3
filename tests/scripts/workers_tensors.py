"""A PyTorch script with a clean dataset (a TensorDataset over numpy arrays) and 2 DataLoader
workers: nothing in the dataset is copied as the workers read it, but each worker's own full
collection walks every object the parent made (torch's modules and functions), writing to each,
so it copies their pages. Each worker runs one as it starts (gc.collect() in worker_init_fn),
standing in for the one a longer pass runs on its own (every worker of a pass over 60,000 samples
in batches of 1024 ran one here). `--freeze` calls gc.freeze() once before the workers start
(persistent workers), which keeps those pages shared. `--spawn` starts the workers by
multiprocessing's spawn: new interpreters that share no page with the parent."""

import gc
import sys

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def collect(worker):
    gc.collect()


if __name__ == "__main__":
    epochs = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    freeze = "--freeze" in sys.argv
    rng = np.random.default_rng(0)
    x, y = rng.random((30_000, 784), dtype=np.float32), rng.integers(0, 10, 30_000)
    loader = DataLoader(TensorDataset(torch.from_numpy(x), torch.from_numpy(y)), batch_size=1024, shuffle=True,
                        num_workers=2, persistent_workers=freeze, worker_init_fn=collect,
                        multiprocessing_context="spawn" if "--spawn" in sys.argv else None)
    model = nn.Linear(784, 10)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    if freeze:
        gc.freeze()
    for epoch in range(epochs):
        for xb, yb in loader:
            optimizer.zero_grad()
            nn.functional.cross_entropy(model(xb), yb).backward()
            optimizer.step()
        print(f"epoch {epoch} done")
