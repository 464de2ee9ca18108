"""Time as integer milliseconds since the epoch (exact, deterministic) and its contract format."""

from __future__ import annotations

from datetime import datetime, timezone
from email.utils import parsedate_to_datetime

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def format_ms(ms: int | None) -> str | None:
    """ISO 8601 UTC with milliseconds and ``Z``, as every datetime column is written."""
    if ms is None:
        return None
    secs, milli = divmod(ms, 1000)
    return datetime.fromtimestamp(secs, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S") + f".{milli:03d}Z"


def parse_iso_ms(text: str) -> int:
    """Parse ISO 8601 (``Z`` or offset; naive means UTC). Raises ValueError."""
    dt = datetime.fromisoformat(text)
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    return to_ms(dt)


def parse_not_before_ms(text: str) -> int | None:
    """NotBefore in RFC 1123 (current api-versions) or ISO 8601 (2017 preview).

    Returns None for an empty value; raises ValueError when it is neither format.
    """
    text = text.strip()
    if not text:
        return None
    if text[0].isdigit():
        return parse_iso_ms(text)
    try:
        dt = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError) as exc:
        raise ValueError(f"NotBefore {text!r} is neither RFC 1123 nor ISO 8601") from exc
    if dt is None:
        raise ValueError(f"NotBefore {text!r} is neither RFC 1123 nor ISO 8601")
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    return to_ms(dt)


def to_ms(dt: datetime) -> int:
    delta = dt - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000


def seconds_between(later_ms: int, earlier_ms: int) -> float:
    return (later_ms - earlier_ms) / 1000.0
