"""A training script with a docstring and postponed annotations, as modern code is written."""
from __future__ import annotations

import sys


def train_epoch(n: int) -> int:
    return sum(range(n))


for epoch in range(int(sys.argv[1]) if len(sys.argv) > 1 else 3):
    train_epoch(1000)
print(f"doc: {__doc__}")
