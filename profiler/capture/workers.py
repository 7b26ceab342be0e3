"""Child processes (DataLoader workers): how many, and their private memory, per epoch.

Workers of a forked DataLoader share the parent's pages until they write to them; reading a
Python object writes its reference count, so a worker that reads a list of dicts copies those
pages one by one (pytorch issue 13246). RSS counts shared pages in every process and hides this;
USS (pages only this process maps) and PSS (shared pages split between the sharers) show it.

Workers of a non-persistent DataLoader exit when their pass is exhausted, before the epoch ends,
so a background thread samples the live children every `interval` seconds (and the PyTorch hooks
sample when a DataLoader has just started its workers and just before it shuts them down), and an
epoch keeps the sample with the most private memory. Children are listed from /proc/PID/task/TID/children where
Linux offers it (psutil's listing reads every process on the machine), and one child's memory is
one read of /proc/PID/smaps_rollup, for which the kernel walks every page the child maps: a forked
worker maps its parent's whole heap, 5-16 ms per GiB on the project's VM. The thread's samples and
the epoch end's are therefore kept to BUDGET of the time (budget.py); the two a DataLoader pass
asks for (its workers started, its workers about to stop) are always taken, the first by the
thread, so the pass that started them goes on meanwhile. An epoch in which no
sample was taken (persistent workers, short epochs, a big parent) records None.

A child's own full collections copy pages too: CPython's collector writes to the header of every
object it walks, so a forked worker's first full collection copies every page that holds an
object its parent made, whether or not the worker reads them (36-70 MiB a worker under torch
scripts here). gc.freeze() in the parent before the fork moves those objects where the collector
does not walk. So each child forked while a probe runs counts its full collections, and measures
what the first one copied (its private memory before and after), in its own slot of a table
shared with the parent (ForkTable). A child that does not map the table exec'd a program
(spawned DataLoader workers import torch anew: 143-146 MiB of their own each here, nothing
copied), or was forked before this module was imported, and is counted apart.
"""

import ctypes
import mmap
import os
import struct
import sys
import threading

import psutil

from .budget import Budget
from .gc_timer import CALLBACKS

BUDGET = 0.01
SLOT = struct.Struct("qqqq")   # a child's pid, its pick's number, its full collections, the bytes its first one copied
SLOTS = 4096
RESERVED = -1                  # a slot's pid from the parent's pick until the child writes its own


def _private_bytes():
    """This process's private memory (USS), from /proc/self/smaps_rollup."""
    total = 0
    with open("/proc/self/smaps_rollup", "rb") as f:
        for line in f:
            if line.startswith((b"Private_Clean:", b"Private_Dirty:")):
                total += int(line.split()[1]) << 10
    return total


class _ChildCollections:
    """The gc callback of a forked child: its full collections, and what the first one copied, in
    its slot. Never raises into the collector (a child at the recursion limit, /proc unreadable)."""

    def __init__(self, memory, slot, number):
        self.memory, self.offset, self.pid, self.number = memory, slot * SLOT.size, os.getpid(), number
        self.count = self.copied = 0
        self.before = None
        self._write()

    def _write(self):
        SLOT.pack_into(self.memory, self.offset, self.pid, self.number, self.count, self.copied)

    def __call__(self, phase, info):
        if info["generation"] != 2:
            return
        try:
            if phase == "start":
                if self.count == 0:
                    self.before = _private_bytes()
                return
            self.count += 1
            before, self.before = self.before, None
            if before is not None:
                self.copied = max(_private_bytes() - before, 0)
        except Exception:
            pass
        self._write()


