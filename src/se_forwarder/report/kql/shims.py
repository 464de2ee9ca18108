"""Small rewrites of KQL text for what duckdb-kql lacks, each equivalent in Kusto's semantics.

The queries are written for Log Analytics; a few functions they rightly use have no mapping in
duckdb-kql. Rather than bending the queries, the engine rewrites those calls into forms it runs,
with the same answer:

* ``ingestion_time()`` -> the hidden column ``_IngestionTime`` the engine loads with every row
  (Log Analytics' own ingestion time of the row; duckdb-kql has no notion of it);
* ``make_set_if(x, p[, n])`` -> ``make_set(iif(p, x, dynamic(null))[, n])``; ``take_anyif``,
  ``maxif``, ``minif`` likewise: the aggregate skips nulls, so rows where ``p`` is false
  do not count, exactly as the ``-if`` form;
* a multi-line string literal ``` ``` ...``` ``` -> the verbatim literal ``@"..."`` (duckdb-kql
  keeps the backticks as text).

Rewrites skip string literals and comments, so text inside them is never touched.
"""

from __future__ import annotations

import re
from functools import lru_cache

INGESTION_COLUMN = "_IngestionTime"

_IF_AGGREGATES = {
    "make_set_if": "make_set",
    "take_anyif": "take_any",
    "maxif": "max",
    "minif": "min",
}
_CALL = re.compile(r"\b(ingestion_time|make_set_if|take_anyif|maxif|minif)\s*\(")


@lru_cache(maxsize=1024)
def rewrite(text: str) -> str:
    """The query with every shimmed construct replaced (see the module docstring); kept per
    text: an alert is run at hundreds of moments, and this walks the text a character at a
    time (a tenth of a small fleet's evaluation)."""
    out: list[str] = []
    i = 0
    while i < len(text):
        j = skip_literal(text, i)
        if j > i:
            out.append(_literal(text[i:j]))
            i = j
            continue
        m = _CALL.match(text, i)
        if m and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            end = _closing(text, m.end() - 1)
            args = split_top(text[m.end() : end], ",")
            out.append(_replace(m.group(1), [rewrite(a) for a in args]))
            i = end + 1
            continue
        out.append(text[i])
        i += 1
    return "".join(out)


def _replace(name: str, args: list[str]) -> str:
    if name == "ingestion_time":
        if any(a.strip() for a in args):
            raise ValueError("ingestion_time() takes no argument")
        return INGESTION_COLUMN
    if len(args) < 2:
        raise ValueError(f"{name}() needs a value and a predicate")
    value, pred, *rest = args
    inner = f"iif({pred.strip()}, {value.strip()}, dynamic(null))"
    return f"{_IF_AGGREGATES[name]}({', '.join([inner, *(r.strip() for r in rest)])})"


def _literal(token: str) -> str:
    if token.startswith("```"):
        return '@"' + token[3:-3].replace('"', '""') + '"'
    return token


def skip_literal(text: str, i: int) -> int:
    """End of the string literal or comment starting at ``i`` (``i`` itself when none)."""
    if text.startswith("//", i):
        end = text.find("\n", i)
        return len(text) if end < 0 else end
    if text.startswith("```", i):
        end = text.find("```", i + 3)
        if end < 0:
            raise ValueError("unterminated ``` string literal")
        return end + 3
    verbatim = text[i] in "@" and i + 1 < len(text) and text[i + 1] in "'\""
    start = i + 1 if verbatim else i
    if start >= len(text) or text[start] not in "'\"":
        return i
    quote, k = text[start], start + 1
    while k < len(text):
        if text[k] == quote:
            if verbatim and text.startswith(quote * 2, k):
                k += 2
                continue
            return k + 1
        k += 1 if verbatim or text[k] != "\\" else 2
    raise ValueError("unterminated string literal")


def _closing(text: str, open_at: int) -> int:
    """Index of the parenthesis closing the one at ``open_at``."""
    depth, k = 0, open_at
    while k < len(text):
        j = skip_literal(text, k)
        if j > k:
            k = j
            continue
        depth += {"(": 1, ")": -1}.get(text[k], 0)
        if depth == 0:
            return k
        k += 1
    raise ValueError("unbalanced parentheses")


def split_top(text: str, sep: str) -> list[str]:
    """``text`` cut at each ``sep`` outside brackets and string literals (the pieces unstripped)."""
    args, depth, start, k = [], 0, 0, 0
    while k < len(text):
        j = skip_literal(text, k)
        if j > k:
            k = j
            continue
        c = text[k]
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif c == sep and depth == 0:
            args.append(text[start:k])
            start = k + 1
        k += 1
    args.append(text[start:])
    return args
