"""A ``let`` that several queries of one report define alike, computed once and read as a table.

The workbooks repeat the same definitions (``dashboards/definitions``: vm-state, event-state) in
many items, each rebuilt over 14 days of heartbeats; Log Analytics caches nothing between items,
and neither does DuckDB. The report knows every query it will run before it runs any, so
``Plan`` counts, for each tabular ``let`` of each query, its *closure*: the ``let`` with every
statement it depends on, comments dropped, blanks collapsed, independent lets in a canonical
order and a workbook filter whose parameter holds every value (``'*'``) left out (the same text
is the same definition), with the query's time range. A ``let`` whose closure recurs in two
queries or more is computed once (``rewrite`` hands its closure to ``materialize``, which stores
the rows as a table) and every query reads that table instead: the same rows, since the
closure, the moment and the time range are the same (a stored function in Log Analytics,
evaluated once).

Only lets that reduce rows (``summarize``, ``join``, ``distinct``, ``make-series``) are stored: a
filter of a table is as cheap to read again. Lets whose rows carry an order or draw on chance
(``order by``, ``top``, ``take``, ``serialize``, ``prev()``, ``rand()``, ...) are never stored:
a table keeps no order. Nor are lets that keep a row per row they read (a dedupe by
``RecordId``, an ``mv-expand``): writing them costs more than computing them again. From a
query's result, the lets it reads are visited top down: a shared let is stored whole, and inside
it only a dependency that more queries share is stored apart; the rewritten query keeps only
the statements it still reads.
"""

from __future__ import annotations

import heapq
import re
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import timedelta

from .shims import skip_literal, split_top

_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:-[A-Za-z]+)*")
_LET = re.compile(r"let\s+([A-Za-z_][A-Za-z0-9_]*)\s*=\s*(.*)\Z", re.DOTALL)
#: a let with one of these words reduces rows: worth storing when shared
REDUCING = frozenset({"summarize", "join", "distinct", "make-series"})
#: ... and with one of these it is never stored (its rows' order matters, or are not repeatable)
UNSTORABLE = frozenset(
    {
        "order",
        "sort",
        "top",
        "top-nested",
        "top-hitters",
        "take",
        "limit",
        "serialize",
        "sample",
        "sample-distinct",
        "prev",
        "next",
        "row_number",
        "row_cumsum",
        "row_rank_dense",
        "row_rank_min",
        "rand",
        "new_guid",
        "materialize",
        "view",
        "scan",
        "fork",
        "facet",
        "evaluate",
    }
)

#: a let that keeps a row per row it reads (the contract's at-least-once dedupe by RecordId, an
#: expansion): storing it costs more than computing it again (measured: 5x at 1,040 VMs)
_ROW_PER_ROW = re.compile(r"\bby RecordId\b|\bmv-(?:expand|apply)\b")
#: a workbook filter whose parameter holds every value (``{Zone}`` saved as ``'*'``): no filter
_ALL = re.compile(r" ?\| where '\*' in \('\*'\) or [A-Za-z_][A-Za-z0-9_]* in \('\*'\)(?= ?[|;)]|$)")

Key = tuple[str, timedelta | None]


@dataclass(frozen=True, slots=True)
class Statement:
    text: str  # normalized: no comments, blanks collapsed
    name: str | None  # the let's name; None for another statement (set, declare, ...)
    words: frozenset[str]  # identifiers and keywords outside literals


def normalize(text: str) -> str:
    """``text`` without comments, every run of blanks outside literals one space."""
    out: list[str] = []
    i = 0
    while i < len(text):
        j = skip_literal(text, i)
        if j > i:
            comment = text.startswith("//", i)
            out.append(" " if comment else text[i:j])
            i = j
        else:
            out.append(" " if text[i].isspace() else text[i])
            i += 1
        if out[-1] == " " and len(out) > 1 and out[-2] == " ":
            out.pop()
    text = "".join(out).strip()
    masked = _masked(text)
    return "".join(text[a:b] for a, b in _kept(len(text), _ALL.finditer(masked)))


def _masked(text: str) -> str:
    """``text`` with every string literal's characters replaced by NUL, but for ``'*'`` (the
    value a workbook filter holds when it holds every value): the same length, so a pattern
    found in it is at the same place in ``text``, and never inside a literal."""
    out, i = [], 0
    while i < len(text):
        j = skip_literal(text, i)
        if j > i:
            out.append(text[i:j] if text[i:j] == "'*'" else "\0" * (j - i))
            i = j
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def _kept(length: int, dropped: Iterable[re.Match[str]]) -> list[tuple[int, int]]:
    """The spans of ``range(length)`` outside the ``dropped`` matches."""
    spans, at = [], 0
    for m in dropped:
        spans.append((at, m.start()))
        at = m.end()
    spans.append((at, length))
    return spans


