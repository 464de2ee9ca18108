"""The sink interface: a sink sends one batch and says, by returning or raising, what happened.

Batching, acknowledgement, retries with backoff, splitting and dead-lettering live once in
``se_forwarder.delivery`` (the worker that drains the outbox for one sink); a sink only knows its
service. ``send`` returns only after the service confirmed every item of the batch; anything else
is one of the exceptions below, so the worker never has to guess.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, slots=True)
class OutboxItem:
    """One record waiting in the outbox."""

    seq: int  # position in the outbox, strictly increasing
    table: str  # "records" or "heartbeats" (keys of contract.tables())
    payload: str  # the record as compact JSON (UTF-8 text), exactly as the contract defines it
    partition_key: str  # VmId, or Computer when unknown: keeps one VM's records in order

    @property
    def size(self) -> int:
        return len(self.payload.encode("utf-8"))


@dataclass(frozen=True, slots=True)
class BatchLimits:
    max_records: int = 1000
    max_bytes: int = 1_000_000  # sum of payload sizes (plus separators) in one batch
    linger_seconds: float = 1.0  # wait at most this long for a batch to fill
    max_record_bytes: int = 1_000_000  # a single record larger than this can never be sent


class DeliveryError(Exception):
    """Base of what ``Sink.send`` may raise. ``str(exc)`` is one readable line for the log."""


class RetryableError(DeliveryError):
    """Nothing (or not all) was confirmed; send the same batch again later.

    ``retry_after`` is the service's own Retry-After in seconds, when it gave one. ``slow`` asks
    for the slow retry schedule (authentication and authorisation errors: a role assignment may
    take minutes to appear).
    """

    def __init__(self, message: str, *, retry_after: float | None = None, slow: bool = False):
        super().__init__(message)
        self.retry_after = retry_after
        self.slow = slow


class BatchTooLarge(DeliveryError):
    """The service refused the batch for its size (413): split it and send the halves."""


class BatchRejected(DeliveryError):
    """The service will never accept this batch as it is (for example a 400 schema complaint):
    dead-letter it with the service's message and move on."""


class Sink(Protocol):
    name: str  # unique per agent; the outbox keeps one cursor per name
    limits: BatchLimits
    tables: frozenset[str]  # which tables this sink takes ("records", "heartbeats")

    def send(self, batch: Sequence[OutboxItem]) -> None:
        """Deliver the whole batch, in order, or raise a DeliveryError."""

    def reject_reason(self, item: OutboxItem) -> str | None:
        """Why this one record can never be accepted (too large…), or None. Such a record goes
        to the dead-letter file instead of blocking the queue."""

    def close(self) -> None:
        """Release connections; called once when the agent stops."""
