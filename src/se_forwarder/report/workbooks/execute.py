"""Every item of a workbook plan executed as the portal would, each result kept with the reason
when there is none.

* Log Analytics items run in the engine with their time range and the workbook's saved
  parameter values (``Engine.run``: ``params`` substitution, ``now``, the time range); the
  charts' grain is the one the portal picks for the time the rows cover within the range
  (``range_values``: 45 minutes of a demo binned by the minute, not into two hourly bars);
* Resource Graph items run in the same engine over the Resource Graph rows of ``--arg-file``
  (Resource Graph's KQL is Kusto's; the rows are loaded into the tables their types belong to,
  ``argrows.by_table``); without a
  file they have no result and are marked ``needs_arg`` (the page says so once), as is every
  merge reading one; a table the file does not hold, or a workspace table with no rows at all
  (no collector deployed), is absent by design, not an error: the panel says what the view
  cannot know without it (``absent``);
* Merge items join their sources' results (``merge``);
* a drill-down (an item waiting for a parameter a grid's row selection sets) runs once for each
  of the first rows of those grids (``DRILL_EVENTS`` at most), the nearest grid first: the static
  page's stand-in for clicking a row.

A query that fails is one failed panel (its reason shown), never the end of the report.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from ... import contract
from ...logs import one_line
from ..kql import params as wbparams
from ..kql.engine import Engine
from . import argrows, merge
from .order import sort_rows
from .workbook import Item, Workbook

NO_ARG = (
    "needs Azure Resource Graph rows: run `az graph query` and pass its JSON with "
    "--arg-file (see the section's help)"
)
#: what a view cannot know when a table is absent by design (no rows of it at all)
_PLATFORM = contract.table(contract.PLATFORM).table
ABSENT = {
    _PLATFORM: f"No rows of Azure's own record ({_PLATFORM}, "
    "written by `se-forwarder collect`): without the collector this view cannot know the VMs "
    "without an agent, how an event ended on a VM whose agent did not see it, or a VM deleted "
    "with no Terminate event (it shows as silent).",
    "computeresources": "The Resource Graph file holds no computeresources rows: this view "
    "cannot know the Uniform scale-set instances (a fleet without Uniform scale sets has none; "
    'else add the rows of `az graph query -q "computeresources | where type =~ '
    "'microsoft.compute/virtualmachinescalesets/virtualmachines'\"`).",
    "resources": "The Resource Graph file holds no resources rows: this view cannot know the "
    'VMs Azure lists (add the rows of `az graph query -q "resources | where type =~ '
    "'microsoft.compute/virtualmachines'\"`).",
}
DRILL_EVENTS = 12  # drill-downs per drill-down item, at most
DRILL_PER_GRID = 6  # ... taken from one grid's first rows


@dataclass(slots=True)
class Result:
    rows: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None  # why there is no result
    seconds: float = 0.0
    needs_arg: bool = False  # no result only because no Resource Graph rows were given
    absent: str | None = None  # no rows because a table is absent by design: what is not known
    drill: dict[str, Result] = field(default_factory=dict)  # a drill-down's result per value

    @property
    def columns(self) -> list[str]:
        return list(self.rows[0]) if self.rows else []


def run_workbook(
    wb: Workbook,
    engine: Engine,
    arg_tables: Sequence[str] | None,
    progress: Callable[[int, int], None] | None = None,
) -> dict[str, Result]:
    """Results by item name, every query item of ``wb`` (hidden data sources included)."""
    out: dict[str, Result] = {}
    values = range_values(wb, engine)
    items = list(wb.hidden.values())
    order = (
        [i for i in items if i.kind != "merge" and not i.drill]
        + [i for i in items if i.kind == "merge"]
        + [i for i in items if i.drill]
    )
    for done, item in enumerate(order, 1):
        if item.drill:
            out[item.name] = _drill(item, wb, engine, out, values)
        elif item.kind == "merge":
            out[item.name] = _merge(item, out)
        else:
            out[item.name] = _run(item, wb, engine, arg_tables, values or None)
        if progress:
            progress(done, len(order))
    return out


def range_values(wb: Workbook, engine: Engine) -> dict[str, Any]:
    """The workbook's time ranges as it opens, each with the grain the portal picks for the time
    the rows cover within it (the whole range once the rows cover it)."""
    oldest = engine.oldest()
    out: dict[str, Any] = {}
    for name, prm in wb.params.items():
        if prm.get("type") != wbparams.TIME_RANGE:
            continue
        saved = wbparams.saved_value(prm)
        covered = engine.now - oldest if oldest is not None else saved.duration
        if timedelta(0) < covered < saved.duration:
            out[name] = wbparams.TimeRange(saved.duration, wbparams.default_grain(covered))
    return out


def planned(
    wb: Workbook, values: Mapping[str, Any] | None = None
) -> list[tuple[str, Mapping[str, Any] | None, dict[str, Any], Any]]:
    """The Log Analytics queries ``run_workbook`` runs with no drill-down value, as
    ``Engine.share`` takes them (query, params, declared, timespan): what a report announces
    before it runs any, so that a definition several of them repeat is computed once;
    ``values``: ``range_values``."""
    return [
        (i.text, values or None, wb.params, i.timespan)
        for i in wb.hidden.values()
        if i.kind == "query" and not i.drill and i.text.strip()
    ]


def _run(
    item: Item,
    wb: Workbook,
    engine: Engine,
    arg_tables: Sequence[str] | None,
    params: Mapping[str, Any] | None = None,
) -> Result:
    if not item.text.strip():
        return Result(error=f"no query file for item {item.name!r}")
    if item.kind == "arg":
        if arg_tables is None:
            return Result(error=NO_ARG, needs_arg=True)
        missing = sorted(argrows.tables_read(item.text) - set(arg_tables))
        if missing:
            return Result(absent=" ".join(_absent(t) for t in missing))
    elif item.kind != "query":
        return Result(error=f"query type {item.content.get('queryType')} is not supported")
    t0 = time.perf_counter()
    try:
        rows = engine.run(item.text, params, declared=wb.params, timespan=item.timespan)
    except Exception as exc:
        return Result(
            error=one_line(str(exc)) or type(exc).__name__, seconds=time.perf_counter() - t0
        )
    seconds = time.perf_counter() - t0
    empty = [t for t in ABSENT if not engine.counts.get(t, 1) and t in item.text]
    if not rows and empty:
        return Result(rows, seconds=seconds, absent=" ".join(_absent(t) for t in empty))
    return Result(rows, seconds=seconds)


def _absent(table: str) -> str:
    return ABSENT.get(table, f"No rows of {table}: this view cannot know what it would tell.")


def _merge(item: Item, done: dict[str, Result]) -> Result:
    try:
        names = merge.sources(item.text)
        missing = [n for n in names if n not in done or done[n].error]
        if missing:
            first = missing[0]
            why = done[first].error if first in done else "no such item"
            return Result(
                error=f"its source {first!r} has no result: {why}",
                needs_arg=first in done and done[first].needs_arg,
            )
        rows = merge.apply(item.text, {n: done[n].rows for n in names})
        absent = [why for n in names if (why := done[n].absent)]
        # nothing merged from a source absent by design: what the view cannot know, not "none"
        return Result(rows, absent=" ".join(dict.fromkeys(absent)) if absent and not rows else None)
    except (ValueError, KeyError) as exc:
        return Result(error=one_line(str(exc)) or type(exc).__name__)


def _drill(
    item: Item,
    wb: Workbook,
    engine: Engine,
    done: dict[str, Result],
    values: Mapping[str, Any] | None = None,
) -> Result:
    """The drill-down run for each value the grids above it would let a person select."""
    t0 = time.perf_counter()
    out = Result()
    for value in drill_values(item, wb, done):
        out.drill[value] = _run(item, wb, engine, None, {**(values or {}), item.drill: value})
    out.seconds = time.perf_counter() - t0
    return out


def drill_values(item: Item, wb: Workbook, done: dict[str, Result]) -> list[str]:
    """Values of ``item.drill`` from the first rows of the grids that export it (as shown),
    nearest grid first, that the parameter's own validation rules accept."""
    page = [i for s in wb.sections for i in s.items]
    at = page.index(item) if item in page else len(page)
    grids = [i for i in reversed(page[:at]) if i.exports == item.drill] + [
        i for i in page[at:] if i.exports == item.drill
    ]
    accept = _validator(wb.params.get(item.drill, {}))
    values: list[str] = []
    for grid in grids:
        rows = sort_rows(
            done.get(grid.name, Result()).rows,
            grid.content.get("gridSettings", {}).get("sortBy", []),
        )
        taken = [
            str(r[grid.export_field]) for r in rows if r.get(grid.export_field) not in (None, "")
        ][:DRILL_PER_GRID]
        values += [v for v in dict.fromkeys(taken) if v not in values and accept(v)]
    return values[:DRILL_EVENTS]


def _validator(prm: Mapping[str, Any]) -> Callable[[str], bool]:
    rules = (prm.get("typeSettings") or {}).get("paramValidationRules") or []
    compiled = [(re.compile(r["regExp"]), r.get("match", True)) for r in rules]
    return lambda v: all(bool(rx.search(v)) == match for rx, match in compiled)
