"""Argument checks of the engine's constructors: a bad value is one error naming the argument,
what was expected and what was given, when the object is built, rather than a ZeroDivisionError
or a numpy error mid-training, or a run that trains wrong without a word."""

import math
import numbers

import numpy as np


def positive_int(what, value):
    """`value` as an int, or the one-line error naming `what`."""
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{what} must be a positive int, got {value!r}")
    return int(value)


def fraction(what, value, *, one=False):
    """`value` as a float in [0, 1), or [0, 1] with `one`; else the one-line error naming `what`."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not (0 <= value < 1 or one and value == 1):
        raise ValueError(f"{what} must be a number in [0, {'1]' if one else '1)'}, got {value!r}")
    return float(value)


def positive(what, value):
    """`value` as a finite float above 0, or the one-line error naming `what`."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not (value > 0 and math.isfinite(value)):
        raise ValueError(f"{what} must be a positive number, got {value!r}")
    return float(value)


def seed(what, value):
    """`value` as a seed numpy's generators take: a non-negative int, or None (fresh entropy)."""
    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0):
        raise ValueError(f"{what} must be a non-negative int (or None: fresh entropy), got {value!r}")
    return value
