"""Platform rows into the outbox: duplicates dropped, statuses in Azure's order, one commit.

Event Grid may deliver a notification twice (same Event Grid ``id``); Resource Graph passes
read the same rows again and again. Both are dropped here, durably: the ids and RecordIds
already committed are remembered in the state database, in the same transaction as the rows,
so a kill -9 between the commit and the Event Hubs checkpoint replays events that are then
dropped as duplicates, and none is lost. The memory is bounded (``window`` ids of each kind);
the oldest are forgotten first.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from ..outbox import Store
from .record import PlatformRecord

STATE_KEY = "collector"
GRID, RECORD = "eg:", "rec:"
_PRUNE_EVERY = 500  # commits


@dataclass
class Counters:
    committed: int = 0
    duplicate_notifications: int = 0
    duplicate_records: int = 0
    dropped_by_spool: int = 0
    commits: int = 0


class Writer:
    def __init__(self, store: Store, window: int = 200_000) -> None:
        self.store = store
        self.window = window
        state = store.load(STATE_KEY) or {}
        self.seq = int(state.get("seq", 0))
        self.counters = Counters()

    def _seen(self, key: str) -> bool:
        return self.store.load(key) is not None

    def write(self, notifications: Iterable[tuple[str | None, list[PlatformRecord]]]) -> int:
        """Commit the rows of ``notifications`` (Event Grid id, or None, and its rows) that are
        new; return how many rows were committed."""
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
        self.seq += 1
        meta = {GRID + i: self.seq for i in ids} | {RECORD + r: self.seq for r in records}
        self.counters.dropped_by_spool += self.store.commit(
            STATE_KEY, {"seq": self.seq}, [r.to_row() for r in ordered], meta).lost
        self.counters.committed += len(ordered)
        self.counters.commits += 1
        if self.seq % _PRUNE_EVERY == 0:
            self.prune()
        return len(ordered)

    def prune(self) -> None:
        """Forget the oldest ids beyond the window, per kind."""
        for prefix in (GRID, RECORD):
            seen = self.store.scan(prefix)
            if len(seen) > self.window:
                oldest = sorted(seen, key=seen.__getitem__)[:len(seen) - self.window]
                self.store.forget(oldest)
