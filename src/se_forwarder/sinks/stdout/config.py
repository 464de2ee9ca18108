"""``[sinks.stdout]``."""

from __future__ import annotations

from ..batching import BatchConfig


class StdoutSinkConfig(BatchConfig):
    heartbeats: bool = False  # also write heartbeats (records only by default)
