"""Hooks: one process per run (``runner``), what it is told (``environment``), and at most once
per (EventId, hook, phase) across restarts (``journal``)."""

from .journal import Journal
from .runner import HookRun, Running

__all__ = ["HookRun", "Journal", "Running"]
