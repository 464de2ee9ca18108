"""One exception hierarchy: every error se-forwarder raises on purpose is a ``SeForwarderError``.

``str(exc)`` is always one readable line (it is what the log and the command line show), so a
caller can catch the base class at a boundary (a command, a worker loop) and report it without
knowing which layer raised it. Anything else that escapes is a programming error.

``exit_code`` is what a command exits with when the error reaches the command line: 2 for bad
input (a configuration, a trace, a scenario, a report's sources), 1 for a failure at run time.
"""

from __future__ import annotations

from typing import ClassVar


class SeForwarderError(Exception):
    """Base of every expected error; ``str()`` is one line for a person."""

    exit_code: ClassVar[int] = 1  # a failure at run time


class ConfigError(SeForwarderError):
    """The configuration is invalid; one line per problem, each naming the key."""

    exit_code = 2


class ImdsError(SeForwarderError):
    """The Instance Metadata Service did not give a usable answer."""


class BadDocument(ImdsError, ValueError):
    """An answer that is not a usable Scheduled Events document (why, in one line)."""


class TraceError(SeForwarderError, ValueError):
    """A trace file is malformed: ``FILE:LINE: reason``."""

    exit_code = 2


class StateError(SeForwarderError):
    """The state directory cannot be opened, locked or persisted to."""


class ReportError(SeForwarderError, ValueError):
    """``se-forwarder report`` cannot be built from what it was given (a source, a Resource Graph
    file, the dashboards folder, a workbook merge)."""

    exit_code = 2


class StatusFileError(SeForwarderError):
    """``status.json`` exists but cannot be read or is not a JSON object."""


class DeliveryError(SeForwarderError):
    """Base of what ``Sink.send`` may raise (see ``se_forwarder.sinks.base``)."""


class RetryableError(DeliveryError):
    """Nothing (or not all) was confirmed; send again later.

    ``retry_after``: the service's own Retry-After in seconds, when it gave one. ``slow``: use the
    slow schedule (authorisation: a role assignment may take minutes to appear).
    """

    def __init__(self, message: str, *, retry_after: float | None = None, slow: bool = False):
        super().__init__(message)
        self.retry_after = retry_after
        self.slow = slow


class BatchTooLarge(DeliveryError):
    """The service refused the batch for its size (413): split it and send the halves."""


class BatchRejected(DeliveryError):
    """The service will never accept this batch as it is (a 400 schema complaint): isolate the
    refused record and dead-letter it with the service's message."""


class DestinationGone(DeliveryError):
    """The destination answered, again and again, that it no longer exists (a webhook's 404 or
    410 past its retry budget): dead-letter the record with the reason; never retry forever."""


class PartialDelivery(DeliveryError):
    """Part of the batch was confirmed: everything up to ``delivered_upto`` (an outbox seq), then
    ``cause`` for the rest. The worker acknowledges that prefix, so delivery progress has one owner
    (the outbox cursor), and handles ``cause`` for the remainder."""

    def __init__(self, delivered_upto: int, cause: DeliveryError):
        super().__init__(f"delivered up to seq {delivered_upto}, then: {cause}")
        self.delivered_upto = delivered_upto
        self.cause = cause


class ScenarioError(SeForwarderError, ValueError):
    """A simulator scenario is invalid (test bed)."""

    exit_code = 2
