"""One workbook item as HTML: tiles, a table, a chart, a text, or a clearly marked empty panel.

Settings are the item's own (``tileSettings``, ``gridSettings``: labels, formatters, sort), read
as the portal reads them; values are formatted for a person (UTC times to the minute, durations
in h/m/s, reals to one decimal).
"""

from __future__ import annotations

import html
import re
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from . import charts
from .colors import NAMED, color
from .execute import Result
from .workbook import Item

MAX_ROWS = 25
GUID = re.compile(r"[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}")
HIDDEN, BAR, RESOURCE, THRESHOLDS = 5, 3, 13, 18
ICONS = {"success": "green", "1": "green", "warning": "orange", "2": "orange", "3": "redBright",
         "critical": "redBright", "4": "redBright", "error": "redBright", "Unavailable": "gray",
         "info": "blue", "disabled": "gray"}


def panel(item: Item, result: Result) -> str:
    """The item's panel (a ``<section>`` with its title)."""
    if item.kind == "text":
        return f'<div class="note {esc(item.style)}">{markdown(item.text)}</div>'
    head = f'<h3 id="{esc(item.name)}">{esc(item.title)}</h3>'
    if result.error is not None:
        return (f'<section class="panel failed" data-item="{esc(item.name)}">{head}'
                f'<p class="reason"><strong>No result.</strong> {esc(result.error)}</p></section>')
    if not result.rows:
        message = item.content.get("noDataMessage") or "The query returned no rows."
        body = f'<p class="empty">{esc(message)}</p>'
    elif item.visualization == "tiles":
        body = tiles(result.rows, item.content.get("tileSettings", {}))
    elif item.visualization in charts.CHARTS:
        body = f'<div class="chart">{charts.svg(item.visualization, result.rows, item.content.get("chartSettings") or {})}</div>'
    else:
        body = table(result.rows, item.content.get("gridSettings", {}))
    return f'<section class="panel" data-item="{esc(item.name)}">{head}{body}</section>'


def tiles(rows: Sequence[Mapping[str, Any]], settings: Mapping[str, Any]) -> str:
    def col(part: str) -> str | None:
        return (settings.get(part) or {}).get("columnMatch")

    title, value, level, sub = (col(p) for p in ("titleContent", "leftContent",
                                                  "secondaryContent", "subtitleContent"))
    order = settings.get("sortCriteriaField")
    rows = sorted(rows, key=lambda r: _sortable(r.get(order)),
                  reverse=settings.get("sortOrderField", 1) != 1) if order else list(rows)
    grid = (settings.get("secondaryContent") or {}).get("formatOptions", {}).get("thresholdsGrid", [])
    out = []
    for r in rows:
        shade = _threshold(grid, r.get(level)) if level else None
        out.append(
            f'<div class="tile" style="--level:{color(shade or "gray")}" '
            f'data-metric="{esc(str(r.get(title)))}">'
            f'<div class="tile-value">{esc(fmt(r.get(value)))}</div>'
            f'<div class="tile-title">{esc(str(r.get(title, "")))}</div>'
            + (f'<div class="tile-sub">{esc(str(r.get(sub) or ""))}</div>' if sub else "")
            + "</div>")
    return f'<div class="tiles">{"".join(out)}</div>'


def table(rows: Sequence[Mapping[str, Any]], settings: Mapping[str, Any]) -> str:
    formatters = settings.get("formatters", [])
    labels = {s["columnId"]: s.get("label") for s in settings.get("labelSettings", [])}
    cols = [c for c in rows[0] if _formatter(formatters, c).get("formatter") != HIDDEN]
    rows = _sorted(rows, settings.get("sortBy", []))
    peaks = {c: max((abs(r[c]) for r in rows if _number(r.get(c))), default=0) for c in cols}
    head = "".join(f"<th>{esc(labels.get(c) or c)}</th>" for c in cols)
    body = "".join(
        "<tr>" + "".join(_cell(r.get(c), _formatter(formatters, c), peaks[c]) for c in cols)
        + "</tr>" for r in rows[:MAX_ROWS])
    more = (f'<p class="more">{len(rows) - MAX_ROWS:,} more rows not shown '
            f"({len(rows):,} in all).</p>" if len(rows) > MAX_ROWS else "")
    return (f'<div class="table-wrap"><table><thead><tr>{head}</tr></thead>'
            f"<tbody>{body}</tbody></table></div>{more}")