def split(text: str) -> tuple[list[Statement], str]:
    """The query's statements (top-level ``;``) and its final tabular expression."""
    parts = [p.strip() for p in split_top(normalize(text), ";")]
    parts = [p for p in parts if p]
    body = parts.pop() if parts else ""
    return [_statement(p) for p in parts], body


def _statement(text: str) -> Statement:
    m = _LET.match(text)
    return Statement(text, m.group(1) if m else None, _words(text))


def _words(text: str) -> frozenset[str]:
    """The identifiers and keywords of ``text`` outside its literals (``_masked``)."""
    found: set[str] = set()
    masked = _masked(text)
    for m in _WORD.finditer(masked):
        i = m.start()
        if i == 0 or not (masked[i - 1].isalnum() or masked[i - 1] == "_"):
            found.add(m.group(0))
            found.update(m.group(0).split("-"))
    return frozenset(found)


class _Query:
    """One query's statements, each let's dependencies and closure."""

    def __init__(self, text: str) -> None:
        self.statements, self.body = split(text)
        self.deps: list[set[int]] = []
        latest: dict[str, int] = {}
        for k, st in enumerate(self.statements):
            self.deps.append({latest[w] for w in st.words if w in latest})
            if st.name:
                latest[st.name] = k
        self.latest = latest
        self.body_deps = {latest[w] for w in _words(self.body) if w in latest}

    def closure(self, k: int) -> str:
        """Statement ``k`` with everything it needs, then its name: a query of its rows."""
        need, todo = set(), [k]
        while todo:
            at = todo.pop()
            if at not in need:
                need.add(at)
                todo.extend(self.deps[at])
        others = [st.text for at, st in enumerate(self.statements) if at < k and st.name is None]
        return "; ".join([*others, *self._ordered(need)]) + f"; {self.statements[k].name}"

    def _ordered(self, need: set[int]) -> list[str]:
        """The texts of the lets ``need``, each after those it reads, independent ones in the
        order of their text: two queries that define the same lets in another order give the
        same closure. In their own order when a name is defined twice (order matters then)."""
        names = [self.statements[at].name for at in need]
        if len(set(names)) < len(names):
            return [self.statements[at].text for at in sorted(need)]
        left = {at: set(self.deps[at]) & need for at in need}
        ready = [(self.statements[at].text, at) for at, deps in left.items() if not deps]
        heapq.heapify(ready)
        out: list[str] = []
        while ready:
            text, at = heapq.heappop(ready)
            out.append(text)
            for other, deps in left.items():
                if at in deps:
                    deps.discard(at)
                    if not deps:
                        heapq.heappush(ready, (self.statements[other].text, other))
        return out

    def storable(self, k: int) -> bool:
        st = self.statements[k]
        return (
            st.name is not None
            and bool(st.words & REDUCING)
            and not st.words & UNSTORABLE
            and not _ROW_PER_ROW.search(_masked(st.text))
            and (let := _LET.match(st.text)) is not None  # a named statement is a let
            and not let.group(2).startswith("(")
        )


class Plan:
    """Which lets the queries of a report share; ``rewrite`` reads them from stored tables."""

    def __init__(self, queries: Iterable[tuple[str, timedelta | None]] = ()) -> None:
        self.counts: Counter[Key] = Counter()
        for text, timespan in queries:
            try:
                q = _Query(text)
            except ValueError:  # an unterminated literal: the query fails when it runs
                continue
            self.counts.update(
                {(q.closure(k), timespan) for k in range(len(q.statements)) if q.storable(k)}
            )

    def rewrite(
        self,
        text: str,
        timespan: timedelta | None,
        materialize: Callable[[str], str],
        floor: int = 1,
    ) -> str:
        """``text`` with each shared let it reads replaced by the table ``materialize(closure)``
        names (``materialize`` stores the closure's rows, or returns the table it stored
        before). Only lets shared by more than ``floor`` queries are stored."""
        if not self.counts:
            return text
        q = _Query(text)
        stored: dict[int, str] = {}
        seen: set[int] = set()
        todo = sorted(q.body_deps, reverse=True)
        while todo:
            k = todo.pop()
            if k in seen:
                continue
            seen.add(k)
            closure = q.closure(k)
            count = self.counts.get((closure, timespan), 0)
            if count > floor and q.storable(k):
                inner = self.rewrite(closure, timespan, materialize, count)
                stored[k] = materialize(inner)
            else:
                todo.extend(sorted(q.deps[k], reverse=True))
        if not stored:
            return text
        # what the result still reads: a stored let reads nothing (translating the rest, a
        # hundred lines, would cost more than running it)
        need, todo = set(), list(q.body_deps)
        while todo:
            k = todo.pop()
            if k not in need:
                need.add(k)
                todo.extend(() if k in stored else q.deps[k])
        lines = [
            f"let {st.name} = {stored[k]}" if k in stored else st.text
            for k, st in enumerate(q.statements)
            if k in need or st.name is None
        ]
        return "; ".join([*lines, q.body])
