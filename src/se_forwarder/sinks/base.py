"""The sink interface: a sink sends one batch and says, by returning or raising, what happened.

Batching, acknowledgement, retries with backoff, splitting and dead-lettering live once in
``se_forwarder.delivery`` (the worker that drains the outbox for one sink); a sink only knows its
service. ``send`` returns only after the service confirmed every row of the batch; anything else
is one of the ``DeliveryError`` subclasses below, so the worker never has to guess. Any other
exception out of ``send`` is a programming error: the worker logs its traceback once, reports it
as a sink failure and retries on the slow schedule.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from ..errors import (
    BatchRejected,
    BatchTooLarge,
    DeliveryError,
    DestinationGone,
    PartialDelivery,
    RetryableError,
)
from ..outbox import OutboxRow

__all__ = [
    "BatchLimits", "BatchRejected", "BatchTooLarge", "DeliveryError", "DestinationGone", "OutboxRow",
    "PartialDelivery", "RetryableError", "Sink",
]


@dataclass(frozen=True, slots=True)
class BatchLimits:
    max_records: int = 1000
    max_bytes: int = 1_000_000  # sum of payload sizes (plus separators) in one batch
    linger_seconds: float = 1.0  # wait at most this long for a batch to fill
    max_record_bytes: int = 1_000_000  # a single record larger than this can never be sent


class Sink(Protocol):
    name: str  # unique per agent; the outbox keeps one cursor per name
    limits: BatchLimits
    tables: frozenset[str]  # which contract tables this sink takes

    def send(self, batch: Sequence[OutboxRow]) -> None:
        """Deliver the whole batch, in order, or raise a DeliveryError (``PartialDelivery`` when
        a prefix was confirmed)."""

    def reject_reason(self, row: OutboxRow) -> str | None:
        """Why this one row can never be accepted (too large…), or None. Such a row goes to the
        dead-letter file instead of blocking the queue."""

    def close(self) -> None:
        """Release connections; called once when the agent stops."""
