"""Capture: the instruments (GC timer, heap tracker, op timers) and the Session that runs them."""

from .session import Session

__all__ = ["Session"]
