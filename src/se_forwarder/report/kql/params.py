"""Workbook parameters, substituted into a query's text the way the Azure portal does it.

A workbook query holds ``{Name}`` / ``{Name:format}`` placeholders; the portal replaces them with
the parameter's current value before the query is sent. This is the one implementation of that
replacement: the engine uses it to run workbook items, the static KQL checks to analyze them.

Formats covered (the workbooks use nothing else):

* time range (type 4): ``{TimeRange}`` -> ``> ago(7d)``; ``{TimeRange:grain}`` -> the grain
  (``5m``, ``1h``, ``1d``...); ``:start`` / ``:end`` -> ``datetime(...)``; ``:label``;
* multi-select drop-down (type 2, ``multiSelect``): every value quoted with the parameter's
  ``quote`` and joined with its ``delimiter``; "all" is the ``selectAllValue`` (``'*'``);
* text (type 1): the text as typed; resource pickers (types 5 and 6): the resource id.

A drop-down whose choices come from a query and that saves no value opens on the choices its
query marks: the third column (``selected``), JavaScript-truthy, as the portal reads it
(``query_default``, ``selected_value``). The caller runs the query (``substitute``'s ``resolve``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)(?::([A-Za-z]+))?\}")

TEXT, DROPDOWN, TIME_RANGE, RESOURCE, RESOURCE_TYPE = 1, 2, 4, 5, 6


class UnknownParameter(KeyError):
    """A placeholder names no parameter of the workbook."""


@dataclass(frozen=True, slots=True)
class TimeRange:
    """A relative time range (``Last 7 days``) and the grain charts bin by."""

    duration: timedelta
    grain: timedelta

    def kql_duration(self) -> str:
        return kql_timespan(self.duration)


def kql_timespan(span: timedelta) -> str:
    """A timespan literal: the largest whole unit (``7d``, ``12h``, ``5m``, ``30s``)."""
    seconds = int(span.total_seconds())
    if seconds != span.total_seconds() or seconds <= 0:
        raise ValueError(f"not a positive whole number of seconds: {span}")
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def default_grain(duration: timedelta) -> timedelta:
    """The grain the portal picks for a range when none is chosen (about 100-300 points)."""
    for limit, grain in (
        (timedelta(hours=1), timedelta(minutes=1)),
        (timedelta(hours=12), timedelta(minutes=5)),
        (timedelta(days=2), timedelta(minutes=15)),
        (timedelta(days=7), timedelta(hours=1)),
    ):
        if duration <= limit:
            return grain
    return timedelta(days=1) if duration > timedelta(days=14) else timedelta(hours=6)


def declared(workbook: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Every parameter a workbook declares (in parameter items, nested groups included)."""
    out: dict[str, dict[str, Any]] = {}

    def walk(items: Sequence[Mapping[str, Any]]) -> None:
        for item in items:
            if item.get("type") == 12:
                walk(item.get("content", {}).get("items", []))
            elif item.get("type") == 9:
                for prm in item.get("content", {}).get("parameters", []):
                    if prm["name"] in out:
                        raise ValueError(f"parameter {prm['name']} declared twice")
                    out[prm["name"]] = dict(prm)

    walk(workbook.get("items", []))
    return out


def placeholders(text: str) -> set[str]:
    return {m.group(1) for m in PLACEHOLDER.finditer(text)}


def substitute(
    text: str,
    params: Mapping[str, Mapping[str, Any]],
    values: Mapping[str, Any] | None = None,
    now: datetime | None = None,
    resolve: Callable[[str], Any] | None = None,
) -> str:
    """Replace every placeholder with its parameter's value in ``values`` (by name), or with the
    value the workbook opens with when ``values`` has none: the saved one, or for a query-driven
    default (``query_default``) ``resolve(name)`` (without ``resolve``: no value, ``""``).

    Values: ``TimeRange`` for a time range, a list of strings (or ``None`` for "all") for a
    multi-select, a string for text and resource parameters. ``now`` is needed only by
    ``{TimeRange:start}`` and ``{TimeRange:end}`` (the range ends at ``now``).
    """
    values = values or {}

    def repl(m: re.Match[str]) -> str:
        name, fmt = m.group(1), m.group(2)
        prm = params.get(name)
        if prm is None:
            raise UnknownParameter(name)
        if name in values:
            value = values[name]
        elif resolve is not None and query_default(prm):
            value = resolve(name)
        else:
            value = saved_value(prm)
        return _format(prm, value, fmt, now)

    return PLACEHOLDER.sub(repl, text)


def query_default(prm: Mapping[str, Any]) -> bool:
    """A drop-down that opens on what its query selects: choices from a query, no saved value."""
    return (
        prm.get("type") == DROPDOWN
        and bool(prm.get("query"))
        and prm.get("value", prm.get("defaultValue")) is None
    )


def selected_value(prm: Mapping[str, Any], rows: Sequence[Mapping[str, Any]]) -> Any:
    """The value the portal selects from a drop-down query's rows: the first column of the rows
    whose third column is truthy (JavaScript: not 0, false, null or ""); a single select takes
    the first such row. None selected: no value (``""``; a multi-select: none)."""
    chosen = [
        str(next(iter(r.values())))
        for r in rows
        if len(r) >= 3 and list(r.values())[2] not in (None, False, 0, "")
    ]
    if prm.get("multiSelect"):
        return chosen
    return chosen[0] if chosen else ""


def saved_value(prm: Mapping[str, Any]) -> Any:
    """The value a parameter has when the workbook opens (its saved ``value``)."""
    ptype, value = prm.get("type"), prm.get("value", prm.get("defaultValue"))
    if ptype == TIME_RANGE:
        duration = timedelta(milliseconds=(value or {}).get("durationMs", 86_400_000))
        return TimeRange(duration, default_grain(duration))
    if ptype == DROPDOWN and prm.get("multiSelect"):
        chosen = value if isinstance(value, list) else [value]
        return None if not chosen or "value::all" in chosen else chosen
    return "" if value is None else str(value)


def _format(prm: Mapping[str, Any], value: Any, fmt: str | None, now: datetime | None) -> str:
    ptype = prm.get("type")
    if ptype == TIME_RANGE:
        return _time_range(value, fmt, now)
    if fmt is not None:
        raise ValueError(f"format :{fmt} is not supported for parameter {prm['name']}")
    if ptype == DROPDOWN and prm.get("multiSelect"):
        quote, delimiter = str(prm.get("quote", "")), str(prm.get("delimiter", ","))
        chosen = (
            [prm.get("typeSettings", {}).get("selectAllValue", "*")]
            if value is None
            else list(value)
        )
        return delimiter.join(f"{quote}{v}{quote}" for v in chosen)
    return str(value)


def _time_range(value: TimeRange, fmt: str | None, now: datetime | None) -> str:
    if fmt is None:
        return f"> ago({value.kql_duration()})"
    if fmt == "grain":
        return kql_timespan(value.grain)
    if fmt == "label":
        return f"Last {value.kql_duration()}"
    if fmt in ("start", "end"):
        if now is None:
            raise ValueError(f"{{TimeRange:{fmt}}} needs the moment the range ends (now=)")
        moment = now - value.duration if fmt == "start" else now
        return f"datetime({moment.strftime('%Y-%m-%dT%H:%M:%SZ')})"
    raise ValueError(f"unknown time range format :{fmt}")
