"""The one row type of the outbox: what waits for the sinks, with what they route on.

Size and routing attributes (``phase``, ``event_type``) are computed once, when the row is
committed, and stored beside the payload: a sink never re-encodes or re-parses a record to batch,
size or label it.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..model import Heartbeat, LifecycleRecord


@dataclass(frozen=True, slots=True)
class OutboxRow:
    table: str  # contract table key: contract.RECORDS or contract.HEARTBEATS
    partition_key: str  # VmId, or Computer when unknown: keeps one VM's records in order
    payload: str  # the record as compact JSON (UTF-8 text), exactly as the contract defines it
    size: int  # len(payload.encode("utf-8"))
    phase: str | None = None  # records only
    event_type: str | None = None  # records only
    seq: int = 0  # position in the outbox, strictly increasing; 0 until committed

    @classmethod
    def of(cls, row: LifecycleRecord | Heartbeat, partition_key: str) -> OutboxRow:
        payload = row.to_json()
        if isinstance(row, LifecycleRecord):
            return cls(
                row.table,
                partition_key,
                payload,
                len(payload.encode("utf-8")),
                row.Phase,
                row.EventType,
            )
        return cls(row.table, partition_key, payload, len(payload.encode("utf-8")))

    @classmethod
    def raw(
        cls,
        table: str,
        partition_key: str,
        payload: str,
        *,
        seq: int = 0,
        phase: str | None = None,
        event_type: str | None = None,
    ) -> OutboxRow:
        """A row from text already encoded (tests, benches, migration of old outboxes)."""
        return cls(
            table, partition_key, payload, len(payload.encode("utf-8")), phase, event_type, seq
        )
