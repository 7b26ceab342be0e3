"""This process's place in a torchrun job, from the environment torchrun sets."""

import os

from ..errors import UsageError

FIELDS = ("rank", "local_rank", "world_size", "job")


def rank_env(environ=None):
    """{"rank", "local_rank", "world_size", "job"} from torchrun's environment, or None outside
    torchrun (RANK or WORLD_SIZE unset). "job" is what every rank of one job shares: "RUN_ID:PORT"
    (torchrun's run id and master port; None without a port; not the master address, which hosts
    may write as a name or an address), so a directory that mixes two jobs' ranks is told apart
    (`profiler run --nproc-per-node` takes a free port per job). A value that is not an integer,
    or a rank outside the world size, is a UsageError: the job's directories would not line up."""
    environ = os.environ if environ is None else environ
    if "RANK" not in environ or "WORLD_SIZE" not in environ:
        return None
    values = {}
    for key, name in (("RANK", "rank"), ("LOCAL_RANK", "local_rank"), ("WORLD_SIZE", "world_size")):
        text = environ.get(key)
        try:
            values[name] = None if text is None else int(text)
        except ValueError:
            raise UsageError(f"the environment has {key}={text!r}, not an integer (set by torchrun)") from None
    if not 0 <= values["rank"] < values["world_size"]:
        raise UsageError(f"the environment has RANK={values['rank']} outside WORLD_SIZE={values['world_size']}")
    port = environ.get("MASTER_PORT")
    values["job"] = f"{environ.get('TORCHELASTIC_RUN_ID', '')}:{port}" if port else None
    return values
