"""Strict JSON of any analysis result: dataclasses as objects, no NaN or Infinity (a non-finite
number is written as null, since JSON has no spelling for it)."""

import dataclasses
import json
import math

import numpy as np


def _plain(value):
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, (np.integer, np.bool_)):
        return value.item()
    if isinstance(value, (float, np.floating)):
        value = float(value)
        return value if math.isfinite(value) else None
    return value


def to_plain(result):
    """The result as JSON-ready Python objects."""
    return _plain(result)


def render(result):
    return json.dumps(_plain(result), indent=2, allow_nan=False)
