"""Every item of a workbook plan executed as the portal would, each result kept with the reason
when there is none.

* Log Analytics items run in the engine with their time range and the workbook's saved
  parameter values (``Engine.run``: ``params`` substitution, ``now``, the time range);
* Resource Graph items run in the same engine over the Resource Graph rows of ``--arg-file``
  (Resource Graph's KQL is Kusto's; the rows are loaded as ``maintenanceresources``); without a
  file, or for a table the file does not hold, they have no result and say why;
* Merge items join their sources' results (``merge``).

A query that fails is one failed panel (its reason shown), never the end of the report.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from . import merge
from .engine import Engine
from .workbook import Item, Workbook

NO_ARG = ("needs Azure Resource Graph rows: run `az graph query` and pass its JSON with "
          "--arg-file (see the section's help)")


@dataclass(slots=True)
class Result:
    rows: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None  # why there is no result
    seconds: float = 0.0

    @property
    def columns(self) -> list[str]:
        return list(self.rows[0]) if self.rows else []


def run_workbook(wb: Workbook, engine: Engine, arg_table: str | None) -> dict[str, Result]:
    """Results by item name, every query item of ``wb`` (hidden data sources included)."""
    out: dict[str, Result] = {}
    items = list(wb.hidden.values())
    for item in [i for i in items if i.kind != "merge"]:
        out[item.name] = _run(item, wb, engine, arg_table)
    for item in [i for i in items if i.kind == "merge"]:
        out[item.name] = _merge(item, out)
    return out


def _run(item: Item, wb: Workbook, engine: Engine, arg_table: str | None) -> Result:
    if not item.text.strip():
        return Result(error=f"no query file for item {item.name!r}")
    if item.kind == "arg":
        if arg_table is None:
            return Result(error=NO_ARG)
        if arg_table not in item.text:
            return Result(error="reads a Resource Graph table the --arg-file does not hold "
                                f"(it holds {arg_table})")
    elif item.kind != "query":
        return Result(error=f"query type {item.content.get('queryType')} is not supported")
    t0 = time.perf_counter()
    try:
        rows = engine.run(item.text, declared=wb.params, timespan=item.timespan)
    except Exception as exc:  # noqa: BLE001 - any engine failure becomes a marked panel
        return Result(error=_one_line(exc), seconds=time.perf_counter() - t0)
    return Result(rows, seconds=time.perf_counter() - t0)


def _merge(item: Item, done: dict[str, Result]) -> Result:
    try:
        names = merge.sources(item.text)
        missing = [n for n in names if n not in done or done[n].error]
        if missing:
            first = missing[0]
            why = done[first].error if first in done else "no such item"
            return Result(error=f"its source {first!r} has no result: {why}")
        return Result(merge.apply(item.text, {n: done[n].rows for n in names}))
    except (ValueError, KeyError) as exc:
        return Result(error=_one_line(exc))


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= 300 else text[:297] + "..."