def _cell(value: Any, f: Mapping[str, Any], peak: float) -> str:
    kind, opts = f.get("formatter"), f.get("formatOptions", {})
    text = fmt(value)
    cls = ' class="num"' if _number(value) else ""
    if isinstance(value, str) and GUID.fullmatch(value):  # an id: short, whole on hover
        return f'<td class="id" title="{esc(value)}">{esc(value[:8])}…</td>'
    if kind == RESOURCE and isinstance(value, str) and "/" in value:
        return f'<td title="{esc(value)}">{esc(value.rstrip("/").rsplit("/", 1)[-1])}</td>'
    if kind == THRESHOLDS:
        shade, shown = _threshold_text(opts.get("thresholdsGrid", []), value, text)
        if shade and shown:
            return f'<td{cls}><span class="pill" style="--c:{color(shade)}">{esc(shown)}</span></td>'
    if kind == BAR and _number(value) and peak > 0:
        share = max(2.0, 100 * abs(value) / peak)
        return (f'<td class="num bar" style="--c:{color(opts.get("palette"))};--w:{share:.0f}%">'
                f"{esc(text)}</td>")
    return f"<td{cls}>{esc(text)}</td>"


def _formatter(formatters: Sequence[Mapping[str, Any]], column: str) -> Mapping[str, Any]:
    for f in formatters:
        match = f.get("columnMatch", "")
        if match == column or (match.startswith("^") and re.match(match, column)):
            return f
    return {}


def _threshold_text(grid: Sequence[Mapping[str, Any]], value: Any, text: str
                    ) -> tuple[str | None, str]:
    """The colour and the text of a threshold cell (its ``text`` template, ``{0}`` the value)."""
    for t in grid:
        if t.get("operator") == "Default" or _meets(t.get("operator"), value, t.get("thresholdValue")):
            shown = str(t.get("text") or "{0}{1}").replace("{0}", text).replace("{1}", "")
            return _threshold([t], value), shown
    return None, text


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


def _sorted(rows: Sequence[Mapping[str, Any]], sort_by: Sequence[Mapping[str, Any]]) -> list:
    out = list(rows)
    for s in reversed(sort_by):
        out.sort(key=lambda r: _sortable(r.get(s["itemKey"])), reverse=s.get("sortOrder") == 2)
    return out


def fmt(value: Any) -> str:
    """A value as a person reads it."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, datetime):
        return value.strftime("%Y-%m-%d %H:%M")
    if isinstance(value, timedelta):
        return duration(value.total_seconds())
    if isinstance(value, float):
        return f"{value:,.1f}" if abs(value) < 1e15 else f"{value:.3g}"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, (list, tuple)):
        return ", ".join(fmt(v) for v in value)
    if isinstance(value, dict):
        return ", ".join(f"{k}: {fmt(v)}" for k, v in value.items())
    return str(value)


def duration(seconds: float) -> str:
    s = round(abs(seconds))
    sign = "-" if seconds < 0 else ""
    d, rem = divmod(s, 86400)
    h, rem = divmod(rem, 3600)
    m, sec = divmod(rem, 60)
    if d:
        return f"{sign}{d}d {h}h"
    if h:
        return f"{sign}{h}h {m:02d}m"
    return f"{sign}{m}m {sec:02d}s" if m else f"{sign}{sec}s"


def markdown(text: str) -> str:
    """The little markdown the workbooks' text items use: headings, lists, bold, code, links."""
    out, items = [], []
    for line in text.splitlines() + [""]:
        stripped = line.strip()
        if stripped.startswith(("- ", "* ")):
            items.append(f"<li>{_inline(stripped[2:])}</li>")
            continue
        if items:
            out.append(f"<ul>{''.join(items)}</ul>")
            items = []
        if stripped.startswith("#"):
            level = min(6, len(stripped) - len(stripped.lstrip("#")) + 2)
            out.append(f"<h{level}>{_inline(stripped.lstrip('# '))}</h{level}>")
        elif stripped:
            out.append(f"<p>{_inline(stripped)}</p>")
    return "".join(out)


def _inline(text: str) -> str:
    t = esc(text)
    t = re.sub(r"`([^`]+)`", r"<code>\1</code>", t)
    t = re.sub(r"\*\*([^*]+)\*\*", r"<strong>\1</strong>", t)
    t = re.sub(r"\*([^*]+)\*", r"<em>\1</em>", t)
    return re.sub(r"\[([^\]]+)\]\(([^)]+)\)", r"\1", t)  # no links out of an offline page


def esc(text: str) -> str:
    return html.escape(text, quote=True)


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _sortable(v: Any) -> tuple:
    if v is None:
        return (2, "")
    return (0, v) if isinstance(v, (int, float, datetime, timedelta)) else (1, str(v))
