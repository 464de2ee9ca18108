"""Text for a person's terminal: what a peer served is shown, never obeyed.

An EventId, a Description or an error served by IMDS (or a sink) can hold a newline, an escape
sequence that clears the screen or sets the window's title, or a carriage return that writes
over a line already shown. Every human-facing line goes through ``safe``: C0 and C1 control
characters (and DEL) are shown as escapes (``\\n``, ``\\x1b``), the rest as it is. JSON output
needs nothing: its encoder escapes them already.
"""

from __future__ import annotations

import re

_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(m: re.Match[str]) -> str:
    c = m.group(0)
    return _NAMED.get(c) or f"\\x{ord(c):02x}"


def safe(text: str) -> str:
    """``text`` as one line, its control characters shown, not acted on."""
    return _CONTROL.sub(_escape, text)


def lines(text: str) -> str:
    """Several lines: each made ``safe``, the line breaks kept."""
    return "\n".join(safe(line) for line in text.split("\n"))
