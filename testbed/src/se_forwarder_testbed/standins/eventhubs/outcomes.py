"""The AMQP error conditions the service answers with, and the two ways it answers with one:
a settled delivery, or a link attached and detached at once."""

from __future__ import annotations

import uuid

from proton import Condition, Delivery, Link, symbol

SERVER_BUSY = "com.microsoft:server-busy"
MESSAGE_SIZE_EXCEEDED = "amqp:link:message-size-exceeded"
UNAUTHORIZED = "amqp:unauthorized-access"
NOT_FOUND = "amqp:not-found"
DECODE_ERROR = "amqp:decode-error"


def error_condition(name: str, description: str | None) -> Condition:
    """An error condition carrying a tracking id, as every error of the service does."""
    return Condition(name, description, {symbol("com.microsoft:tracking-id"): uuid.uuid4().hex})


def settle(
    d: Delivery, state: int, condition: str | None = None, description: str | None = None
) -> None:
    """Settle ``d`` as ``state`` (Accepted, Rejected, ...), with an error condition if given."""
    if condition is not None:
        d.local.condition = error_condition(condition, description)
    d.update(state)
    d.settle()


def refuse(link: Link, condition: str, description: str) -> None:
    """Attach (echoing source and target, which the SDK requires) then detach with an error."""
    link.condition = error_condition(condition, description)
    link.open()
    link.close()
