"""Strict JSON of analysis results: dataclasses as objects, no NaN or Infinity (a non-finite number
is written as null, since JSON has no spelling for it). A Diagnosis, Comparison, RankComparison or
Scaling also gets its "verdict", and each finding its "evidence" and "remedy", in the text renderer's words;
a finding's numbers stay under "data"."""

import dataclasses
import json
import math

import numpy as np

from ..analysis import Comparison, Diagnosis, Scaling
from ..analysis.ranks import RankComparison
from . import rank_text, text


def _plain(value):
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, np.ndarray)):
        return [_plain(v) for v in value]
    if isinstance(value, (np.integer, np.bool_)):
        return value.item()
    if isinstance(value, (float, np.floating)):
        value = float(value)
        return value if math.isfinite(value) else None
    return value


def to_plain(result):
    """The result as JSON-ready Python objects."""
    out = _plain(result)
    if isinstance(result, Diagnosis):
        out["findings"] = [{"cause": f.cause, "pattern": f.pattern, "time_fraction": _plain(f.time_fraction),
                            "evidence": text.evidence(f), "remedy": text.remedy(f), "data": _plain(f.evidence)}
                           for f in result.findings]
        out["verdict"] = text.verdict(result)
    elif isinstance(result, Comparison):
        out["verdict"] = text.comparison_verdict(result)
    elif isinstance(result, Scaling):
        out["verdict"] = text.scaling_verdict(result)
    elif isinstance(result, RankComparison):
        out["verdict"] = rank_text.comparison_verdict(result)
    return out


def render(result):
    return json.dumps(to_plain(result), indent=2, allow_nan=False)
