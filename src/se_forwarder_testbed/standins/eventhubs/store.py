"""The partitions: where an event lands (by its partition key, or round robin), its sequence
number and enqueued time, and the queries tests make of what arrived."""

from __future__ import annotations

import hashlib
import threading
import time
from typing import Any

from .events import ReceivedEvent


def partition_for_key(key: str, partitions: int) -> int:
    """Stable partition for a partition key (same key → same partition, in every process)."""
    digest = hashlib.sha256(key.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") % partitions


class EventStore:
    """Every accepted event, in arrival order, with each partition's sequence numbers."""

    def __init__(self) -> None:
        self._lock = threading.Condition()
        self._events: list[ReceivedEvent] = []
        self._seq: dict[tuple[str, str], int] = {}
        self._last_enqueued: dict[tuple[str, str], float] = {}
        self._rr: dict[str, int] = {}

    def add(self, hub: str, partitions: int, partition: str | None, events: list[bytes],
            key: str | None, connection_id: int) -> None:
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
            seq = self._seq.get((hub, partition), 0)
            self._events.extend(ReceivedEvent(hub, partition, seq + i, now, raw, connection_id, key)
                                for i, raw in enumerate(events))
            self._seq[(hub, partition)] = seq + len(events)
            self._last_enqueued[(hub, partition)] = now
            self._lock.notify_all()

    def last_enqueued(self, hub: str, partition: str) -> tuple[int, float]:
        """A partition's last sequence number (-1 when empty) and its enqueued time (0 then)."""
        with self._lock:
            return (self._seq.get((hub, partition), 0) - 1,
                    self._last_enqueued.get((hub, partition), 0.0))

    @property
    def events(self) -> list[ReceivedEvent]:
        with self._lock:
            return list(self._events)

    def events_for(self, hub: str | None = None, partition_id: str | int | None = None
                   ) -> list[ReceivedEvent]:
        pid = None if partition_id is None else str(partition_id)
        with self._lock:
            return [e for e in self._events if (hub is None or e.hub == hub)
                    and (pid is None or e.partition_id == pid)]

    def by_property(self, name: str, value: Any = ...) -> list[ReceivedEvent]:
        """Events whose application property ``name`` exists (and equals ``value`` if given)."""
        with self._lock:
            return [e for e in self._events if name in e.properties
                    and (value is ... or e.properties[name] == value)]

    def by_partition(self, hub: str | None = None) -> dict[str, list[ReceivedEvent]]:
        out: dict[str, list[ReceivedEvent]] = {}
        for e in self.events_for(hub):
            out.setdefault(e.partition_id, []).append(e)
        return out

    def wait_for(self, count: int, timeout: float = 10.0, hub: str | None = None
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
        """Forget the stored events (sequence numbers go on)."""
        with self._lock:
            self._events.clear()
