"""A script that reports where it is and then moves into another directory (given) to work, as
scripts that write their outputs next to their data do."""

import os
import sys
import time

print(f"file {__file__}")
print(f"argv0 {sys.argv[0]}")
os.chdir(sys.argv[1])
start = time.time()
while time.time() - start < 0.5:
    sum(range(1000))
