"""Time as integer milliseconds since the epoch (exact, deterministic) and its contract format."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime
from typing import overload

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
# The range every datetime column can be written in (years 0001..9999 UTC); parsing refuses
# anything outside it, so a hostile NotBefore or trace time can never crash ``format_ms``.
MIN_MS = -62_135_596_800_000  # 0001-01-01T00:00:00.000Z
MAX_MS = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z


@overload
def format_ms(ms: int) -> str: ...
@overload
def format_ms(ms: None) -> None: ...
@overload
def format_ms(ms: int | None) -> str | None: ...
def format_ms(ms: int | None) -> str | None:
    """ISO 8601 UTC with milliseconds and ``Z``, as every datetime column is written."""
    if ms is None:
        return None
    dt = _EPOCH + timedelta(milliseconds=ms)  # exact, and the same on every platform
    return (
        f"{dt.year:04d}-{dt.month:02d}-{dt.day:02d}T{dt.hour:02d}:{dt.minute:02d}:"
        f"{dt.second:02d}.{dt.microsecond // 1000:03d}Z"
    )


def parse_iso_ms(text: str) -> int:
    """Parse ISO 8601 (``Z``, ``z`` or an offset; naive means UTC). Raises ValueError. The one
    ISO reader of the agent: NotBefore, traces, status.json, the hooks' times."""
    text = text.strip()
    if text.endswith(("Z", "z")):
        text = text[:-1] + "+00:00"
    dt = datetime.fromisoformat(text)
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return to_ms(dt)


def parse_http_date_ms(text: str) -> int:
    """Parse an HTTP date (RFC 1123, as NotBefore and Retry-After are written; no zone means
    UTC). Raises ValueError."""
    try:
        dt = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError) as exc:
        raise ValueError(f"{text!r} is not an HTTP date") from exc
    if dt is None:  # some Python versions return None instead of raising
        raise ValueError(f"{text!r} is not an HTTP date")
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
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
        return parse_http_date_ms(text)
    except ValueError as exc:
        raise ValueError(f"NotBefore {text!r} is neither RFC 1123 nor ISO 8601") from exc


def to_ms(dt: datetime) -> int:
    """Epoch milliseconds; raises ValueError outside the writable range (years 0001..9999 UTC)."""
    delta = dt - _EPOCH
    ms = (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000
    if not MIN_MS <= ms <= MAX_MS:
        raise ValueError(f"{dt.isoformat()} is outside years 0001..9999 UTC")
    return ms


def seconds_between(later_ms: int, earlier_ms: int) -> float:
    return (later_ms - earlier_ms) / 1000.0
