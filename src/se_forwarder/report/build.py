"""The report built end to end: rows in, the workbooks' items executed, one HTML page out.

Where the workbooks are: ``dashboards/`` of the source checkout this package runs from (an
editable install or the repository itself), or the folder named by ``--dashboards`` or
``SE_FORWARDER_DASHBOARDS`` (an installed wheel carries no dashboards: the workbook JSON and
its .kql files stay one copy, in the repository).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from ..errors import ReportError
from . import sources
from .kql.engine import Engine
from .kql.load import FileLoad
from .render import page
from .sources import Rows
from .workbooks import argrows, execute, workbook

#: the workbooks, most important first (the report's order)
WORKBOOKS = ("scheduled-events", "agent-health")
ENV = "SE_FORWARDER_DASHBOARDS"

#: progress(stage, detail): a stage of the build ("loading x.jsonl") and where it is ("3/45")
Progress = Callable[[str, str], None]


class DashboardsMissing(ReportError):
    """The workbooks cannot be found (one line; the command exits 2)."""


@dataclass(slots=True)
class Built:
    html: str
    results: dict[str, dict[str, execute.Result]]  # by workbook key, then item name
    now: datetime
    loads: list[FileLoad] = field(default_factory=list)  # what each file gave (skipped lines)
    failed: list[str] = field(default_factory=list)  # titles of the panels with no result
    needs_arg: list[str] = field(default_factory=list)  # ... of those left out (no --arg-file)
    #: rows of the library queries asked for (``build(library=...)``), by file name
    library: dict[str, list[dict[str, Any]]] = field(default_factory=dict)


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
    raise DashboardsMissing(
        f"no workbooks in {where}: pass --dashboards DIR (the repository's "
        f"dashboards/ folder) or set {ENV}"
    )


def build(
    rows: Rows,
    dashboards: Path,
    *,
    now: datetime | None = None,
    arg: argrows.ArgRows | None = None,
    progress: Progress | None = None,
    library: Sequence[str] = (),
) -> Built:
    """Load ``rows`` (SourceError when no line is usable), run both workbooks, render; and
    the ``library`` queries (``dashboards/queries/<name>``) on the same rows at the same moment,
    for a summary that must agree with the page (the demo's terminal)."""
    loading = (lambda stage: progress(stage, "")) if progress else None
    with Engine(files=rows.files, now=now or rows.now, progress=loading) as engine:
        if not any(engine.counts.values()):
            raise sources.no_rows(rows.files, engine.loads)
        built = render_with(engine, rows, dashboards, arg, progress)
        for name in library:
            built.library[name] = engine.run((dashboards / "queries" / name).read_text("utf-8"))
        return built


def render_with(
    engine: Engine,
    rows: Rows,
    dashboards: Path,
    arg: argrows.ArgRows | None = None,
    progress: Progress | None = None,
) -> Built:
    """The report from an engine already loaded (at its ``now``); ``rows`` for the page's notes."""
    loads = list(engine.loads)
    held: list[str] | None = None
    if arg is not None:
        _, schema = argrows.schema()
        by_table = argrows.by_table(arg.rows)
        for table, table_rows in by_table.items():
            engine.load_table(table, schema, table_rows)
        held = sorted(by_table)
        arg.skipped += sum(ld.skipped_total for ld in engine.loads[len(loads) :])
    wbs = [
        workbook.load(dashboards / f"{key}.workbook.json", dashboards / "queries" / "workbook")
        for key in WORKBOOKS
    ]
    engine.share(q for wb in wbs for q in execute.planned(wb, execute.range_values(wb, engine)))
    books = [
        (wb, execute.run_workbook(wb, engine, held, _counter(progress, wb.title))) for wb in wbs
    ]
    if progress:
        progress("drawing the page", "")
    meta = page.Meta(engine.now, rows.describe(loads), _skipped(loads), _arg_line(arg))
    shown = [
        (i, results[i.name])
        for wb, results in books
        for s in wb.sections
        for i in s.items
        if i.kind != "text" and not i.drill
    ]
    return Built(
        page.render(meta, books),
        dict(zip(WORKBOOKS, (r for _, r in books), strict=True)),
        engine.now,
        loads,
        [i.title for i, r in shown if r.error and not r.needs_arg],
        [i.title for i, r in shown if r.needs_arg],
    )


def _counter(progress: Progress | None, title: str) -> Callable[[int, int], None] | None:
    if progress is None:
        return None
    return lambda done, total: progress(f"running the queries of {title}", f"{done}/{total}")


def _skipped(loads: list[FileLoad]) -> dict[str, int]:
    """Lines skipped, by reason, over every file."""
    out: dict[str, int] = {}
    for ld in loads:
        for reason, n in ld.skipped.items():
            out[reason] = out.get(reason, 0) + n
    return out


def _arg_line(arg: argrows.ArgRows | None) -> str:
    if arg is None:
        return (
            "Azure Resource Graph: no file given (--arg-file), so the platform's own record "
            "is not compared"
        )
    kept = sum(1 for r in arg.rows if str(r.get("type", "")).lower() == argrows.SCHEDULED_EVENTS)
    vms = sum(1 for r in arg.rows if str(r.get("type", "")).lower() in argrows.TABLE_OF_TYPE)
    return (
        f"Azure Resource Graph: {arg.path} ({kept:,} scheduled-event rows"
        + (f", {vms:,} VM rows" if vms else "")
        + (f", {arg.skipped:,} malformed skipped" if arg.skipped else "")
        + ")"
    )
