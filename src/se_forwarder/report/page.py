"""The report as one self-contained HTML page: inline CSS, inline SVG charts, no script, no
request to anything (it opens with no network access)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from . import charts
from .execute import Result
from .panels import esc, panel
from .workbook import Workbook


@dataclass(slots=True)
class Meta:
    now: datetime
    sources: list[str]
    skipped: int = 0
    arg: str = ""  # what Resource Graph rows were given (or that none were)
    notes: list[str] = field(default_factory=list)


def render(meta: Meta, books: Sequence[tuple[Workbook, dict[str, Result]]]) -> str:
    failed = [(wb, item) for wb, results in books for s in wb.sections for item in s.items
              if item.kind != "text" and results[item.name].error]
    body = [_header(meta, failed), _toc(books)]
    for wb, results in books:
        body.append(_workbook(wb, results))
    return (f"<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<title>Fleet view: Scheduled Events ({esc(_when(meta.now))})</title>"
            f"<style>{CSS}</style></head><body>{''.join(body)}</body></html>\n")


def _when(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%d %H:%M UTC")


def _header(meta: Meta, failed: list) -> str:
    facts = [f"Evaluated at <strong>{esc(_when(meta.now))}</strong>"]
    facts += [esc(s) for s in meta.sources]
    if meta.arg:
        facts.append(esc(meta.arg))
    warn = []
    if meta.skipped:
        warn.append(f"{meta.skipped:,} malformed source lines were skipped.")
    if failed:
        links = ", ".join(f'<a href="#{esc(i.name)}">{esc(i.title)}</a>' for _, i in failed)
        warn.append(f"{len(failed)} panel(s) have no result: {links}.")
    warn += [esc(n) for n in meta.notes]
    return ("<header><h1>Fleet view: Azure Scheduled Events</h1>"
            f'<p class="meta">{" · ".join(facts)}</p>'
            + "".join(f'<p class="warn">{w}</p>' for w in warn) + "</header>")


def _toc(books: Sequence[tuple[Workbook, dict[str, Result]]]) -> str:
    parts = []
    for wb, _ in books:
        links = " ".join(f'<a href="#{esc(wb.key)}-{i}">{esc(_short(s.title) or wb.title)}</a>'
                         for i, s in enumerate(wb.sections))
        parts.append(f"<p><strong>{esc(wb.title)}</strong> {links}</p>")
    return f'<nav>{"".join(parts)}</nav>'


def _short(title: str) -> str:
    return title.split(":")[0].split("(")[0].strip()


def _workbook(wb: Workbook, results: dict[str, Result]) -> str:
    out = [f'<article id="{esc(wb.key)}"><h2 class="book">{esc(wb.title)}</h2>']
    for i, section in enumerate(wb.sections):
        out.append(f'<div class="section" id="{esc(wb.key)}-{i}">')
        if section.title:
            out.append(f"<h2>{esc(section.title)}</h2>")
        out.append('<div class="grid">')
        for item in section.items:
            wide = item.kind == "text" or item.visualization not in charts.CHARTS
            cell = panel(item, results.get(item.name, Result()))
            out.append(f'<div class="cell{" wide" if wide else ""}">{cell}</div>')
        out.append("</div></div>")
    out.append("</article>")
    return "".join(out)


CSS = """
:root{--fg:#201f1e;--muted:#605e5c;--line:#e1dfdd;--bg:#faf9f8;--card:#fff}
*{box-sizing:border-box}
body{margin:0;padding:16px 24px 48px;font:14px/1.4 "Segoe UI",system-ui,-apple-system,
 "Helvetica Neue",Arial,sans-serif;color:var(--fg);background:var(--bg)}
header h1{font-size:22px;margin:0 0 4px}
.meta{color:var(--muted);margin:0 0 6px;font-size:13px}
.warn{margin:4px 0;padding:6px 10px;background:#fff4ce;border-left:4px solid #c19c00;font-size:13px}
nav{margin:8px 0 12px;font-size:13px;color:var(--muted)}
nav p{margin:2px 0}
nav a{margin-right:10px;color:#0067b8;text-decoration:none}
h2{font-size:17px;margin:18px 0 8px;padding-bottom:4px;border-bottom:1px solid var(--line)}
h2.book{font-size:20px;border:0;margin-top:26px}
h3{font-size:14px;margin:0 0 8px;font-weight:600}
.grid{display:grid;grid-template-columns:repeat(auto-fit,minmax(560px,1fr));gap:12px}
.cell.wide{grid-column:1/-1}
.panel{background:var(--card);border:1px solid var(--line);border-radius:4px;padding:10px 12px;
 min-width:0}
.panel.failed{border:1px dashed #d13438;background:#fdf3f4}
.reason{color:#a4262c;margin:0}
.empty{color:var(--muted);margin:0;font-style:italic}
.note{color:var(--muted);font-size:13px;background:#f3f2f1;border-radius:4px;padding:6px 10px}
.note p{margin:2px 0}
.tiles{display:flex;flex-wrap:wrap;gap:8px}
.tile{flex:1 1 150px;max-width:240px;border:1px solid var(--line);border-left:6px solid var(--level);
 border-radius:4px;padding:6px 10px;background:#fff}
.tile-value{font-size:28px;font-weight:600;line-height:1.1}
.tile-title{font-weight:600;font-size:13px}
.tile-sub{color:var(--muted);font-size:11px}
.table-wrap{overflow-x:auto;max-height:460px;overflow-y:auto}
table{border-collapse:collapse;width:100%;font-size:12.5px}
th{position:sticky;top:0;background:#f3f2f1;text-align:left;font-weight:600;padding:4px 8px;
 border-bottom:1px solid var(--line);white-space:nowrap}
td{padding:3px 8px;border-bottom:1px solid #f3f2f1;vertical-align:top;max-width:420px;
 overflow-wrap:anywhere}
tbody tr:nth-child(even){background:#faf9f8}
td.id{font-family:ui-monospace,Consolas,monospace;font-size:12px;white-space:nowrap}
td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
td.bar{background:linear-gradient(90deg,color-mix(in srgb,var(--c) 22%,transparent) var(--w),
 transparent var(--w))}
.pill{display:inline-block;padding:0 6px;border-radius:8px;color:#fff;background:var(--c);
 font-size:12px;white-space:nowrap}
.more{color:var(--muted);font-size:12px;margin:4px 0 0}
.chart svg{width:100%;height:auto}
"""
