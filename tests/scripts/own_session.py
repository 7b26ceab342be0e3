"""A loop instrumented with the profiler's own Session API, writing the run directory given."""

import sys

from profiler import Session

with Session(sys.argv[1]) as session:
    for epoch in range(3):
        with session.epoch():
            sum(range(10_000))
print("done")
