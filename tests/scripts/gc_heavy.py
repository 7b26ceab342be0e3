"""A plain Python training loop with much state built at set-up (a vocabulary of dicts) and many
records that live for one epoch: its garbage collections keep walking the set-up state."""

import sys


def build_vocabulary(n):
    return [{"id": i, "tokens": [i, i + 1]} for i in range(n)]


def train_epoch(vocabulary, epoch):
    records = [[epoch, i, [i % 7]] for i in range(60_000)]
    return sum(r[1] + r[2][0] for r in records) + len(vocabulary)


if __name__ == "__main__":
    epochs = int(sys.argv[1]) if len(sys.argv) > 1 else 12
    vocabulary = build_vocabulary(300_000)
    for epoch in range(epochs):
        train_epoch(vocabulary, epoch)
