"""The sink contract: a sink sends one batch and returns what was delivered.

Batching, acknowledgement, retries with backoff, splitting and dead-lettering live once in
``se_forwarder.delivery`` (the worker that drains the outbox for one sink); a sink only knows its
service. ``send`` returns a ``SendResult`` once the service confirmed the whole batch or a prefix
of it (then ``failure`` says why the rest was not), and raises a ``DeliveryError`` when nothing
was delivered; either way the error carries the verdict of the sink's answer table
(``answers.py``). Any other exception out of ``send`` is a programming error: the worker logs its
traceback once, reports it as a sink failure and retries on the slow schedule.

A sink is a context manager (``with sink: ...`` closes it); the worker that drains it closes it
when it ends. Each sink package declares itself with a ``SinkKind`` (``registry.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Protocol, Self

from ..errors import DeliveryError
from ..outbox import OutboxRow
from .answers import Verdict

if TYPE_CHECKING:
    from ..config import IdentityConfig
    from ..policy import PolicyConfig
    from .batching import BatchConfig

__all__ = ["BatchLimits", "DeliveryError", "OutboxRow", "SendResult", "Sink", "SinkKind", "Verdict"]


@dataclass(frozen=True, slots=True)
class BatchLimits:
    """A sink's batch limits, fixed when it is built (the worker reads them on every round)."""

    max_records: int = 1000
    max_bytes: int = 1_000_000  # sum of payload sizes (plus separators) in one batch
    linger_seconds: float = 1.0  # wait at most this long for a batch to fill
    max_record_bytes: int = 1_000_000  # a single record larger than this can never be sent

    def too_large(self, row: OutboxRow) -> str | None:
        """The one rule for a record too large to ever send (the worker dead-letters it unsent):
        why, or None."""
        if row.size > self.max_record_bytes:
            return f"record of {row.size} bytes is over the {self.max_record_bytes}-byte limit"
        return None


@dataclass(frozen=True, slots=True)
class SendResult:
    """What one ``send`` delivered: the first ``delivered`` rows of the batch (all of them unless
    ``failure`` says why the rest was not), with the ``requests`` (or transfers) that carried
    them, their ``bytes_sent`` on the wire and the ``largest_request``. The worker acknowledges
    exactly those rows: the outbox cursor stays the one owner of delivery progress."""

    delivered: int = 0
    requests: int = 0
    bytes_sent: int = 0
    largest_request: int = 0
    failure: DeliveryError | None = None

    def plus(self, rows: int, request_bytes: int | None) -> SendResult:
        """This result with ``rows`` more rows confirmed by one request of ``request_bytes``
        (None: confirmed without a request, e.g. left out by a filter)."""
        if request_bytes is None:
            return replace(self, delivered=self.delivered + rows)
        return replace(
            self,
            delivered=self.delivered + rows,
            requests=self.requests + 1,
            bytes_sent=self.bytes_sent + request_bytes,
            largest_request=max(self.largest_request, request_bytes),
        )

    def rest_failed(self, failure: DeliveryError) -> SendResult:
        """The rest failed with ``failure``: this (partial) result when something was delivered;
        when nothing was, the failure is raised."""
        if not self.delivered:
            raise failure
        return replace(self, failure=failure)


class Sink(Protocol):
    name: str  # unique per agent; the outbox keeps one cursor per name
    limits: BatchLimits
    tables: frozenset[str]  # which contract tables this sink takes

    def send(self, batch: Sequence[OutboxRow]) -> SendResult:
        """Deliver the batch, in order: what was delivered (a prefix, ``failure`` for the rest),
        or a ``DeliveryError`` when nothing was."""

    def reject_reason(self, row: OutboxRow) -> str | None:
        """Why this one row can never be accepted, for a rule of the service's other than its
        size (``BatchLimits.too_large`` is the one size rule), or None. Such a row goes to the
        dead-letter file instead of blocking the queue."""

    def close(self) -> None:
        """Release connections; called once when the sink's worker ends."""

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


@dataclass(frozen=True, slots=True)
class SinkKind:
    """How a sink package declares itself to the registry: the ``[sinks.<name>]`` key, its
    configuration model (light to import), its builder (which imports the sink's module and its
    SDK only when called) and whether its messages need the policy."""

    name: str
    config: type[BatchConfig]
    build: Callable[..., Sink]  # (cfg, identity, *, policy=None) -> Sink
    uses_policy: bool = False

    def make(self, cfg: Any, identity: IdentityConfig, policy: PolicyConfig) -> Sink:
        if self.uses_policy:
            return self.build(cfg, identity, policy=policy)
        return self.build(cfg, identity)
