"""What is kept of a text value from outside (IMDS, Event Grid, Resource Graph): lone surrogates
(valid JSON escapes, not valid UTF-8) replaced, and at most ``MAX_VALUE_BYTES`` of UTF-8 kept,
with a marker saying how long it was. The callers count each value cut (``TruncatedValues``,
the collector's ``truncated_values``): a value is cut, never dropped or refused whole."""

from __future__ import annotations

import re
from collections.abc import Iterable

MAX_VALUE_BYTES = 32 * 1024  # well inside Logs Ingestion's 64 KB per value, escapes included

_SURROGATE = re.compile("[\ud800-\udfff]")


def clean(text: str) -> str:
    """Lone surrogates become U+FFFD (they cannot be encoded as UTF-8 on the way out)."""
    return _SURROGATE.sub("\ufffd", text) if _SURROGATE.search(text) else text


def cap(text: str, limit: int = MAX_VALUE_BYTES) -> tuple[str, int]:
    """The value kept, and its size in bytes when it was cut (0: kept whole)."""
    text = clean(text)
    if len(text) <= limit // 4:  # fits whatever its characters
        return text, 0
    data = text.encode("utf-8")
    if len(data) <= limit:
        return text, 0
    marker = f" [truncated: {len(data)} bytes]"
    return data[: limit - len(marker)].decode("utf-8", "ignore") + marker, len(data)


def cap_names(names: Iterable[str], limit: int = MAX_VALUE_BYTES) -> tuple[tuple[str, ...], bool]:
    """A list of names (one dynamic value) kept whole up to ``limit`` bytes of JSON; True when
    a name or the list was cut."""
    out: list[str] = []
    total, cut = 2, False
    for name in names:
        kept, size = cap(name, limit)
        cut = cut or bool(size)
        total += len(kept.encode("utf-8")) + 3
        if total > limit:
            cut = True
            break
        out.append(kept)
    return tuple(out), cut