class ForkTable:
    """Memory shared with the children forked after the capture was imported (Linux): a slot each,
    which the parent picks just before a fork while a probe runs (the next whose child has exited,
    so a live child keeps its own) and the child fills. A child that maps the table was forked and
    has not exec'd a program since: its pages are its parent's until written. Spawned workers,
    multiprocessing's resource tracker, a subprocess (even one forked by Python first, as with
    preexec_fn) do not, nor does a child forked before the import (under the pytest plugin: by a
    fixture before the first marked test)."""

    def __init__(self):
        self.memory = mmap.mmap(-1, SLOTS * SLOT.size)   # anonymous and shared: children write, we read
        start = ctypes.addressof(ctypes.c_char.from_buffer(self.memory))
        end = start + -(-len(self.memory) // mmap.PAGESIZE) * mmap.PAGESIZE
        self._mapping = f"{start:x}-{end:x}"   # its name in /proc/PID/map_files
        try:   # a kernel without map_files (no CONFIG_CHECKPOINT_RESTORE), or one closed to us
            os.lstat(f"/proc/self/map_files/{self._mapping}")
            self._lookup = True
        except OSError:
            self._lookup = False
        self.giving = False                  # whether forks take slots (a probe runs)
        self._picks = 0
        self._lock = threading.Lock()
        self._pending = threading.local()   # the slot and number picked for the fork this thread makes

    def before_fork(self):
        if not self.giving:
            return
        with self._lock:
            for _ in range(SLOTS):   # all live or reserved (4,096 children alive): the last is taken
                slot, self._picks = self._picks % SLOTS, self._picks + 1
                owner = SLOT.unpack_from(self.memory, slot * SLOT.size)[0]
                if owner == 0 or (owner != RESERVED and not os.path.exists(f"/proc/{owner}")):
                    break
            SLOT.pack_into(self.memory, slot * SLOT.size, RESERVED, self._picks, 0, 0)
            self._pending.slot = slot, self._picks

    def after_fork_in_parent(self):
        self._pending.__dict__.pop("slot", None)

    def in_child(self):
        """The callback that fills this child's slot (None for a fork the parent picked none for),
        and the table stops giving slots: they are the parent's to give, so a child of this child
        (which maps the table too) takes none and no two processes pick the same one."""
        picked = self._pending.__dict__.pop("slot", None)
        self.giving = False
        return None if picked is None else _ChildCollections(self.memory, *picked)

    def recorded(self):
        """{pid: (full collections, bytes the first one copied)}: the newest pick's for a pid reused."""
        newest = {}
        for pid, number, count, copied in SLOT.iter_unpack(self.memory[:min(self._picks, SLOTS) * SLOT.size]):
            if pid > 0 and number > newest.get(pid, (0,))[0]:
                newest[pid] = number, count, copied
        return {pid: (count, copied) for pid, (_, count, copied) in newest.items()}

    def maps(self, pid, recorded):
        """Whether child `pid` maps the table (a lookup in /proc/PID/map_files, ~4 us); where that
        directory is closed to us, whether it holds a slot. None when the child has exited."""
        if not self._lookup:
            return pid in recorded
        try:
            os.lstat(f"/proc/{pid}/map_files/{self._mapping}")
            return True
        except FileNotFoundError:
            return False if os.path.exists(f"/proc/{pid}") else None
        except OSError:
            return pid in recorded


TABLE = ForkTable() if sys.platform.startswith("linux") else None   # from import, so every later fork maps it


def _before_fork():
    if TABLE is not None:
        TABLE.before_fork()


def _after_fork_in_parent():
    if TABLE is not None:
        TABLE.after_fork_in_parent()


def _in_child():
    # a child of a child drops the callback its parent inherited
    CALLBACKS[:] = [cb for cb in CALLBACKS if not isinstance(cb, _ChildCollections)]
    callback = TABLE.in_child() if TABLE is not None else None
    if callback is not None:
        CALLBACKS.append(callback)


if TABLE is not None:
    os.register_at_fork(before=_before_fork, after_in_parent=_after_fork_in_parent, after_in_child=_in_child)


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


def read(process):
    """{pid: (uss, pss, started, collections)} of the live children of `process`; `started` (the
    child's start time) tells a child from an earlier one that had the same pid. `collections`:
    (full collections, bytes the first one copied) of a child that maps TABLE (forked), or (0, 0)
    for every child where there is no table (not Linux: they count as forked); None for a child
    that does not map it (exec'd a program: its pages are its own)."""
    try:
        children = _children(process)
    except psutil.Error:
        return {}
    recorded = TABLE.recorded() if TABLE is not None else {}
    found = {}
    for child in children:
        try:
            if child.status() == psutil.STATUS_ZOMBIE:   # exited, not yet reaped: no memory left
                continue
            info, started = child.memory_full_info(), child.create_time()
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
        forked = True if TABLE is None else TABLE.maps(child.pid, recorded)
        if forked is not None:   # else it exited since
            found[child.pid] = (info.uss, getattr(info, "pss", 0), started,
                                recorded.get(child.pid, (0, 0)) if forked else None)
    return found


def _size(reading):
    """What picks an epoch's sample: the forked children's private memory and number, then the others'."""
    return reading["uss_bytes"], reading["count"], reading["spawned_uss_bytes"], reading["spawned"]


class WorkerProbe:
    """Samples the children in a thread; take() gives the epoch's record, from its sample with the
    most private memory. Its fields are of the children forked from this process, which share its
    pages (DataLoader workers by default), but for "spawned" and "spawned_uss_bytes": how many
    children exec'd a program (spawned workers, multiprocessing's resource tracker, a subprocess),
    and their USS, all their own. Of the forked ones: {"count", "uss_bytes", "pss_bytes"} summed;
    "uss_growth_bytes": how much their private memory grew since each was first seen (a forked
    worker starts small; one that copies what it reads grows), "uss_growth_max_bytes": the most
    one of them grew; "new": how many were first seen in this epoch, and "carried_uss_bytes":
    the USS of the others (a non-persistent DataLoader's workers are new every epoch, so their
    USS from epoch to epoch is no one process's growth; persistent ones carry over);
    "full_collections" the children ran, "gc_copied_bytes" their first ones copied, summed, and
    "gc_copied_max_bytes" the most one copied (Linux; 0 elsewhere); and once a
    DataLoader reported one (note_batch), "batch_bytes" and "prefetch_factor" of the epoch's largest
    batch."""

    def __init__(self, interval=0.2, budget=BUDGET):
        self.interval = interval
        self._budget = Budget(budget)
        self._process = psutil.Process()
        self._first = {}             # (pid, started) -> USS when first seen; only children of the
                                     # newest sample are kept past an epoch's end
        self._latest = set()         # (pid, started) of the children the newest sample saw
        self._carried = set()        # (pid, started) seen before this epoch (and not seen to exit)
        self._peak = None
        self._epoch = 0              # discard() calls: a read begun before the last one is dropped
        self._batch = None           # (bytes, prefetch factor): the epoch's largest batch from workers
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = None
        self._wake = threading.Event()   # a sample asked for (sample_soon), or the probe stopping

    def start(self):
        if TABLE is not None:
            TABLE.giving = True
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="profiler-workers", daemon=True)
        self._thread.start()

    def stop(self):
        """Stop sampling in the thread, and giving slots to forks; take() still reads the table."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if TABLE is not None:
            TABLE.giving = False

    def _run(self):
        while True:
            asked = self._wake.wait(self.interval)
            self._wake.clear()
            if self._stop.is_set():
                return
            if asked:
                self.sample_now()
            else:
                self.sample()

    def sample(self):
        """Read the children now if the budget allows (the thread, each epoch's end);
        read()'s, or None when it does not."""
        epoch = self._epoch
        children = self._budget.call(lambda: read(self._process))
        return None if children is None else self._record(children, epoch)

    def sample_now(self):
        """Read the children now, whatever the budget: just before a DataLoader shuts its workers
        down (a non-persistent worker's peak)."""
        epoch = self._epoch
        return self._record(read(self._process), epoch)

    def sample_soon(self):
        """Have the thread read the children as soon as it can, whatever the budget: when a
        DataLoader has just started its workers (a worker's start, from which its growth counts),
        without holding up the pass that started them."""
        self._wake.set()

    def _record(self, children, epoch):
        """Keep a reading of `children`, read since discard() was called `epoch` times."""
        forked = {pid: c for pid, c in children.items() if c[3] is not None}
        spawned = [c[0] for c in children.values() if c[3] is None]
        uss = {(pid, started): u for pid, (u, _, started, _) in forked.items()}
        copied = [c[3][1] for c in forked.values()]
        with self._lock:
            if epoch != self._epoch:   # begun before an epoch began: the time before it is no epoch's
                return children
            self._latest = set(uss)
            for child, u in uss.items():
                self._first.setdefault(child, u)
            growth = [max(u - self._first[child], 0) for child, u in uss.items()]
            reading = {"count": len(forked), "uss_bytes": sum(uss.values()),
                       "pss_bytes": sum(c[1] for c in forked.values()),
                       "uss_growth_bytes": sum(growth), "uss_growth_max_bytes": max(growth, default=0),
                       "new": sum(child not in self._carried for child in uss),
                       "carried_uss_bytes": sum(u for child, u in uss.items() if child in self._carried),
                       "full_collections": sum(c[3][0] for c in forked.values()),
                       "gc_copied_bytes": sum(copied), "gc_copied_max_bytes": max(copied, default=0),
                       "spawned": len(spawned), "spawned_uss_bytes": sum(spawned)}
            if self._peak is None or _size(reading) > _size(self._peak):
                self._peak = reading
            return children

    def discard(self):
        """Drop the samples since the last take(): they fell between two epochs (a validation pass's
        workers are no epoch's), and the epoch beginning now samples its own."""
        with self._lock:
            self._peak = self._batch = None
            self._epoch += 1

    def note_batch(self, nbytes, prefetch_factor):
        """A batch of a DataLoader with workers weighed `nbytes`; each worker holds up to
        `prefetch_factor` of them for the parent (None: DataLoader's default). The epoch's largest
        is recorded with its reading (each pass weighs its first batch, persistent workers too)."""
        with self._lock:
            if self._batch is None or nbytes > self._batch[0]:
                self._batch = (int(nbytes), prefetch_factor)

    def take(self):
        """The epoch's reading (its sample with the most private memory, the children alive now
        included when the budget allows a sample now; None when the epoch had no sample), and a
        fresh start for the next epoch: the children the newest sample saw (this one, or an
        earlier one when the budget skips it) are carried into it, and no others, so what is kept
        stays the size of one sample however many workers come and go."""
        self.sample()
        with self._lock:
            reading, self._peak = self._peak, None
            self._first = {child: uss for child, uss in self._first.items() if child in self._latest}
            self._carried = set(self._first)
            if reading is not None and self._batch is not None:
                reading = {**reading, "batch_bytes": self._batch[0], "prefetch_factor": self._batch[1]}
        return reading
