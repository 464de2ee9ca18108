"""The sink contract: a sink sends one batch and returns what was delivered.

Batching, acknowledgement, retries with backoff, splitting and dead-lettering live once in
``se_forwarder.delivery`` (the worker that drains the outbox for one sink); a sink only knows its
service. ``send`` always returns a ``SendResult`` (Vector's ``RetryAction``, OpenTelemetry's
``SpanExportResult``): the prefix of the batch the service confirmed (all of it, or none), and
when the rest was not delivered, ``failure``: a ``DeliveryError`` carrying the verdict of the
sink's answer table (``answers.py``). An exception out of ``send`` is a programming error: the
worker logs its traceback once, reports it as a sink failure and retries on the slow schedule.

A sink is a context manager (``with sink: ...`` closes it); the worker that drains it closes it
when it ends. Each sink package declares itself with a ``SinkKind`` (``kinds.py``) and is built
from the configured section and one ``SinkContext`` (Vector's ``build(cx)``): the identity, the
policy, the agent's clock and its logs, the same for every sink.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Protocol, Self

from .. import logs
from ..clock import SYSTEM, Clock
from ..errors import DeliveryError
from ..identity.config import IdentityConfig
from ..outbox.row import OutboxRow
from .batching import BatchConfig, BatchLimits

if TYPE_CHECKING:
    from ..policy.config import PolicyConfig

__all__ = [
    "BatchLimits",
    "DeliveryError",
    "OutboxRow",
    "SendResult",
    "Sink",
    "SinkContext",
    "SinkKind",
]


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
        """This result (a prefix of the batch, possibly empty), the rest failed with ``failure``."""
        return replace(self, failure=failure)


class Sink(Protocol):
    name: str  # unique per agent; the outbox keeps one cursor per name
    limits: BatchLimits
    tables: frozenset[str]  # which contract tables this sink takes

    def send(self, batch: Sequence[OutboxRow]) -> SendResult:
        """Deliver the batch, in order: what was delivered (a prefix, possibly empty), with
        ``failure`` for the rest; never raises for a batch it could not deliver."""

    def prepare(self, batch: Sequence[OutboxRow]) -> None:
        """Do ahead what ``send(batch)`` does before it sends (Event Hubs: encode the events),
        while the batch before is being sent: the worker calls it from another thread when a
        backlog waits, with the batch it will send next (unless a failure or a stop comes
        first). Nothing is sent here; ``send`` takes any batch, prepared or not. By default,
        nothing."""
        return

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
class SinkContext:
    """What every sink is built with, whichever it is (Vector's ``SinkContext``): the
    ``[identity]`` the Azure sinks authenticate with, the ``[policy]`` a sink's messages describe,
    the agent's ``clock`` (every deadline, Retry-After date and "how long has this lasted" of a
    sink reads it, so the test bed's fake clock drives them too) and ``log`` (a logger by name)."""

    identity: IdentityConfig = field(default_factory=IdentityConfig)
    policy: PolicyConfig | None = None  # None: the default policy (no [policy])
    clock: Clock = SYSTEM
    log: Callable[[str], logging.Logger] = logs.get

    @classmethod
    def of(cls, config: Sections, clock: Clock = SYSTEM) -> SinkContext:
        """The context of a configuration (the agent's or the collector's) on ``clock``."""
        return cls(identity=config.identity, policy=config.policy, clock=clock)


class Sections(Protocol):
    """The configuration's sections a sink context is made of (``config.Config`` has them)."""

    identity: IdentityConfig
    policy: PolicyConfig | None


@dataclass(frozen=True, slots=True)
class SinkKind:
    """How a sink package declares itself (``kinds.register``): the ``[sinks.<name>]`` key, its
    configuration model (light to import) and its builder, ``build(cfg, cx)``, which imports the
    sink's module and its SDK only when called."""

    name: str
    config: type[BatchConfig]
    build: Callable[[Any, SinkContext], Sink]
