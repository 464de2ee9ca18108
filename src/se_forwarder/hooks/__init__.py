"""Hooks: one process per run (``runner``), what it is told (``environment``), and at most once
per (EventId, hook, phase) across restarts (``journal``)."""

from .journal import Journal
from .runner import HookRun, Running
from .states import HookState

__all__ = ["HookRun", "HookState", "Journal", "Running"]
