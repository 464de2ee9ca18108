"""Rows in the order the portal shows a grid's: its ``sortBy`` keys, numbers and times by value,
the rest as text, empty cells last. The report's drill-downs (``execute``) and its tables
(``render.panels``) read the same order."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any


def sortable(value: Any) -> tuple[int, Any]:
    if value is None:
        return (2, "")
    return (0, value) if isinstance(value, (int, float, datetime, timedelta)) else (1, str(value))


def sort_rows(
    rows: Iterable[Mapping[str, Any]], sort_by: Sequence[Mapping[str, Any]]
) -> list[Mapping[str, Any]]:
    """Rows in a grid's ``sortBy`` order (``sortOrder`` 2: descending), as the portal shows them."""
    out = list(rows)
    for s in reversed(sort_by):
        out.sort(key=lambda r: sortable(r.get(s["itemKey"])), reverse=s.get("sortOrder") == 2)
    return out
