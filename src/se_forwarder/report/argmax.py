"""duckdb-kql's ``arg_max`` / ``arg_min`` columns on DuckDB's fast path.

duckdb-kql translates each column of ``summarize arg_max(T, *) by RecordId`` into
``COALESCE(arg_max({'v': c}, T), any_value({'v': c}))['v']``: the struct keeps a null ``c``
(``arg_max`` skips null arguments) and ``any_value`` answers for a group whose ``T`` are all
null. At-least-once delivery makes that dedupe part of most queries, and over a heartbeat
table the struct aggregates were about half of each agent-health query's time. DuckDB's own
``arg_max_null(c, T)`` keeps a null ``c`` without the struct, on its fast path for plain types;
``first(c)`` is a row's value, null included, for the group with no ``T``:

    CASE WHEN max(T) IS NULL THEN first(c) ELSE arg_max_null(c, T) END

(``min`` and ``arg_min_null`` for ``arg_min``). Same row, same value, nulls and ties included
(tests/report/test_argmax.py compares both forms); each column stays its own aggregate, so DuckDB
still drops the ones a query never reads.

The rewrite works on the SQL text duckdb-kql returns and touches only items of exactly that
shape (outside quotes); anything else is left as it was.
"""

from __future__ import annotations

import re

_START = re.compile(r"COALESCE\((arg_max|arg_min)\(\{'v': ")
_EXTREME = {"arg_max": "max", "arg_min": "min"}


def fast(sql: str) -> str:
    """``sql`` with every such item rewritten (unchanged when there is none)."""
    if "any_value({'v': " not in sql:
        return sql
    out: list[str] = []
    i = 0
    while i < len(sql):
        c = sql[i]
        if c in "'\"":
            j = _past_quote(sql, i)
            out.append(sql[i:j])
            i = j
            continue
        m = _START.match(sql, i) if c == "C" else None
        got = _item(sql, m) if m else None
        if got is None:
            out.append(c)
            i += 1
            continue
        end, text = got
        out.append(text)
        i = end
    return "".join(out)


def _item(sql: str, m: re.Match) -> tuple[int, str] | None:
    """(end, replacement) of the item ``m`` starts, or None when it is not of that shape."""
    fn = m.group(1)
    value_end = _balanced(sql, m.end(), "}")
    if value_end is None or not sql.startswith(", ", value_end + 1):
        return None
    value = sql[m.end():value_end]
    order_end = _balanced(sql, value_end + 3, ")")
    if order_end is None:
        return None
    order = sql[value_end + 3:order_end]
    tail = f"), any_value({{'v': {value}}}))['v']"
    if not sql.startswith(tail, order_end):
        return None
    return order_end + len(tail), (f"CASE WHEN {_EXTREME[fn]}({order}) IS NULL THEN first({value}) "
                                   f"ELSE {fn}_null({value}, {order}) END")


def _balanced(sql: str, i: int, close: str) -> int | None:
    """Index of the ``close`` that ends the expression starting at ``i`` (at depth 0)."""
    depth = 0
    while i < len(sql):
        c = sql[i]
        if c in "'\"":
            i = _past_quote(sql, i)
            continue
        if depth == 0 and c == close:
            return i
        if c in "({[":
            depth += 1
        elif c in ")}]":
            if depth == 0:
                return None
            depth -= 1
        i += 1
    return None


def _past_quote(sql: str, i: int) -> int:
    """Index just past the string literal or quoted identifier at ``i`` (doubled quotes are
    part of it)."""
    quote, k = sql[i], i + 1
    while k < len(sql):
        if sql[k] == quote:
            if sql.startswith(quote * 2, k):
                k += 2
                continue
            return k + 1
        k += 1
    return len(sql)
