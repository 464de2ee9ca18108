"""The sink conformance list: the answers every sink must classify the same way, and how each
service gives them (an HTTP response, a socket error, the Event Hubs SDK's public exception).

``EXPECTED`` is the one expectation. ``HTTP`` is what an HTTP service answers (Logs Ingestion and
the webhook get the same responses through their SDKs' transport interfaces); ``EVENT_HUBS`` is
what azure-eventhub raises for the same answer over AMQP, built with the SDK's own public
exception classes exactly as it builds them (the AMQP condition and description in ``details``):
``tests/sinks/test_sink_event_hubs.py`` checks against the Event Hubs stand-in that the SDK raises
these very classes with these very conditions, so the fast suite classifies what the SDK raises.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from helpers.fake_transports import Step, error_body
from se_forwarder.errors import DeliveryError, Verdict
from se_forwarder.sinks.base import SendResult


@dataclass(frozen=True)
class Expected:
    verdict: Verdict
    retry_after: float | None = None
    renews: bool = False  # a new credential for the next attempt
    # The verdict of a sink that has no credential to renew (a webhook URL, a connection string).
    without_renewal: Verdict | None = None


EXPECTED: dict[str, Expected] = {
    "200": Expected(Verdict.DELIVERED),
    "204": Expected(Verdict.DELIVERED),
    "400": Expected(Verdict.REJECT),
    "401": Expected(Verdict.RETRY, renews=True, without_renewal=Verdict.SLOW_RETRY),
    "403": Expected(Verdict.SLOW_RETRY, renews=True),
    "404": Expected(Verdict.SLOW_RETRY),
    "410": Expected(Verdict.SLOW_RETRY),
    "413": Expected(Verdict.SPLIT),
    "429 Retry-After: 7": Expected(Verdict.RETRY, retry_after=7.0),
    "500": Expected(Verdict.RETRY),
    "503 Retry-After: 2": Expected(Verdict.RETRY, retry_after=2.0),
    "connection reset": Expected(Verdict.RETRY),
    "timeout": Expected(Verdict.RETRY),
}

HTTP: dict[str, Step] = {
    "200": (200, {}, b""),
    "204": (204, {}, b""),
    "400": (400, {}, error_body("InvalidArgument", "Record 1: column Bogus is not in the stream")),
    "401": (401, {}, error_body("InvalidAuthenticationToken", "the token is expired")),
    "403": (403, {}, error_body("AuthorizationFailed", "no permission to ingest")),
    "404": (404, {}, error_body("NotFound", "no such thing")),
    "410": (410, {}, b"channel_is_archived"),
    "413": (413, {}, error_body("ContentLengthLimitExceeded", "over 1 MB")),
    "429 Retry-After: 7": (429, {"Retry-After": "7"}, error_body("TooManyRequests", "slow down")),
    "500": (500, {}, error_body("InternalServerError", "oops")),
    "503 Retry-After: 2": (503, {"Retry-After": "2"}, error_body("ServiceUnavailable", "busy")),
}


class AmqpError(Exception):
    """What the AMQP layer hands the Event Hubs SDK's exceptions as ``details``: a condition and a
    description, the two fields ``EventHubError.__init__`` reads (it keeps the condition after
    its namespace in the public ``error``)."""

    def __init__(self, condition: str, description: str) -> None:
        super().__init__(description)
        self.condition = condition.encode()
        self.description = description


def _eh(kind: str, condition: str | None, description: str) -> Callable[[], Exception]:
    def make() -> Exception:
        from azure.eventhub import exceptions

        cls = getattr(exceptions, kind)
        return cls(description, AmqpError(condition, description) if condition else None)

    return make


# Each answer as azure-eventhub raises it (the stand-in test checks the class and ``error``).
# 200/204 (Accepted) and a partial send are an SDK call that returns: only the stand-in has them.
EVENT_HUBS: dict[str, Callable[[], Exception]] = {
    "400": _eh(
        "EventDataSendError", "com.microsoft:argument-error", "The partition key is invalid."
    ),
    "401": _eh(
        "AuthenticationError",
        "amqp:client-error",
        "CBS Token authentication failed. Status code: 401",
    ),
    # The service accepts the token and refuses the link (the SDK: ConnectionLostError), as
    # users report it from Azure: "ConnectionLostError: Unauthorized access. 'Send' claim(s)...".
    "403": _eh(
        "ConnectionLostError",
        "amqp:unauthorized-access",
        "Unauthorized access. 'Send' claim(s) are required to perform this operation.",
    ),
    "404": _eh("ConnectError", "amqp:not-found", "The messaging entity 'nope' could not be found."),
    "410": _eh("EventDataSendError", "amqp:not-found", "The messaging entity was deleted."),
    "413": _eh(
        "EventDataSendError", "amqp:link:message-size-exceeded", "The message is too large."
    ),
    "429 Retry-After: 7": _eh(
        "EventDataSendError",
        "com.microsoft:server-busy",
        "The request was terminated because the entity is being throttled.",
    ),
    "500": _eh("EventDataSendError", "amqp:internal-error", "Internal error."),
    "503 Retry-After: 2": _eh(
        "EventDataSendError",
        "com.microsoft:server-busy",
        "The request was terminated because the entity is being throttled.",
    ),
    "connection reset": _eh(
        "ConnectError",
        "amqp:socket-error",
        "Can not read frame due to exception: Server unexpectedly closed connection",
    ),
    "timeout": _eh("OperationTimeoutError", None, "Sending message timed out."),
}


@dataclass(frozen=True)
class Failed:
    """The failure of a ``send`` that delivered nothing (``value``, as ``pytest.raises`` gives)."""

    value: DeliveryError


def nothing_delivered(result: SendResult, match: str | None = None) -> Failed:
    """``send`` returns its failures (it never raises for a batch it could not deliver): the
    result of one that delivered nothing, its failure (matching ``match``, a regex, if given)."""
    assert result.delivered == 0, result
    assert result.failure is not None, result
    if match is not None:
        assert re.search(match, str(result.failure)), str(result.failure)
    return Failed(result.failure)
