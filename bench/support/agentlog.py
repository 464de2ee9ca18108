"""Reading the agent's JSON log lines (``se-forwarder run``'s standard error) in a benchmark, and
the percentile the benchmarks report.

``AgentLog`` is a daemon thread over the stream: each line that parses as JSON goes to
``handle(line, raw, arrived)`` (``arrived``: when this process read it, epoch seconds) under
``cond``, which is notified after every line, so a subclass stores what it measures and the
benchmark waits on it with ``wait_for(predicate, timeout)``. Lines that are not JSON are skipped.
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any


def log_time(text: str) -> float:
    """A log line's ``time`` (ISO 8601 with ``Z``, millisecond resolution) in epoch seconds."""
    return datetime.fromisoformat(text).timestamp()  # 3.11 reads the "Z"


def pct(values: Iterable[float], q: float) -> float:
    """Nearest-rank percentile (``q`` in 0..1) of ``values``, sorted or not."""
    s = sorted(values)
    return s[max(0, min(len(s) - 1, math.ceil(q * len(s)) - 1))]


class AgentLog(threading.Thread):
    """The agent's log lines, read on a daemon thread; subclasses say what to keep (``handle``)."""

    def __init__(self, stream: Iterable[str]) -> None:
        super().__init__(daemon=True)
        self.stream = stream
        self.cond = threading.Condition()

    def run(self) -> None:
        for raw in self.stream:
            arrived = time.time()
            try:
                line = json.loads(raw)
            except ValueError:
                continue
            with self.cond:
                self.handle(line, raw, arrived)
                self.cond.notify_all()

    def handle(self, line: dict[str, Any], raw: str, arrived: float) -> None:
        raise NotImplementedError

    def wait_for(self, predicate: Callable[[], bool], timeout: float) -> bool:
        with self.cond:
            return self.cond.wait_for(predicate, timeout)
