"""A loop whose epoch function can stop the script in its first epoch: `fail` raises, `exit N`
calls sys.exit(N) (or sys.exit(MESSAGE)), `none` never calls it, `interrupt` is a Ctrl-C before the
first; otherwise it trains (5 calls of `step` an epoch) 3 epochs and prints how many full collections ran before each one."""

import gc
import sys


def step():
    return None


def train_epoch(epoch, how):
    for _ in range(5):
        step()
    garbage = []
    for _ in range(200):
        node = {}
        node["self"] = node   # cycles: only a collection frees them
        garbage.append(node)
    if how == "fail":
        raise KeyError("bad batch")
    if how == "exit":
        sys.exit(int(sys.argv[2]) if sys.argv[2].isdigit() else sys.argv[2])
    return gc.get_stats()[2]["collections"]


how = sys.argv[1] if len(sys.argv) > 1 else "train"
if how == "interrupt":
    raise KeyboardInterrupt
if how != "none":
    print([train_epoch(epoch, how) for epoch in range(3)])
