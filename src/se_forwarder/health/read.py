"""Reading status.json back, tolerantly (a file from another version, or damaged), by the kinds
the declaration gives each field: a snapshot plus the problems found."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import fields
from typing import Any

from ..timefmt import parse_iso_ms
from .fields import Time, specs
from .snapshot import OpenEvent, SinkHealth, Snapshot


def parse_time(value: Any) -> float | None:
    """A status.json time as epoch seconds: ISO 8601 (``Z`` or offset; naive = UTC), epoch
    milliseconds (above 1e11) or epoch seconds. None/empty gives None; anything else ValueError."""
    if value is None or value == "":
        return None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if not math.isfinite(value):
            raise ValueError(f"not a time: {value!r}")
        return value / 1000.0 if abs(value) > 1e11 else float(value)
    if isinstance(value, str):
        return parse_iso_ms(value) / 1000.0
    raise ValueError(f"not a time: {value!r}")


def read(data: Mapping[str, Any], cls: type[Snapshot] = Snapshot) -> tuple[Snapshot, list[str]]:
    """A snapshot from status.json's object; unusable values become None, each time named in the
    returned problems (a bad time is a problem: it hides how fresh the status is)."""
    problems: list[str] = []
    values: dict[str, Any] = {}
    for name, spec in specs(cls):
        if name not in data:
            continue
        raw = data[name]
        if spec.kind is Time:
            try:
                values[name] = parse_time(raw)
            except (ValueError, TypeError):
                problems.append(f"{name} is not a valid time: {raw!r}")
        elif spec.kind is tuple:
            values[name] = tuple(_open_event(e) for e in raw or () if isinstance(e, dict)) \
                if isinstance(raw, (list, tuple)) else ()
        elif spec.kind is dict:
            values[name] = {str(k): _sink(v) for k, v in raw.items()
                            if isinstance(v, dict)} if isinstance(raw, dict) else {}
        else:
            values[name] = scalar(spec.kind, raw)
    return cls(**values), problems


def scalar(kind: type, raw: Any) -> Any:
    """``raw`` if it is a usable value of ``kind`` (an int for a float is fine), else None."""
    if raw is None:
        return None
    if kind is bool:
        return raw if isinstance(raw, bool) else None
    if isinstance(raw, bool):
        return None
    if kind is int:
        return raw if isinstance(raw, int) else None
    if kind is float:
        return float(raw) if isinstance(raw, (int, float)) and math.isfinite(raw) else None
    return raw if isinstance(raw, str) else str(raw)


def _open_event(e: Mapping[str, Any]) -> OpenEvent:
    return OpenEvent(**{f.name: e.get(f.name) for f in fields(OpenEvent)})


def _sink(v: Mapping[str, Any]) -> SinkHealth:
    """A sink's figures; an unusable one keeps its default (a count 0, anything else None)."""
    values: dict[str, Any] = {}
    for name, spec in specs(SinkHealth):
        raw = v.get(name)
        if spec.kind is Time:
            try:
                got = parse_time(raw)
            except (ValueError, TypeError):
                got = None
        else:
            got = scalar(spec.kind, raw) if spec.kind is not str or isinstance(raw, str) else None
        if got is not None:
            values[name] = got
    return SinkHealth(**values)
