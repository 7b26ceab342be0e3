"""A plain Python loop with no framework: train_epoch calls train_step for each batch."""

import sys


def train_step(batch):
    rows = [[batch, i] for i in range(2_000)]
    return sum(r[1] for r in rows)


def train_epoch(batches):
    return sum(train_step(b) for b in range(batches))


if __name__ == "__main__":
    epochs, batches = int(sys.argv[1]), int(sys.argv[2])
    for epoch in range(epochs):
        train_epoch(batches)
