"""Values as a person reads them: UTC times to the minute, durations in d/h/m/s, reals to one
decimal, Kusto's timespan text as a duration, an unknown duration (-1 as served) said so, and
the ordering prefixes queries put on category labels ("1: ...") left out."""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any, TypeGuard

from ..workbooks.order import sortable

#: Kusto's timespan as text (``tostring(2d)`` is ``2.00:00:00``)
TIMESPAN = re.compile(r"(-?)(?:(\d+)\.)?(\d{2}):(\d{2}):(\d{2})(?:\.\d+)?")
#: an ordering key a query puts before a category ("3: within 1 min") so the categories sort
ORDER_PREFIX = re.compile(r"(\d+): (.+)")
#: a VM of a Uniform scale set: its name in the portal is ``<scale set>_<n>`` (a Flexible
#: instance's id is an ordinary VM's, whose last segment is already that name)
SCALE_SET_VM = re.compile(
    r"/virtualMachineScaleSets/([^/]+)/virtualMachines/([^/]+)$", re.IGNORECASE
)
UNKNOWN = "unknown"


def fmt(value: Any) -> str:
    """A value as a person reads it."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, datetime):
        return value.strftime("%Y-%m-%d %H:%M")
    if isinstance(value, timedelta):
        return duration(value.total_seconds())
    if isinstance(value, float):
        return f"{value:,.1f}" if abs(value) < 1e15 else f"{value:.3g}"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, (list, tuple)):
        return ", ".join(fmt(v) for v in value)
    if isinstance(value, dict):
        return ", ".join(f"{k}: {fmt(v)}" for k, v in value.items())
    text = str(value)
    span = TIMESPAN.fullmatch(text)
    if span:
        sign, days, h, m, s = span.groups()
        seconds = int(days or 0) * 86400 + int(h) * 3600 + int(m) * 60 + int(s)
        return duration(-seconds if sign else seconds)
    return text


def duration(seconds: float) -> str:
    s = round(abs(seconds))
    sign = "-" if seconds < 0 else ""
    d, rem = divmod(s, 86400)
    h, rem = divmod(rem, 3600)
    m, sec = divmod(rem, 60)
    if d:
        return f"{sign}{d}d {h}h"
    if h:
        return f"{sign}{h}h {m:02d}m"
    return f"{sign}{m}m {sec:02d}s" if m else f"{sign}{sec}s"


def is_duration_column(name: str) -> bool:
    """A column holding an event's DurationInSeconds (as served: -1 means unknown)."""
    return "duration" in name.lower()


def number(value: object) -> TypeGuard[int | float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def order_labels(values: Iterable[Any]) -> dict[str, str]:
    """{value: label} when every value is ``"<n>: <label>"`` (an ordering key a query put there
    so its categories sort): the label alone. Empty otherwise."""
    vals = list(values)
    if vals and all(isinstance(v, str) and ORDER_PREFIX.fullmatch(v) for v in vals):
        return {v: m.group(2) for v in vals if (m := ORDER_PREFIX.fullmatch(v))}
    return {}


def order_key(value: Any) -> tuple[Any, ...]:
    """Sorts ``"<n>: ..."`` labels by their number (``"10: ..."`` after ``"9: ..."``)."""
    if isinstance(value, str):
        m = ORDER_PREFIX.fullmatch(value)
        if m:
            return (0, int(m.group(1)), m.group(2))
    return (1, *sortable(value))


def resource_name(resource_id: str) -> str:
    """The name the portal shows for a resource id (a scale set's VM: ``<scale set>_<n>``)."""
    vmss = SCALE_SET_VM.search(resource_id.rstrip("/"))
    if vmss:
        return f"{vmss.group(1)}_{vmss.group(2)}"
    return resource_id.rstrip("/").rsplit("/", 1)[-1]
