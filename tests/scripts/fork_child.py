"""A script that forks a helper process which exits with its own code, and waits for it."""

import os
import sys
import time

pid = os.fork()
if pid == 0:
    time.sleep(0.2)
    sys.exit(7)
_, status = os.waitpid(pid, 0)
start = time.time()
while time.time() - start < 0.5:
    sum(range(1000))
print(f"child exit {os.waitstatus_to_exitcode(status)}")
