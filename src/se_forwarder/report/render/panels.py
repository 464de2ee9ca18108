"""One workbook item as what the page shows: tiles, a table, a chart, a text, or a clearly
marked empty panel. Plain data for the template (``templates/panel.html.j2``), which escapes.

Settings are the item's own (``tileSettings``, ``gridSettings``: labels, formatters, sort), read
as the portal reads them; values are formatted for a person (``values``). A table keeps short
columns on one line, lets long text wrap in a column of readable width, and aligns numbers (and
their headers) right.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from markupsafe import Markup

from ..workbooks.execute import Result
from ..workbooks.order import sort_rows, sortable
from ..workbooks.workbook import Item
from . import charts, text
from .colors import NAMED, color
from .values import (
    UNKNOWN,
    fmt,
    is_duration_column,
    number,
    order_labels,
    resource_name,
)

MAX_ROWS = 25
LONG_TEXT = 32  # a text column whose longest value is longer wraps, in a column of its own width
WIDE = 8  # ... and in a table of more columns, goes under its row, across the table
MAX_SHOWN = 600  # characters of one value shown in a cell (the whole value on hover, cut too)
GUID = re.compile(r"[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}")
HIDDEN, BAR, RESOURCE, THRESHOLDS = 5, 3, 13, 18
ICONS = {
    "success": "green",
    "1": "green",
    "warning": "orange",
    "2": "orange",
    "3": "redBright",
    "critical": "redBright",
    "4": "redBright",
    "error": "redBright",
    "Unavailable": "gray",
    "info": "blue",
    "disabled": "gray",
}


@dataclass(slots=True)
class Cell:
    text: str
    cls: str = ""  # "num", "id", "text"
    title: str = ""  # the whole value, on hover
    pill: str = ""  # colour of a pill around the text
    bar: str = ""  # colour of a bar behind the number ...
    share: int = 0  # ... and its length, in percent of the column's largest
    link: str = ""  # the anchor of this value's drill-down


@dataclass(slots=True)
class GridColumn:
    label: str
    cls: str = ""  # "num" (right-aligned, header too) or "text" (wraps)


@dataclass(slots=True)
class Row:
    cells: list[Cell]
    below: list[tuple[str, Cell]] = field(default_factory=list)  # (label, long text) under it


@dataclass(slots=True)
class Table:
    columns: list[GridColumn]
    rows: list[Row]
    total: int

    @property
    def more(self) -> int:
        return self.total - len(self.rows)


@dataclass(slots=True)
class Tile:
    metric: str
    value: str
    title: str
    subtitle: str | None
    color: str


@dataclass(slots=True)
class Panel:
    kind: str  # "note", "tiles", "table", "chart", "failed", "empty", "absent"
    name: str = ""
    title: str = ""
    html: Markup = field(default_factory=Markup)  # a note's rendered markdown, a chart's SVG
    style: str = ""  # a note's style
    message: str = ""  # why there is no result, or the no-data message
    tiles: list[Tile] = field(default_factory=list)
    table: Table | None = None


def panel(item: Item, result: Result, links: Mapping[str, str] | None = None) -> Panel:
    """The item's panel; ``links``: drill-down anchors by value (cells holding one link)."""
    if item.kind == "text":
        return Panel("note", item.name, html=text.markdown(item.text), style=item.style)
    base = Panel("failed", item.name, item.title)
    if result.error is not None:
        base.message = result.error
    elif result.absent is not None:  # a table absent by design: what the view cannot know
        base.kind, base.message = "absent", result.absent
    elif not result.rows:
        base.kind = "empty"
        base.message = item.content.get("noDataMessage") or "The query returned no rows."
    elif item.visualization == "tiles":
        base.kind, base.tiles = "tiles", tiles(result.rows, item.content.get("tileSettings", {}))
    elif item.visualization in charts.CHARTS:
        settings = item.content.get("chartSettings") or {}
        base.kind, base.html = (
            "chart",
            Markup(charts.svg(item.visualization, result.rows, settings)),
        )
    else:
        base.kind = "table"
        base.table = table(result.rows, item.content.get("gridSettings", {}), links or {})
    return base


def _at(row: Mapping[str, Any], key: str | None, default: Any = None) -> Any:
    """``row``'s value under ``key``, ``default`` when the setting names no column."""
    return row.get(key, default) if key is not None else default


def tiles(rows: Sequence[Mapping[str, Any]], settings: Mapping[str, Any]) -> list[Tile]:
    def col(part: str) -> str | None:
        return (settings.get(part) or {}).get("columnMatch")

    title, value, level, sub = (
        col(p) for p in ("titleContent", "leftContent", "secondaryContent", "subtitleContent")
    )
    order = settings.get("sortCriteriaField")
    rows = (
        sorted(
            rows,
            key=lambda r: sortable(r.get(order)),
            reverse=settings.get("sortOrderField", 1) != 1,
        )
        if order
        else list(rows)
    )
    grid = (
        (settings.get("secondaryContent") or {}).get("formatOptions", {}).get("thresholdsGrid", [])
    )
    return [
        Tile(
            str(_at(r, title)),
            fmt(_at(r, value)) or "–",  # noqa: RUF001 - the en dash of an empty tile
            str(_at(r, title, "")),
            str(r.get(sub) or "") if sub else None,
            color((_threshold(grid, r.get(level)) if level else None) or "gray"),
        )
        for r in rows
    ]


