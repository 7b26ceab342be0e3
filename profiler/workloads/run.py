"""Run a built-in scenario on the engine under a profiling Session (what `profiler run` does).

Under torchrun (WORLD_SIZE > 1) the scenario trains data-parallel (engine/distributed.py): each
rank takes its shard of every global batch and the ranks average their gradients over gloo.
"""

import kernels
from tqdm import tqdm

from ..capture import Session
from ..errors import UsageError
from ..integrations.gc_policy import GcPolicy
from ..integrations.launch import rank_env
from . import scenarios
from .history import check_history_fits
from .engine import Events, Loop
from .straggler import GcStraggler
from .terminal import stderr_is_a_terminal


class _LoopMarks:
    """The listener lists GcPolicy.attach() takes, called at the engine Loop's events: training
    starts at STARTED (after set-up and the history), a step ends at ITERATION_COMPLETED, an epoch
    is written at EPOCH_COMPLETED; `steps` counts the steps so far."""

    def __init__(self, loop):
        self.on_training_start, self.on_step_end, self.on_epoch_written = [], [], []
        self.steps = 0
        loop.on(Events.STARTED, self._started)
        loop.on(Events.ITERATION_COMPLETED, self._step_ended)
        loop.on(Events.EPOCH_COMPLETED, self._epoch_written)

    def _started(self, state):
        for listener in self.on_training_start:
            listener()

    def _step_ended(self, state):
        self.steps = state.iteration
        for listener in self.on_step_end:
            listener(state.iteration)

    def _epoch_written(self, state):
        for listener in self.on_epoch_written:
            listener()


def run_scenario(name, out, *, layout="NHWC", epochs=10, halt_after=None, history="append",
                 gc_collect="never", tracemalloc=False, samples=None, seed=0, progress=True, labels=None,
                 gc_policy="default", straggler_rank=None):
    """Train scenario `name` for `epochs` (max_epochs), halting after `halt_after` epochs if given.
    Writes the run directory `out` and returns the loop's final State. gc_policy: as --gc-policy;
    straggler_rank: under torchrun, the rank that plants GC stalls (workloads/straggler.py)."""
    check_history_fits(history, epochs)
    policy = GcPolicy.parse(gc_policy)
    ranks = rank_env()
    world = ranks["world_size"] if ranks else 1
    if straggler_rank is not None and not (world > 1 and straggler_rank < world):
        raise UsageError(f"--straggler-rank {straggler_rank} needs a data-parallel job with rank {straggler_rank} "
                         f"(world size here: {world}); add --nproc-per-node N, or run under torchrun")
    options = {"layout": layout, "seed": seed}
    if samples is not None:
        options["samples"] = samples
    if labels is not None:
        options["labels"] = labels
    scenario = scenarios.build(name, **options)
    meta = {"scenario": name, "layout": layout, "max_epochs": epochs, "halt_after": halt_after,
            "history": history, "gc_collect": gc_collect, "samples": len(scenario.x),
            "batch_size": scenario.data.batch_size, "label": f"{name} {layout}",
            "straggler_rank": straggler_rank, "kernels": kernels.isa_info()}
    data, optimizer, parallel = scenario.data, scenario.optimizer, None
    if world > 1:
        from .engine import distributed
        parallel = distributed.start()
        data, optimizer = parallel.shard(data), parallel.optimizer(optimizer)
        parallel.broadcast(scenario.model.flat_params)
    try:
        with Session(out, tracemalloc=tracemalloc, meta=meta) as session:
            session.options["gc_policy"] = str(policy)    # where `profiler run SCRIPT` records it too
            if parallel is not None:
                parallel.op = session.op
            loop = Loop(scenario.model, optimizer, data, max_epochs=epochs, history=history,
                        gc_collect=gc_collect, session=session)
            if ranks and ranks["rank"] == straggler_rank:
                GcStraggler().attach(loop)      # before the policy: freeze takes the history with it
            policy.attach(_LoopMarks(loop))
            if halt_after is not None:
                loop.on(Events.EPOCH_STARTED, lambda state: state.halt(), when=lambda s: s.epoch >= halt_after)
            total = min(epochs, halt_after) if halt_after is not None else epochs
            show = progress and stderr_is_a_terminal()   # a bar in a log file is noise
            with tqdm(total=total, desc=f"{name} {layout}", unit="epoch", disable=not show, leave=False) as bar:
                loop.on(Events.EPOCH_COMPLETED, lambda state: bar.update(1))
                try:
                    return loop.run()
                finally:
                    policy.restore()
    finally:
        if parallel is not None:
            parallel.stop()
