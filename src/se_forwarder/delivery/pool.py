"""All delivery workers of one agent: started together, drained against a deadline at stop."""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from .. import logs
from ..clock import SYSTEM, Clock
from ..outbox import Store
from ..sinks.base import Sink
from .dead_letters import DEFAULT_MAX_BYTES, DeadLetters
from .worker import DeliveryWorker, SinkStats

DEAD_LETTERS_DROPPED = "dead_letters_dropped"  # the outbox counter (counter:dead_letters_dropped)


@dataclass(frozen=True, slots=True)
class Totals:
    """Over every sink (named as ``health.Snapshot`` declares them)."""

    delivered: int
    failed_deliveries: int
    dead_lettered: int


class DeliveryPool:
    def __init__(
        self,
        sinks: Sequence[Sink],
        store: Store,
        dead_letter_path: Path,
        clock: Clock = SYSTEM,
        *,
        dead_letter_max_bytes: int = DEFAULT_MAX_BYTES,
    ) -> None:
        self.clock = clock
        self._stop = clock.event()
        self.store = store
        self.dead_letters = DeadLetters(
            dead_letter_path,
            clock,
            max_bytes=dead_letter_max_bytes,
            counted=self._dead_letters_dropped,
        )
        self.workers = [
            DeliveryWorker(s, store, self.dead_letters, stop=self._stop, clock=clock) for s in sinks
        ]

    @property
    def names(self) -> list[str]:
        return [w.sink.name for w in self.workers]

    @property
    def tables(self) -> dict[str, frozenset[str]]:
        """Which tables each sink takes (the store counts a dropped row lost only for those)."""
        return {w.sink.name: w.sink.tables for w in self.workers}

    def start(self) -> None:
        for w in self.workers:
            self.clock.track(w)
            w.start()

    def notify(self) -> None:
        """New rows were committed."""
        for w in self.workers:
            w.notify()

    def stats(self) -> dict[str, SinkStats]:
        return {w.sink.name: w.stats for w in self.workers}

    def totals(self) -> Totals:
        stats = [w.stats for w in self.workers]
        return Totals(
            sum(s.delivered for s in stats),
            sum(s.failed for s in stats),
            sum(s.dead_lettered for s in stats),
        )

    def _dead_letters_dropped(self, lines: int) -> None:
        """Persist dead-letter lines dropped at the file's bound, beside the spool's own drops."""
        try:
            self.store.count(DEAD_LETTERS_DROPPED, lines)
        except sqlite3.Error as exc:  # a full disk: still counted for this run (``dropped``)
            logs.event(
                logs.get("delivery"),
                logging.ERROR,
                "dead-letter lines dropped, not "
                "recorded in the state database: counted for this run only",
                lines=lines,
                error=str(exc),
            )

    def flush(self, seconds: float) -> list[str]:
        """At stop: ``drain``, then ``stop`` with what is left of the same ``seconds`` (one
        budget: a sink slow to confirm cannot add the stop's grace to ``stop_flush_seconds``); the
        sinks still sending at the deadline (their rows stay in the outbox)."""
        deadline = self.clock.monotonic() + seconds
        self.drain(seconds)
        return self.stop(grace=max(0.0, deadline - self.clock.monotonic()))

    def drain(self, seconds: float) -> None:
        """Let each sink send what is waiting, without lingering, for at most ``seconds``."""
        for w in self.workers:
            w.draining.set()
            w.notify()
        self._wait_done(seconds)

    def stop(self, grace: float = 2.0) -> list[str]:
        """Abort what is still sending; returns the sinks still busy after ``grace`` seconds
        (their rows stay in the outbox and are sent again at the next start)."""
        self._stop.set()
        for w in self.workers:
            w.notify()
        self._wait_done(grace)
        return [w.sink.name for w in self.workers if _busy(w)]

    def alive(self) -> bool:
        return any(_busy(w) for w in self.workers)

    def _wait_done(self, seconds: float) -> None:
        """Until every worker has ended, for at most ``seconds`` of the agent's clock."""
        deadline = self.clock.monotonic() + seconds
        for w in self.workers:
            if _busy(w):
                self.clock.wait(w.done, max(0.0, deadline - self.clock.monotonic()))


def _busy(w: DeliveryWorker) -> bool:
    """Started and not finished (``done`` is set last thing: the store is no longer used)."""
    return w.is_alive() and not w.done.is_set()
