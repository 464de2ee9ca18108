"""``dead-letter.jsonl``: rows a sink can never accept, each with the reason (never a transient
answer: the worker dead-letters only what no retry can fix)."""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from ..clock import SYSTEM, Clock
from ..outbox import OutboxRow


class DeadLetters:
    def __init__(self, path: Path, clock: Clock = SYSTEM) -> None:
        self.path = path
        self.clock = clock
        self._lock = threading.Lock()

    def write(self, sink: str, reason: str, rows: Sequence[OutboxRow]) -> None:
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.clock.wall_seconds()))
        lines = []
        for row in rows:
            try:
                record = json.loads(row.payload)
            except ValueError:
                record = row.payload
            lines.append(json.dumps({"time": now, "sink": sink, "reason": reason, "table": row.table,
                                     "seq": row.seq, "record": record}, separators=(",", ":")))
        data = ("\n".join(lines) + "\n").encode("utf-8")
        with self._lock:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                os.write(fd, data)
            finally:
                os.close(fd)
