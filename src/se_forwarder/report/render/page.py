"""The report as one self-contained HTML page (Jinja2, autoescaped: ``templates/``): inline CSS,
inline SVG charts, no script, no request to anything (it opens with no network access).

What the page adds to the workbooks' own plan: panels that only lack Resource Graph rows (no
``--arg-file``) are said once, in the header and as one line where they would be, not as
failures; a drill-down shows its result for each event it was run for (``execute``), linked from
the grids' EventId cells; a section with nothing to show has no heading.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import jinja2

from ..workbooks.execute import DRILL_EVENTS, Result
from ..workbooks.workbook import Item, Section, Workbook
from . import charts
from .panels import Panel, panel


@dataclass(slots=True)
class Meta:
    now: datetime
    sources: list[str]
    skipped: dict[str, int] = field(default_factory=dict)  # lines skipped, by reason
    arg: str = ""  # what Resource Graph rows were given (or that none were)
    notes: list[str] = field(default_factory=list)


@dataclass(slots=True)
class Drill:
    value: str
    anchor: str
    summary: str
    panel: Panel


@dataclass(slots=True)
class Cell:
    kind: str  # "panel", "needs-arg", "drill"
    wide: bool = True
    panel: Panel | None = None
    names: list[str] = field(default_factory=list)  # needs-arg: the items left out
    titles: list[str] = field(default_factory=list)
    name: str = ""  # drill: the item
    title: str = ""
    hint: str = ""
    drills: list[Drill] = field(default_factory=list)


@dataclass(slots=True)
class SectionView:
    index: int
    title: str
    cells: list[Cell]


@dataclass(slots=True)
class BookView:
    key: str
    title: str
    sections: list[SectionView]


def render(meta: Meta, books: Sequence[tuple[Workbook, dict[str, Result]]]) -> str:
    views = [_book(wb, results) for wb, results in books]
    failed = [
        item
        for wb, results in books
        for s in wb.sections
        for item in s.items
        if item.kind != "text"
        and not item.drill
        and results[item.name].error
        and not results[item.name].needs_arg
    ]
    omitted = [
        (f"{b.key}-{s.index}", s.title or b.title)
        for b in views
        for s in b.sections
        if any(c.kind == "needs-arg" for c in s.cells)
    ]  # (anchor, title)
    needs_arg = [
        n
        for b in views
        for s in b.sections
        for c in s.cells
        if c.kind == "needs-arg"
        for n in c.names
    ]
    return (
        _env()
        .get_template("page.html.j2")
        .render(
            meta=meta,
            books=views,
            failed=failed,
            needs_arg=needs_arg,
            needs_arg_sections=omitted,
            skipped_total=sum(meta.skipped.values()),
        )
    )


@cache
def _env() -> jinja2.Environment:
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.PackageLoader(__package__, "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=False,
        lstrip_blocks=False,
    )
    env.filters["when"] = lambda moment: moment.strftime("%Y-%m-%d %H:%M UTC")
    env.filters["short"] = lambda title: title.split(":")[0].split("(")[0].strip()
    return env


def _book(wb: Workbook, results: dict[str, Result]) -> BookView:
    sections = [SectionView(i, s.title, _cells(s, wb, results)) for i, s in enumerate(wb.sections)]
    return BookView(wb.key, wb.title, [s for s in sections if s.cells])


def _cells(section: Section, wb: Workbook, results: dict[str, Result]) -> list[Cell]:
    """The section's cells; none when it would show nothing but help text."""
    out: list[Cell] = []
    omitted: Cell | None = None
    links = _drill_links(wb, results)
    for item in section.items:
        result = results.get(item.name, Result())
        if item.drill:
            if result.drill:
                out.append(_drill_cell(item, result))
        elif result.needs_arg:
            if omitted is None:
                omitted = Cell("needs-arg")
                out.append(omitted)
            omitted.names.append(item.name)
            omitted.titles.append(item.title)
        else:
            wide = (
                item.kind == "text"
                or item.visualization not in charts.CHARTS
                or result.error is not None
                or not result.rows
            )
            out.append(Cell("panel", wide, panel(item, result, links.get(item.exports, {}))))
    shown = any(c.kind != "panel" or (c.panel is not None and c.panel.kind != "note") for c in out)
    return out if shown else []


def _drill_links(wb: Workbook, results: dict[str, Result]) -> dict[str, dict[str, str]]:
    """{parameter: {value: anchor}} of every drill-down run."""
    out: dict[str, dict[str, str]] = {}
    for item in wb.hidden.values():
        if item.drill:
            out.setdefault(item.drill, {}).update(
                {v: _anchor(item, v) for v in results.get(item.name, Result()).drill}
            )
    return out


def _drill_cell(item: Item, result: Result) -> Cell:
    drills = [
        Drill(value, _anchor(item, value), _summary(r), panel(item, r))
        for value, r in result.drill.items()
    ]
    hint = (
        f"Run for the first rows of the grids above ({len(drills)} of at most "
        f"{DRILL_EVENTS}): select one of their {item.drill} links, or open one here. "
        "In the portal, any row."
    )
    return Cell("drill", True, name=item.name, title=item.title, hint=hint, drills=drills)


def _summary(result: Result) -> str:
    if result.error is not None:
        return "no result"
    return f"{len(result.rows):,} records"


def _anchor(item: Item, value: str) -> str:
    return f"{item.name}-{value}"
