"""Platform rows into the outbox: duplicates dropped, statuses in Azure's order, one commit.

Event Grid may deliver a notification twice (same Event Grid ``id``); Resource Graph passes
read the same rows again and again. Both are dropped here, durably: the ids and RecordIds
already committed are remembered in the state database, in the same transaction as the rows,
so a kill -9 between the commit and the Event Hubs checkpoint replays events that are then
dropped as duplicates, and none is lost. The memory is bounded (``window`` ids of each kind);
the oldest are forgotten first.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from .. import logs
from ..errors import StateError
from ..outbox import OutboxRow, Store
from ..outbox.drops import Dropped
from .record import PlatformRecord

log = logs.get("collector")

STATE_KEY = "collector"
GRID, RECORD = "eg:", "rec:"
_PRUNE_EVERY = 500  # commits


@dataclass
class Counters:
    """Named as the collector's health declares them (collector/health.py)."""

    committed: int = 0
    duplicate_notifications: int = 0
    duplicate_records: int = 0
    dropped: int = 0  # old rows the spool bound dropped to make room
    commits: int = 0
    persist_failures: int = 0
    persist_error: str | None = None  # the failure going on, if any


class Writer:
    def __init__(
        self,
        store: Store,
        window: int = 200_000,
        observe: Callable[[Iterable[PlatformRecord]], None] | None = None,
    ) -> None:
        """``observe``: handed every row read, duplicates too (the approvals' view of events:
        a Resource Graph pass tells each event's current status again after a restart)."""
        self.store = store
        self.observe = observe
        self.window = window
        state = store.load(STATE_KEY) or {}
        self.seq = int(state.get("seq", 0))
        self.counters = Counters()
        self._lock = threading.Lock()  # the Event Hub and a Resource Graph pass may write at once

    def _seen(self, key: str) -> bool:
        return self.store.load(key) is not None

    def committed(self, record_id: str) -> bool:
        """The row was committed (within the remembered window)."""
        return self._seen(RECORD + record_id)

    def write(self, notifications: Iterable[tuple[str | None, list[PlatformRecord]]]) -> int:
        """Commit the rows of ``notifications`` (Event Grid id, or None, and its rows) that are
        new; return how many rows were committed."""
        notifications = list(notifications)
        if self.observe is not None:
            for _, rows in notifications:
                self.observe(rows)
        with self._lock:
            return self._write(notifications)

    def _write(self, notifications: Iterable[tuple[str | None, list[PlatformRecord]]]) -> int:
        ids: set[str] = set()
        records: dict[str, PlatformRecord] = {}
        for grid_id, rows in notifications:
            if grid_id is not None:
                if grid_id in ids or self._seen(GRID + grid_id):
                    self.counters.duplicate_notifications += 1
                    continue
                ids.add(grid_id)
            for row in rows:
                if row.RecordId in records or self._seen(RECORD + row.RecordId):
                    self.counters.duplicate_records += 1
                    continue
                records[row.RecordId] = row
        if not ids and not records:
            return 0
        ordered = sorted(records.values(), key=lambda r: r.order_key)  # Azure's own order
        seq = self.seq + 1
        meta = {GRID + i: seq for i in ids} | {RECORD + r: seq for r in records}
        dropped = self._commit(seq, [r.to_row() for r in ordered], meta).lost
        self.seq = seq
        if dropped:
            self.counters.dropped += dropped
            logs.event(
                log,
                logging.ERROR,
                "spool bound reached: dropped the oldest rows",
                dropped=dropped,
                max_bytes=self.store.max_bytes,
            )
        self.counters.committed += len(ordered)
        self.counters.commits += 1
        if self.seq % _PRUNE_EVERY == 0:
            self.prune()
        return len(ordered)

    def _commit(self, seq: int, rows: list[OutboxRow], meta: dict[str, int]) -> Dropped:
        """One transaction; a failure (disk full, read-only, I/O) is counted, logged and raised
        as a StateError: the caller must not acknowledge what it read (no checkpoint)."""
        c = self.counters
        try:
            dropped = self.store.commit(STATE_KEY, {"seq": seq}, rows, meta)
        except (sqlite3.Error, OSError) as exc:  # disk full, read-only, I/O error
            c.persist_failures += 1
            c.persist_error = f"{type(exc).__name__}: {exc}"
            logs.event(
                log,
                logging.ERROR,
                "cannot commit platform rows; they are read again",
                rows=len(rows),
                failures=c.persist_failures,
                error=c.persist_error,
            )
            raise StateError(f"cannot commit platform rows: {c.persist_error}") from exc
        if c.persist_error is not None:
            logs.event(
                log, logging.WARNING, "state directory writable again", failures=c.persist_failures
            )
            c.persist_error = None
        return dropped

    def prune(self) -> None:
        """Forget the oldest ids beyond the window, per kind."""
        for prefix in (GRID, RECORD):
            seen = self.store.scan(prefix)
            if len(seen) > self.window:
                oldest = sorted(seen, key=seen.__getitem__)[: len(seen) - self.window]
                self.store.forget(oldest)
