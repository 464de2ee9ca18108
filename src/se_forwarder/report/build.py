"""The report built end to end: rows in, the workbooks' items executed, one HTML page out.

Where the workbooks are: ``dashboards/`` of the source checkout this package runs from (an
editable install or the repository itself), or the folder named by ``--dashboards`` or
``SE_FORWARDER_DASHBOARDS`` (an installed wheel carries no dashboards: the workbook JSON and
its .kql files stay one copy, in the repository).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from ..errors import ReportError
from . import argrows, execute, page, workbook
from .engine import Engine, as_utc
from .sources import Rows

#: the workbooks, most important first (the report's order)
WORKBOOKS = ("scheduled-events", "agent-health")
ENV = "SE_FORWARDER_DASHBOARDS"


class DashboardsMissing(ReportError):
    """The workbooks cannot be found (one line; the command exits 2)."""


@dataclass(slots=True)
class Built:
    html: str
    results: dict[str, dict[str, execute.Result]]  # by workbook key, then item name
    now: datetime


def dashboards_dir(given: Path | None = None) -> Path:
    """``given``, else ``$SE_FORWARDER_DASHBOARDS``, else the checkout's ``dashboards/``."""
    candidates = [given] if given else []
    if os.environ.get(ENV):
        candidates.append(Path(os.environ[ENV]))
    candidates.append(Path(__file__).resolve().parents[3] / "dashboards")
    for path in candidates[:1] if given else candidates:
        if (path / f"{WORKBOOKS[0]}.workbook.json").is_file():
            return path
    where = given or candidates[-1]
    raise DashboardsMissing(f"no workbooks in {where}: pass --dashboards DIR (the repository's "
                            f"dashboards/ folder) or set {ENV}")


def build(rows: Rows, dashboards: Path, *, now: datetime | None = None,
          arg: argrows.ArgRows | None = None) -> Built:
    moment = as_utc(now or rows.now or rows.newest())
    engine = Engine(rows.records, rows.heartbeats, now=moment)
    return render_with(engine, rows, dashboards, arg)


def render_with(engine: Engine, rows: Rows, dashboards: Path,
                arg: argrows.ArgRows | None = None) -> Built:
    """The report from an engine already loaded (at its ``now``); ``rows`` for the page's notes."""
    moment = engine.now
    table = None
    if arg is not None:
        table, schema = argrows.schema()
        engine.load_table(table, schema, arg.rows)
    books, results = [], {}
    for key in WORKBOOKS:
        wb = workbook.load(dashboards / f"{key}.workbook.json", dashboards / "queries" / "workbook")
        results[key] = execute.run_workbook(wb, engine, table)
        books.append((wb, results[key]))
    meta = page.Meta(moment, list(rows.described), sum(rows.skipped.values()), _arg_line(arg))
    return Built(page.render(meta, books), results, moment)


def _arg_line(arg: argrows.ArgRows | None) -> str:
    if arg is None:
        return ("Azure Resource Graph: no file given (--arg-file), so the platform's own record "
                "is not compared")
    kept = sum(1 for r in arg.rows if r.get("type", "").lower() == argrows.SCHEDULED_EVENTS)
    return (f"Azure Resource Graph: {arg.path} ({kept:,} scheduled-event rows"
            + (f", {arg.skipped:,} malformed skipped" if arg.skipped else "") + ")")
