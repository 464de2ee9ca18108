"""The agent's health: one declaration (``Snapshot``) from which status.json, the heartbeat row,
the metrics and ``status``'s rules derive; how the running agent builds it, writes status.json
and sends heartbeats."""

from .read import parse_time, read
from .rules import Assessment, HealthState, Limits, evaluate
from .snapshot import STATUS_FILE, OpenEvent, SinkHealth, Snapshot

__all__ = [
    "STATUS_FILE",
    "Assessment",
    "HealthState",
    "Limits",
    "OpenEvent",
    "SinkHealth",
    "Snapshot",
    "evaluate",
    "parse_time",
    "read",
]
