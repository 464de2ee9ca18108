"""Where a receiver starts: the selector filter of its attach, as the service reads it.

The SDK sends ``apache.org:selector-filter:string`` with one of::

    amqp.annotation.x-opt-offset > '-1'            (the start of the partition)
    amqp.annotation.x-opt-offset > '@latest'       (only events enqueued from now on)
    amqp.annotation.x-opt-offset >= '1234'         (an offset: a byte position)
    amqp.annotation.x-opt-sequence-number > '41'
    amqp.annotation.x-opt-enqueued-time > '1700000000000'   (epoch milliseconds)

``>`` excludes the named event, ``>=`` includes it. A position past the partition's last event
is refused as the service refuses it ("The supplied offset '…' is invalid. The last offset in
the system is '…'"); an enqueued time in the future just waits for new events; a position
before the first retained event starts at the first retained event.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from .store import EventStore

SELECTOR = "apache.org:selector-filter:string"
_EXPR = re.compile(
    r"\s*amqp\.annotation\.(x-opt-offset|x-opt-sequence-number|x-opt-enqueued-time)"
    r"\s*(>=|>)\s*'([^']*)'\s*"
)


class BadPosition(Exception):
    """The filter names no position the partition has; ``condition`` is the service's."""

    def __init__(self, condition: str, description: str) -> None:
        super().__init__(description)
        self.condition = condition


ARGUMENT_OUT_OF_RANGE = "com.microsoft:argument-out-of-range"
ARGUMENT_ERROR = "com.microsoft:argument-error"


@dataclass(frozen=True)
class Position:
    field: str  # x-opt-offset, x-opt-sequence-number or x-opt-enqueued-time
    inclusive: bool
    value: str


def selector(filters: Any) -> str | None:
    """The selector expression in an attach's filter set (None when there is none)."""
    if not isinstance(filters, dict):
        return None
    for key, value in filters.items():
        if str(key) != SELECTOR:
            continue
        inner = getattr(value, "value", value)  # a described value, or the bare string
        return str(inner)
    return None


def parse(expression: str | None) -> Position | None:
    """The position a selector expression names; None for no filter (the partition's start)."""
    if expression is None:
        return None
    m = _EXPR.fullmatch(expression)
    if m is None:
        raise BadPosition(ARGUMENT_ERROR, f"The filter expression '{expression}' is not supported.")
    return Position(m.group(1), m.group(2) == ">=", m.group(3))


def _number(pos: Position) -> int:
    try:
        return int(pos.value)
    except ValueError:
        raise BadPosition(
            ARGUMENT_ERROR,
            f"The supplied {pos.field.removeprefix('x-opt-')} '{pos.value}' is not a number.",
        ) from None


def start(store: EventStore, hub: str, partition: str, pos: Position | None) -> int:
    """The sequence number of the first event the receiver gets."""
    if pos is None:
        return store.begin_sequence_number(hub, partition)
    if pos.field == "x-opt-offset" and pos.value == "@latest":
        return store.end_sequence_number(hub, partition)
    if pos.field == "x-opt-offset" and pos.value == "-1":
        return store.begin_sequence_number(hub, partition)
    n = _number(pos)
    last_seq, last_offset, _ = store.last_enqueued(hub, partition)
    if pos.field == "x-opt-enqueued-time":
        return store.first_matching(
            hub, partition, lambda e: e.enqueued_ms >= n if pos.inclusive else e.enqueued_ms > n
        )
    if pos.field == "x-opt-offset":
        if n > last_offset:
            raise BadPosition(
                ARGUMENT_OUT_OF_RANGE,
                f"The supplied offset '{n}' is invalid. "
                f"The last offset in the system is '{last_offset}'.",
            )
        return store.first_matching(
            hub, partition, lambda e: e.offset >= n if pos.inclusive else e.offset > n
        )
    if n > last_seq:
        raise BadPosition(
            ARGUMENT_OUT_OF_RANGE,
            f"The supplied sequence number '{n}' is invalid. "
            f"The last sequence number in the system is '{last_seq}'.",
        )
    first = max(n if pos.inclusive else n + 1, 0)
    return max(first, store.begin_sequence_number(hub, partition))
