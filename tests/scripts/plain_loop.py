"""A plain Python training loop with no framework, as people write it: train_epoch does the work,
and a per-sample log kept "for later" grows every epoch (pass --no-leak to keep only the last)."""

import random
import sys


def train_epoch(weights, samples, log):
    loss = 0.0
    for i, (x, y) in enumerate(samples):
        error = sum(w * v for w, v in zip(weights, x)) - y
        for j, v in enumerate(x):
            weights[j] -= 0.001 * error * v
        loss += error * error
        log.append({"sample": i, "error": error, "x": list(x)})
    return loss / len(samples)


if __name__ == "__main__":
    epochs = int(sys.argv[1]) if len(sys.argv) > 1 else 10
    random.seed(0)
    samples = [([random.random() for _ in range(8)], random.random()) for _ in range(5_000)]
    weights = [0.0] * 8
    log = []
    for epoch in range(epochs):
        if "--no-leak" in sys.argv:
            log = []
        print(f"epoch {epoch}: loss {train_epoch(weights, samples, log):.4f}")
