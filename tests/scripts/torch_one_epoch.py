"""One long DataLoader pass, as an LLM's training runs one epoch, whose loop keeps each step's
hidden activations (outputs appended to a list: 4 KiB a step); --no-leak keeps a float a step. The pass lasts --seconds; the last line printed says what was
kept, as JSON: {"bytes": ..., "seconds": ...} (the tensors' storage, the pass's time)."""

import argparse
import json
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, IterableDataset

parser = argparse.ArgumentParser()
parser.add_argument("--seconds", type=float, default=12.0)
parser.add_argument("--no-leak", action="store_true")
args = parser.parse_args()


class Batches(IterableDataset):
    """Random batches of 16 samples until --seconds have passed since the pass began."""

    def __iter__(self):
        end = time.perf_counter() + args.seconds
        while time.perf_counter() < end:
            x = torch.randn(16, 32)
            yield x, (x[:, 0] > 0).long()


torch.manual_seed(0)
hidden = nn.Linear(32, 64)
model = nn.Sequential(hidden, nn.ReLU(), nn.Linear(64, 2))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
kept, kept_bytes = [], 0
start = time.perf_counter()
for x, y in DataLoader(Batches(), batch_size=None):
    optimizer.zero_grad()
    loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    if args.no_leak:
        kept.append(loss.item())
    else:
        h = hidden(x).detach()   # 16 x 64 floats
        kept.append(h)
        kept_bytes += h.nelement() * h.element_size()
print(json.dumps({"bytes": kept_bytes, "seconds": time.perf_counter() - start}))
