"""The partitions: where an event lands (by its partition key, or round robin), its sequence
number, offset and enqueued time, what a reader reads from a position, and the queries tests
make of what arrived.

Offsets are byte positions in the partition's log, as the service's are: the first event's
offset is 0 and each next one lies past the previous event's bytes, so a client that confused
an offset with a sequence number would read the wrong events here as it would in Azure.
"""

from __future__ import annotations

import bisect
import hashlib
import threading
import time
from collections.abc import Callable
from typing import Any

from .events import ReceivedEvent


def partition_for_key(key: str, partitions: int) -> int:
    """Stable partition for a partition key (same key → same partition, in every process)."""
    digest = hashlib.sha256(key.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") % partitions


class _Partition:
    """One partition's retained log (sequence numbers ascending) and its counters."""

    __slots__ = ("events", "last_time", "next_offset", "next_seq", "seqs")

    def __init__(self) -> None:
        self.events: list[ReceivedEvent] = []
        self.seqs: list[int] = []  # sequence number of events[i], for bisection
        self.next_seq = 0
        self.next_offset = 0
        self.last_time = 0.0


class EventStore:
    """Every accepted event, in arrival order, and each partition's log."""

    def __init__(self) -> None:
        self._lock = threading.Condition()
        self._events: list[ReceivedEvent] = []
        self._parts: dict[tuple[str, str], _Partition] = {}
        self._rr: dict[str, int] = {}
        self._listeners: list[Callable[[], None]] = []

    def on_added(self, listener: Callable[[], None]) -> None:
        """Call ``listener`` (from the adding thread) after events were stored."""
        self._listeners.append(listener)

    def add(
        self,
        hub: str,
        partitions: int,
        partition: str | None,
        events: list[bytes],
        key: str | None,
        connection_id: int,
    ) -> list[ReceivedEvent]:
        """Store the encoded ``events`` of one transfer in ``partition`` (None: the service
        chooses, by ``key`` or, for a batch without key, round robin, the whole batch in one)."""
        now = time.time()
        with self._lock:
            if partition is None:
                if key is not None:
                    partition = str(partition_for_key(key, partitions))
                else:
                    partition = str(self._rr.get(hub, 0) % partitions)
                    self._rr[hub] = self._rr.get(hub, 0) + 1
            part = self._parts.setdefault((hub, partition), _Partition())
            added = []
            for raw in events:
                e = ReceivedEvent(
                    hub,
                    partition,
                    part.next_seq,
                    now,
                    raw,
                    connection_id,
                    key,
                    offset=part.next_offset,
                )
                part.next_seq += 1
                part.next_offset += len(raw)
                added.append(e)
            part.events.extend(added)
            part.seqs.extend(e.sequence_number for e in added)
            part.last_time = now
            self._events.extend(added)
            self._lock.notify_all()
        for listener in self._listeners:
            listener()
        return added

    # ------------------------------------------------------------------------------ readers

    def last_enqueued(self, hub: str, partition: str) -> tuple[int, int, float]:
        """A partition's last sequence number and offset (-1 when empty) and its enqueued time
        (0 then)."""
        with self._lock:
            part = self._parts.get((hub, partition))
            if part is None or part.next_seq == 0:
                return -1, -1, 0.0
            last = part.events[-1] if part.events else None
            offset = last.offset if last is not None else part.next_offset - 1
            return part.next_seq - 1, offset, part.last_time

    def begin_sequence_number(self, hub: str, partition: str) -> int:
        """The first retained sequence number (the next one when nothing is retained)."""
        with self._lock:
            part = self._parts.get((hub, partition))
            if part is None:
                return 0
            return part.seqs[0] if part.seqs else part.next_seq

    def end_sequence_number(self, hub: str, partition: str) -> int:
        """The sequence number the next event of the partition will get (``@latest``)."""
        with self._lock:
            part = self._parts.get((hub, partition))
            return 0 if part is None else part.next_seq

    def first_matching(
        self, hub: str, partition: str, test: Callable[[ReceivedEvent], bool]
    ) -> int:
        """The sequence number of the first retained event passing ``test`` (monotonic in the
        log), or the next sequence number when none does."""
        with self._lock:
            part = self._parts.get((hub, partition))
            if part is None:
                return 0
            events = part.events
            lo, hi = 0, len(events)
            while lo < hi:
                mid = (lo + hi) // 2
                if test(events[mid]):
                    hi = mid
                else:
                    lo = mid + 1
            return events[lo].sequence_number if lo < len(events) else part.next_seq

    def read(self, hub: str, partition: str, from_seq: int, limit: int) -> list[ReceivedEvent]:
        """Up to ``limit`` retained events of the partition from sequence number ``from_seq``."""
        with self._lock:
            part = self._parts.get((hub, partition))
            if part is None or limit <= 0:
                return []
            i = bisect.bisect_left(part.seqs, from_seq)
            return part.events[i : i + limit]

    # ------------------------------------------------------------------------------ queries

    @property
    def events(self) -> list[ReceivedEvent]:
        with self._lock:
            return list(self._events)

    def events_for(
        self, hub: str | None = None, partition_id: str | int | None = None
    ) -> list[ReceivedEvent]:
        pid = None if partition_id is None else str(partition_id)
        with self._lock:
            return [
                e
                for e in self._events
                if (hub is None or e.hub == hub) and (pid is None or e.partition_id == pid)
            ]

    def by_property(self, name: str, value: Any = ...) -> list[ReceivedEvent]:
        """Events whose application property ``name`` exists (and equals ``value`` if given)."""
        with self._lock:
            return [
                e
                for e in self._events
                if name in e.properties and (value is ... or e.properties[name] == value)
            ]

    def by_partition(self, hub: str | None = None) -> dict[str, list[ReceivedEvent]]:
        out: dict[str, list[ReceivedEvent]] = {}
        for e in self.events_for(hub):
            out.setdefault(e.partition_id, []).append(e)
        return out

    def wait_for(
        self, count: int, timeout: float = 10.0, hub: str | None = None
    ) -> list[ReceivedEvent]:
        """Wait until at least ``count`` events (of ``hub``) are stored; return them all.
        Raises TimeoutError saying how many arrived."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while True:
                got = [e for e in self._events if hub is None or e.hub == hub]
                if len(got) >= count:
                    return got
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"{len(got)} of {count} events arrived within {timeout} s")
                self._lock.wait(left)

    def clear(self) -> None:
        """Forget the stored events, as if retention had expired them (sequence numbers and
        offsets go on)."""
        with self._lock:
            self._events.clear()
            for part in self._parts.values():
                part.events.clear()
                part.seqs.clear()
