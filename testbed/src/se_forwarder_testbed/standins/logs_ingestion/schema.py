"""Records checked against their stream's declaration (the columns of contract.json): every
column declared, every value of its column's type; long values truncated as the service does."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from .answers import Answer

_INT_RANGE = {"int": (-(2**31), 2**31 - 1), "long": (-(2**63), 2**63 - 1)}
_ACCEPTED = {
    "string": frozenset({str}),
    "datetime": frozenset({str}),
    "int": frozenset({int}),
    "long": frozenset({int}),
    "real": frozenset({int, float}),
    "bool": frozenset({bool}),
    "dynamic": frozenset({str, int, float, bool, list, dict}),
}


def validate(
    logs: list[Any], declaration: dict[str, str], stream: str, dcr_id: str, max_field: int
) -> tuple[list[dict[str, Any]], int]:
    """Check every record against the stream declaration (all or nothing); truncate long fields.

    The records are the freshly parsed request body, so long values are cut in place. Returns
    them and how many values were truncated.
    """
    max_chars = max_field // 4  # a value of at most this many characters fits in any encoding
    truncated = 0
    for i, rec in enumerate(logs):
        if type(rec) is not dict:
            raise Answer(
                400,
                "InvalidPayload",
                f"Record {i} is {json_type(rec)}; each element of the array must be an object.",
            )
        if "TimeGenerated" in declaration and rec.get("TimeGenerated") is None:
            # Every Log Analytics table needs a valid datetime TimeGenerated (see the package
            # docstring for Microsoft's pages): a row without one cannot be stored.
            raise Answer(
                400,
                "InvalidPayload",
                f"Record {i}: column 'TimeGenerated' is missing; every row needs a valid "
                "datetime TimeGenerated.",
            )
        for name, value in rec.items():
            kind = declaration.get(name)
            if kind is None:
                raise Answer(
                    400,
                    "InvalidPayload",
                    f"Record {i}: column '{name}' is not declared in stream '{stream}' of "
                    f"data collection rule '{dcr_id}'.",
                )
            if value is None:
                continue
            t = type(value)
            if t in _ACCEPTED[kind]:  # the fast check, inline: it runs for every value
                if t is int and kind in _INT_RANGE:
                    lo, hi = _INT_RANGE[kind]
                    ok = lo <= value <= hi
                elif kind == "datetime":
                    ok = _is_datetime(value)
                else:
                    ok = True
            else:
                ok = False
            if not ok:
                problem = _type_problem(kind, value) or "not accepted"
                raise Answer(
                    400,
                    "InvalidPayload",
                    f"Record {i}: column '{name}' of type '{kind}' cannot hold "
                    f"{_preview(value)}: {problem}.",
                )
            if t is str:
                if len(value) > max_chars:
                    cut = _truncate(value, max_field)
                    if cut is not value:
                        rec[name], truncated = cut, truncated + 1
            elif t is dict or t is list:  # dynamic
                text = json.dumps(value, ensure_ascii=False)
                if len(text) > max_chars and len(text.encode("utf-8")) > max_field:
                    rec[name], truncated = _truncate(text, max_field), truncated + 1
    return logs, truncated


def json_type(value: Any) -> str:
    """A JSON value's type as a message names it ("a string", "an array", ...)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"


def _preview(value: Any) -> str:
    text = json.dumps(value)
    return f"{json_type(value)} {text if len(text) <= 60 else text[:57] + '...'}"


def _type_problem(kind: str, value: Any) -> str | None:
    """Why ``value`` (not null) does not fit a column of contract type ``kind``; None if it does."""
    if kind == "string":
        return None if isinstance(value, str) else "expected a string"
    if kind == "dynamic":
        return None
    if kind == "real":
        return (
            None
            if isinstance(value, (int, float)) and not isinstance(value, bool)
            else "expected a number"
        )
    if kind in _INT_RANGE:
        if isinstance(value, bool) or not isinstance(value, int):
            return "expected an integer"
        lo, hi = _INT_RANGE[kind]
        return None if lo <= value <= hi else f"out of the range of {kind}"
    if kind == "bool":
        return None if isinstance(value, bool) else "expected true or false"
    if kind == "datetime":
        if not isinstance(value, str):
            return "expected an ISO 8601 date and time string"
        return None if _is_datetime(value) else "not an ISO 8601 date and time"
    return f"unknown column type {kind!r}"


def _is_datetime(text: str) -> bool:
    try:
        datetime.fromisoformat(text)
    except ValueError:
        return False
    return True


def _truncate(text: str, max_bytes: int) -> str:
    raw = text.encode("utf-8")
    if len(raw) <= max_bytes:
        return text
    return raw[:max_bytes].decode("utf-8", errors="ignore")
