"""One exception hierarchy: every error se-forwarder raises on purpose is a ``SeForwarderError``.

``str(exc)`` is always one readable line (it is what the log and the command line show), so a
caller can catch the base class at a boundary (a command, a worker loop) and report it without
knowing which layer raised it. Anything else that escapes is a programming error.

``exit_code`` is what a command exits with when the error reaches the command line: 2 for bad
input (a configuration, a trace, a scenario, a report's sources), 1 for a failure at run time.
"""

from __future__ import annotations

from enum import StrEnum
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


class UnreadableEvent(SeForwarderError, ValueError):
    """An Event Grid notification or Resource Graph row the collector cannot read (why, in one
    line): it is logged and counted, and the others go on."""


class StatusFileError(SeForwarderError):
    """``status.json`` exists but cannot be read or is not a JSON object."""


class Verdict(StrEnum):
    """What the delivery worker does with a batch after an answer."""

    DELIVERED = "delivered"  # confirmed: acknowledge it
    RETRY = "retry"  # transient: again, after the service's Retry-After or the fast schedule
    SLOW_RETRY = "slow_retry"  # a person or minutes must fix it (a role, a rule): the slow schedule
    SPLIT = "split"  # too large: send the two halves in turn
    REJECT = (
        "reject"  # this batch can never be accepted: isolate the refused record, dead-letter it
    )
    DEAD_LETTER = "dead_letter"  # the destination is gone for good: dead-letter the batch as it is


class DeliveryError(SeForwarderError):
    """A sink could not deliver a batch (or the rest of one), and what to do about it.

    ``verdict``: what the delivery worker does next (retry, retry slowly, split, reject the
    refused record, dead-letter); a sink finds it in its answer table
    (``se_forwarder.sinks.answers``). ``retry_after``: the service's own wait in seconds, when
    it gave one. ``Sink.send`` raises it when nothing of the batch was delivered; when a prefix
    was, ``send`` returns a ``SendResult`` that carries it for the rest.
    """

    def __init__(self, message: str, verdict: Verdict, *, retry_after: float | None = None):
        super().__init__(message)
        self.verdict = verdict
        self.retry_after = retry_after


class ScenarioError(SeForwarderError, ValueError):
    """A simulator scenario is invalid (test bed)."""

    exit_code = 2


class KubernetesError(SeForwarderError):
    """The Kubernetes API server could not be reached or refused a request (kube/api.py);
    ``status`` is its HTTP status when it answered (409 is a conflict: read again, retry)."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status
