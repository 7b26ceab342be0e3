"""A PyTorch training script whose data loader keeps a cache of small Python objects (decoded
samples kept "for reuse"), as in karpathy/nanochat pull request 477. Nothing in it mentions the
profiler; run it with `profiler run docs/examples/loader_cache.py`.

The model is small and every step does the same work, yet now and then one step takes several
times the others: an automatic generation-2 collection walks the whole cache inside that step.
"""

import argparse

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=30)
parser.add_argument("--steps", type=int, default=20, help="steps per epoch")
args = parser.parse_args()


class CachedTokens(Dataset):
    """Each sample is 'decoded' into small Python lists that the cache keeps."""

    def __init__(self, size):
        self.size, self.cache = size, []

    def __len__(self):
        return self.size

    def __getitem__(self, i):
        decoded = [[i, j, j * 2] for j in range(40)]
        self.cache.append(decoded)      # never evicted
        return torch.tensor([row[1] for row in decoded], dtype=torch.float32), i % 2


torch.manual_seed(0)
loader = DataLoader(CachedTokens(args.steps * 32), batch_size=32, shuffle=True)
model = nn.Sequential(nn.Linear(40, 64), nn.ReLU(), nn.Linear(64, 2))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
loss_fn = nn.CrossEntropyLoss()

for epoch in range(args.epochs):
    for x, y in loader:
        optimizer.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
    print(f"epoch {epoch}: loss {loss.item():.4f}, cached samples {len(loader.dataset.cache)}")
