"""Which rows the spool bound really lost, counted once and exactly.

The bound removes the oldest rows. A removed row is lost only for a sink that takes its table and
has not confirmed it; a row that every such sink has confirmed (or that no sink takes) is not
lost. A row a sink is sending at that moment (fetched, not yet acknowledged) is neither: it is
lost only if that sink does not confirm it. Such rows are remembered durably (``PENDING_KEY``)
until their sinks acknowledge past them; a confirmation clears them, anything else counts them
lost then, and rows still pending when the agent starts again (a kill -9 before the sink's
answer was recorded) count as lost: nothing says they arrived. So ``counter:dropped`` only ever
grows, by the records known to be lost, and never counts a row the service accepted. Heartbeat
rows lost the same way are counted apart (``counter:dropped_heartbeats``): the heartbeat's
``DroppedRecords`` counts records, exactly.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..contract import HEARTBEATS

PENDING_KEY = "spool:dropped_while_sending"  # {seq: {"sinks": [sink, ...], "table": t}}
DROPPED = "dropped"  # the counter of records (meta key counter:dropped)
DROPPED_HEARTBEATS = "dropped_heartbeats"  # the counter of heartbeat rows


@dataclass(frozen=True, slots=True)
class Dropped:
    """What one commit's spool bound did: rows removed, of which ``lost`` are counted now and
    ``sending`` wait for their sinks' answers."""

    removed: int = 0
    lost: int = 0  # records
    sending: int = 0
    heartbeats: int = 0  # heartbeat rows lost

    def __add__(self, other: Dropped) -> Dropped:
        return Dropped(
            self.removed + other.removed,
            self.lost + other.lost,
            self.sending + other.sending,
            self.heartbeats + other.heartbeats,
        )


def lost_counts(tables: Collection[str | None]) -> tuple[int, int]:
    """(records, heartbeat rows) among the tables of rows known lost."""
    heartbeats = sum(1 for t in tables if t == HEARTBEATS)
    return len(tables) - heartbeats, heartbeats


@dataclass(slots=True)
class Ledger:
    """In memory beside the store (which persists ``pending`` and the counter)."""

    tables: dict[str, frozenset[str] | None] = field(default_factory=dict)  # None: every table
    in_hand: dict[str, int] = field(default_factory=dict)  # highest seq each sink has fetched
    pending: dict[int, set[str]] = field(default_factory=dict)
    table_of: dict[int, str] = field(default_factory=dict)  # of the pending rows

    def fetched(self, sink: str, seq: int) -> None:
        if seq > self.in_hand.get(sink, 0):
            self.in_hand[sink] = seq

    def drop(self, rows: Iterable[tuple[int, str]], cursors: Mapping[str, int]) -> Dropped:
        """``rows`` (seq, table) are being removed; sinks' cursors as they stand."""
        removed = sending = 0
        lost: list[str] = []
        for seq, table in rows:
            removed += 1
            if not cursors:  # no sink yet: rows wait for the first one configured
                lost.append(table)
                continue
            missing = {s for s, acked in cursors.items() if acked < seq and self._takes(s, table)}
            if not missing:
                continue
            if all(seq <= self.in_hand.get(s, 0) for s in missing):
                self.pending[seq] = missing
                self.table_of[seq] = table
                sending += 1
            else:
                lost.append(table)
        records, heartbeats = lost_counts(lost)
        return Dropped(removed, records, sending, heartbeats)

    def acknowledged(self, sink: str, upto: int, confirmed: Collection[int]) -> tuple[int, int]:
        """``sink`` acknowledged everything up to ``upto``, having confirmed ``confirmed``:
        how many pending records and heartbeat rows are now known lost."""
        lost: list[str] = []
        for seq in [s for s, sinks in self.pending.items() if s <= upto and sink in sinks]:
            if seq in confirmed:
                self.pending[seq].discard(sink)
                if not self.pending[seq]:
                    self._settled(seq)
            else:
                lost.append(self.table_of.get(seq, ""))
                self._settled(seq)
        return lost_counts(lost)

    def _settled(self, seq: int) -> None:
        del self.pending[seq]
        self.table_of.pop(seq, None)

    def forget(self, sink: str) -> int:
        """A sink no longer configured: rows pending only for it are not lost (nobody waits)."""
        gone = 0
        for seq in list(self.pending):
            self.pending[seq].discard(sink)
            if not self.pending[seq]:
                self._settled(seq)
                gone += 1
        return gone

    def _takes(self, sink: str, table: str) -> bool:
        tables = self.tables.get(sink)
        return tables is None or table in tables

    def to_json(self) -> dict[str, dict[str, Any]]:
        return {
            str(seq): {"sinks": sorted(sinks), "table": self.table_of.get(seq)}
            for seq, sinks in self.pending.items()
        }


def pending_lost(saved: Mapping[str, object] | None) -> tuple[int, int]:
    """(records, heartbeat rows) pending at the last run's end: lost (an older agent kept only
    the sinks: its rows count as records)."""
    return lost_counts(
        [v.get("table") if isinstance(v, dict) else None for v in (saved or {}).values()]
    )
