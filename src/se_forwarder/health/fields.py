"""How one health field is declared: its meaning, how ``status.json`` is read back, which heartbeat
column carries it, which Prometheus metric exports it and whether ``status`` warns about it.

``Snapshot`` (health/snapshot.py) declares every field once with these helpers; status.json, the
heartbeat row, the metrics collector, ``status``'s warnings and the reading back of status.json
are all derived from that one declaration, so a new counter is one line there (and the code
that counts it, under the same name).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

SPEC = "health"  # the dataclass field metadata key


class Time(float):
    """The kind of a time field: epoch seconds in status.json (read back from ISO text too)."""


@dataclass(frozen=True, slots=True)
class Metric:
    """One Prometheus metric taken from a field (``value`` turns the field into a number)."""

    name: str  # without the ``se_forwarder_`` prefix (and without ``_total``)
    kind: str  # "counter" or "gauge"
    help: str
    value: Callable[[Any], float] | None = None


@dataclass(frozen=True, slots=True)
class HeartbeatColumn:
    """One heartbeat column (contract.json's heartbeat table) taken from a field."""

    name: str
    value: Callable[[Any], Any] | None = None


@dataclass(frozen=True, slots=True)
class Spec:
    doc: str
    kind: type  # int, float, bool, str, Time; nested kinds are read by their own readers
    columns: tuple[HeartbeatColumn, ...] = ()
    metrics: tuple[Metric, ...] = ()
    warn: str | None = None  # `status` warns "<n> record(s) <warn>" while the value is above 0


_C = TypeVar("_C", HeartbeatColumn, Metric)


def _field(default: Any, spec: Spec) -> Any:
    if callable(default):
        return dataclasses.field(default_factory=default, metadata={SPEC: spec})
    return dataclasses.field(default=default, metadata={SPEC: spec})


def _tuple(x: _C | tuple[_C, ...] | None) -> tuple[_C, ...]:
    return () if x is None else x if isinstance(x, tuple) else (x,)


def counter(
    doc: str,
    *,
    column: HeartbeatColumn | str | None = None,
    metric: Metric | str | None = None,
    warn: str | None = None,
    default: int | None = 0,
) -> Any:
    """A count since the agent started. ``metric`` as a name: a counter with ``doc`` as its
    help; ``column`` as a name: the value as it is."""
    col = HeartbeatColumn(column) if isinstance(column, str) else column
    met = Metric(metric, "counter", doc) if isinstance(metric, str) else metric
    return _field(default, Spec(doc, int, _tuple(col), _tuple(met), warn))


def value(
    kind: type,
    doc: str,
    *,
    default: Any = None,
    column: HeartbeatColumn | tuple[HeartbeatColumn, ...] | None = None,
    metric: Metric | tuple[Metric, ...] | None = None,
) -> Any:
    """Any other field: a state, a gauge, a time (``kind=Time``), a piece of information."""
    return _field(default, Spec(doc, kind, _tuple(column), _tuple(metric)))


@functools.cache
def specs(cls: type) -> tuple[tuple[str, Spec], ...]:
    """(field name, spec) of every declared field of ``cls``, in declaration order (worked out
    once per class: every heartbeat reads it, millions of them in the benchmarks' fleets)."""
    return tuple((f.name, f.metadata[SPEC]) for f in dataclasses.fields(cls) if SPEC in f.metadata)


def by_name(cls: type, source: Any) -> dict[str, Any]:
    """The fields of dataclass ``source`` that ``cls`` declares too, by name: how a part of the
    agent hands its counters to the snapshot without a mapping written out by hand."""
    kind: type = type(source)  # a plain ``type``: hashable, as the cache needs
    return {name: getattr(source, name) for name in _shared(cls, kind)}


@functools.cache
def _names(cls: type) -> tuple[str, ...]:
    """The field names of dataclass ``cls``, in order (worked out once per class: status.json is
    written every few seconds on every VM)."""
    return tuple(f.name for f in dataclasses.fields(cls))


@functools.cache
def _shared(cls: type, source: type) -> tuple[str, ...]:
    declared = set(_names(cls))
    return tuple(n for n in _names(source) if n in declared)
