"""Child processes (DataLoader workers): how many, and their private memory, per epoch.

Workers of a forked DataLoader share the parent's pages until they write to them; reading a
Python object writes its reference count, so a worker that reads a list of dicts copies those
pages one by one (pytorch issue 13246). RSS counts shared pages in every process and hides this;
USS (pages only this process maps) and PSS (shared pages split between the sharers) show it.

Workers of a non-persistent DataLoader exit when their pass is exhausted, before the epoch ends,
so a background thread samples the live children every `interval` seconds and an epoch keeps the
sample with the most private memory. Children are listed from /proc/PID/task/TID/children where
Linux offers it (psutil's listing reads every process on the machine), and one child's memory is
one read of /proc/PID/smaps_rollup.
"""

import os
import sys
import threading

import psutil


def _children_linux(pid):
    """Child pids of `pid` and theirs, from /proc/PID/task/TID/children (no scan of all processes);
    None where the kernel does not offer that file."""
    found, todo = [], [pid]
    while todo:
        parent = todo.pop()
        try:
            tasks = os.listdir(f"/proc/{parent}/task")
        except OSError:
            if parent == pid:
                return None
            continue
        for tid in tasks:
            try:
                with open(f"/proc/{parent}/task/{tid}/children") as f:
                    kids = [int(k) for k in f.read().split()]
            except FileNotFoundError:
                if parent == pid:
                    return None
                continue
            except OSError:
                continue
            found += kids
            todo += kids
    return found


def _children(process):
    pids = _children_linux(process.pid) if sys.platform.startswith("linux") else None
    if pids is None:
        return process.children(recursive=True)
    return [psutil.Process(pid) for pid in pids if psutil.pid_exists(pid)]


def sample(process):
    """{"count", "uss_bytes", "pss_bytes"} summed over the live children of `process`."""
    count = uss = pss = 0
    try:
        children = _children(process)
    except psutil.Error:
        children = []
    for child in children:
        try:
            if child.status() == psutil.STATUS_ZOMBIE:   # exited, not yet reaped: no memory left
                continue
            info = child.memory_full_info()
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
        count += 1
        uss += info.uss
        pss += getattr(info, "pss", 0)
    return {"count": count, "uss_bytes": uss, "pss_bytes": pss}


class WorkerProbe:
    def __init__(self, interval=0.5):
        self.interval = interval
        self._process = psutil.Process()
        self._peak = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = None

    def start(self):
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="profiler-workers", daemon=True)
        self._thread.start()

    def stop(self):
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def _run(self):
        while not self._stop.wait(self.interval):
            self._keep(sample(self._process))

    def _keep(self, reading):
        with self._lock:
            key = (reading["uss_bytes"], reading["count"])
            if self._peak is None or key > (self._peak["uss_bytes"], self._peak["count"]):
                self._peak = reading

    def take(self):
        """The epoch's reading (its sample with the most private memory, the children alive now
        included), and a fresh start for the next epoch."""
        self._keep(sample(self._process))
        with self._lock:
            reading, self._peak = self._peak, None
        return reading