def table(
    rows: Sequence[Mapping[str, Any]], settings: Mapping[str, Any], links: Mapping[str, str]
) -> Table:
    formatters = settings.get("formatters", [])
    labels = {s["columnId"]: s.get("label") for s in settings.get("labelSettings", [])}
    cols = [c for c in rows[0] if _formatter(formatters, c).get("formatter") != HIDDEN]
    rows = sort_rows(rows, settings.get("sortBy", []))
    peaks = {c: max((abs(r[c]) for r in rows if number(r.get(c))), default=0) for c in cols}
    kinds = {c: _column_kind(rows, c, _formatter(formatters, c)) for c in cols}
    names = {c: order_labels(r.get(c) for r in rows) if kinds[c] == "" else {} for c in cols}
    below = [c for c in cols if kinds[c] == "text"] if len(cols) > WIDE else []
    body = []
    for r in rows[:MAX_ROWS]:
        cells = {
            c: _cell(r.get(c), c, _formatter(formatters, c), peaks[c], kinds[c], names[c], links)
            for c in cols
        }
        body.append(
            Row(
                [cells[c] for c in cols if c not in below],
                [(labels.get(c) or c, cells[c]) for c in below if cells[c].text],
            )
        )
    return Table(
        [GridColumn(labels.get(c) or c, kinds[c]) for c in cols if c not in below], body, len(rows)
    )


def _column_kind(rows: Sequence[Mapping[str, Any]], column: str, f: Mapping[str, Any]) -> str:
    """ "num" when every value is a number, "text" when some text is long (a resource id shows
    its name only), else ""."""
    values = [r.get(column) for r in rows if r.get(column) not in (None, "")]
    if values and all(number(v) for v in values):
        return "num"
    if f.get("formatter") == RESOURCE:
        return ""
    if any(isinstance(v, str) and len(v) > LONG_TEXT and not GUID.fullmatch(v) for v in values):
        return "text"
    return ""


def _cell(
    value: Any,
    column: str,
    f: Mapping[str, Any],
    peak: float,
    kind: str,
    names: Mapping[Any, str],
    links: Mapping[str, str],
) -> Cell:
    formatter, opts = f.get("formatter"), f.get("formatOptions", {})
    if isinstance(value, str) and value in links:
        return Cell(
            value[:8] + "…" if GUID.fullmatch(value) else value, "id", value, link=links[value]
        )
    if isinstance(value, str) and GUID.fullmatch(value):  # an id: short, whole on hover
        return Cell(value[:8] + "…", "id", value)
    if formatter == RESOURCE and isinstance(value, str) and "/" in value:
        return Cell(resource_name(value), kind, value)
    if is_duration_column(column) and value == -1:
        return Cell(UNKNOWN, kind, "-1 as served: the platform gave no duration")
    shown = names[value] if isinstance(value, str) and value in names else fmt(value)
    cell = Cell(
        shown[:MAX_SHOWN] + ("…" if len(shown) > MAX_SHOWN else ""),
        kind,
        shown[: 4 * MAX_SHOWN] if len(shown) > MAX_SHOWN else "",
    )
    if formatter == THRESHOLDS:
        shade, label = _threshold_text(opts.get("thresholdsGrid", []), value, cell.text)
        if shade and label:
            cell.text, cell.pill = label, color(shade)
    elif formatter == BAR and number(value) and peak > 0:
        cell.bar, cell.share = color(opts.get("palette")), round(max(2.0, 100 * abs(value) / peak))
    return cell


def _formatter(formatters: Sequence[Mapping[str, Any]], column: str) -> Mapping[str, Any]:
    for f in formatters:
        match = f.get("columnMatch", "")
        if match == column or (match.startswith("^") and re.match(match, column)):
            return f
    return {}


def _threshold_text(
    grid: Sequence[Mapping[str, Any]], value: Any, shown: str
) -> tuple[str | None, str]:
    """The colour and the text of a threshold cell (its ``text`` template, ``{0}`` the value)."""
    for t in grid:
        if t.get("operator") == "Default" or _meets(
            t.get("operator"), value, t.get("thresholdValue")
        ):
            label = str(t.get("text") or "{0}{1}").replace("{0}", shown).replace("{1}", "")
            return _threshold([t], value), label
    return None, shown


def _threshold(grid: Sequence[Mapping[str, Any]], value: Any) -> str | None:
    """The representation of the first threshold ``value`` meets (``Default`` last)."""
    for t in grid:
        op, ref = t.get("operator"), t.get("thresholdValue")
        if op == "Default" or _meets(op, value, ref):
            rep = t.get("representation")
            return rep if rep in NAMED else ICONS.get(str(rep), "gray")
    return None


def _meets(op: str | None, value: Any, ref: Any) -> bool:
    if op in ("==", "!="):
        return (str(value) == str(ref)) == (op == "==")
    try:
        a, b = float(value), float(ref)
    except (TypeError, ValueError):
        return False
    return {"<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b}.get(op or "", False)
