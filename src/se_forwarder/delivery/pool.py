"""All delivery workers of one agent: started together, drained against a deadline at stop."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ..outbox import Store
from ..sinks.base import Sink
from .dead_letters import DeadLetters
from .worker import DeliveryWorker, SinkStats


@dataclass(frozen=True, slots=True)
class Totals:
    delivered: int
    failed: int
    dead_lettered: int


class DeliveryPool:
    def __init__(self, sinks: Sequence[Sink], store: Store, dead_letter_path: Path) -> None:
        self._stop = threading.Event()
        self.dead_letters = DeadLetters(dead_letter_path)
        self.workers = [DeliveryWorker(s, store, self.dead_letters, stop=self._stop) for s in sinks]

    @property
    def names(self) -> list[str]:
        return [w.sink.name for w in self.workers]

    def start(self) -> None:
        for w in self.workers:
            w.start()

    def notify(self) -> None:
        """New rows were committed."""
        for w in self.workers:
            w.notify()

    def stats(self) -> dict[str, SinkStats]:
        return {w.sink.name: w.stats for w in self.workers}

    def totals(self) -> Totals:
        stats = [w.stats for w in self.workers]
        return Totals(sum(s.delivered for s in stats), sum(s.failed for s in stats),
                      sum(s.dead_lettered for s in stats))

    def drain(self, seconds: float) -> None:
        """Let each sink send what is waiting, without lingering, for at most ``seconds``."""
        for w in self.workers:
            w.draining.set()
            w.notify()
        deadline = time.monotonic() + seconds
        for w in self.workers:
            if w.is_alive():
                w.join(max(0.0, deadline - time.monotonic()))

    def stop(self, grace: float = 2.0) -> list[str]:
        """Abort what is still sending; returns the sinks still busy after ``grace`` seconds
        (their rows stay in the outbox and are sent again at the next start)."""
        self._stop.set()
        for w in self.workers:
            w.notify()
        for w in self.workers:
            if w.is_alive():
                w.join(grace)
        return [w.sink.name for w in self.workers if w.is_alive()]

    def alive(self) -> bool:
        return any(w.is_alive() for w in self.workers)
