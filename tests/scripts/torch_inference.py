"""PyTorch inference with no optimizer: a model evaluated on random batches for a while."""

import sys
import time

import torch

model = torch.nn.Linear(64, 64)
start = time.time()
with torch.no_grad():
    while time.time() - start < (float(sys.argv[1]) if len(sys.argv) > 1 else 2.0):
        model(torch.randn(32, 64))
print("done")
