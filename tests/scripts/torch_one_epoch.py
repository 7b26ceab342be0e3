"""One long DataLoader pass, as an LLM's training runs one epoch, whose loop keeps each step's
hidden activations (outputs appended to a list: 16 KiB a step); --no-leak keeps a float a step.
Each step also sleeps --step-ms (the compute of a larger model), so the pass lasts at least
--steps x --step-ms however fast the machine, and what it keeps does not depend on its speed.
The last line printed says what was kept, as JSON: {"bytes": ..., "seconds": ...} (the tensors'
storage, the pass's time)."""

import argparse
import json
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=3000)
parser.add_argument("--step-ms", type=float, default=4.0)
parser.add_argument("--no-leak", action="store_true")
args = parser.parse_args()

torch.manual_seed(0)
x = torch.randn(args.steps * 16, 32)
y = (x[:, 0] > 0).long()
hidden = nn.Linear(32, 256)
model = nn.Sequential(hidden, nn.ReLU(), nn.Linear(256, 2))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
kept, kept_bytes = [], 0
start = time.perf_counter()
for xb, yb in DataLoader(TensorDataset(x, y), batch_size=16):
    optimizer.zero_grad()
    loss = nn.functional.cross_entropy(model(xb), yb)
    loss.backward()
    optimizer.step()
    time.sleep(args.step_ms / 1e3)
    if args.no_leak:
        kept.append(loss.item())
    else:
        h = hidden(xb).detach()   # 16 x 256 floats
        kept.append(h)
        kept_bytes += h.nelement() * h.element_size()
print(json.dumps({"bytes": kept_bytes, "seconds": time.perf_counter() - start}))
