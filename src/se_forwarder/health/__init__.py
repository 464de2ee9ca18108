"""The agent's health: one typed ``Snapshot`` (status.json, heartbeats) and the rules that judge it."""

from .rules import Limits, Verdict, evaluate
from .snapshot import STATUS_FILE, OpenEvent, SinkHealth, Snapshot, parse_time, read

__all__ = ["STATUS_FILE", "Limits", "OpenEvent", "SinkHealth", "Snapshot", "Verdict", "evaluate", "parse_time",
           "read"]
