"""A workbook's JSON read as the report's plan: its sections, in order, and each visible item
(text, query or merge) with the title, visualization and settings the portal would use.

What the portal shows when the workbook opens is what the report shows: parameters take their
saved values, an item hidden by its ``conditionalVisibility`` under those values is left out
(the merges' hidden data sources), and each query item keeps its own time range
(``timeContext``) or the one of the parameter it follows. A drill-down (an item waiting for a
parameter that a grid's row selection sets) stays in its section with ``drill`` naming that
parameter: the report runs it for a few of the grids' rows (``execute``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import timedelta
from pathlib import Path
from typing import Any

from ..kql import params as wbparams

TEXT, QUERY, PARAMETERS, GROUP = 1, 3, 9, 12
LOG_ANALYTICS, RESOURCE_GRAPH, MERGE = 0, 1, 7


@dataclass(frozen=True, slots=True)
class Item:
    """One item the report draws (or one a merge reads: ``visible`` False)."""

    name: str
    kind: str  # "text", "query" (Log Analytics), "arg" (Resource Graph), "merge"
    title: str = ""
    text: str = ""  # markdown of a text item; the query (or merge JSON) of the others
    visualization: str = "table"
    content: Mapping[str, Any] = field(default_factory=dict)
    timespan: timedelta | None = None
    visible: bool = True
    style: str = ""  # a text item's style ("info", "warning"...)
    exports: str = ""  # the parameter a row selection sets (``exportParameterName``)
    export_field: str = ""  # ... from this column of the selected row
    drill: str = ""  # hidden until ``drill`` (a parameter some item exports) has a value


@dataclass(slots=True)
class Section:
    title: str
    items: list[Item] = field(default_factory=list)


@dataclass(slots=True)
class Workbook:
    key: str  # the file name without .workbook.json
    title: str
    intro: str
    params: dict[str, dict[str, Any]]
    sections: list[Section]
    hidden: dict[str, Item]  # every query item by name, the hidden data sources included


def load(path: Path, queries: Path) -> Workbook:
    """The plan of ``path``; each query item's KQL is read from its file under ``queries``
    (``<workbook>/<name>.kql``), the same file the workbook's copy is generated from."""
    import json

    key = path.name.removesuffix(".workbook.json")
    wb = json.loads(path.read_text("utf-8"))
    declared = wbparams.declared(wb)
    out = Workbook(key, key, "", declared, [], {})
    loose = Section("")
    exported = _exported(wb.get("items", []))
    for raw in wb.get("items", []):
        if raw.get("type") == GROUP:
            _flush(out, loose)
            loose = Section("")
            section = Section(raw["content"].get("title", ""))
            section.items = _items(raw["content"].get("items", []), out, queries / key, exported)
            out.sections.append(section)
        elif raw.get("type") == TEXT and not out.intro and not out.sections:
            out.title, out.intro = _heading(raw["content"].get("json", ""))
        else:
            loose.items += _items([raw], out, queries / key, exported)
    _flush(out, loose)
    return out


def _flush(out: Workbook, loose: Section) -> None:
    if loose.items:
        out.sections.append(loose)


def _heading(markdown: str) -> tuple[str, str]:
    """The first ``# title`` line of the workbook's title item, and the rest."""
    lines = markdown.splitlines()
    if lines and lines[0].startswith("#"):
        return lines[0].lstrip("# ").strip(), "\n".join(lines[1:]).strip()
    return "", markdown


def _items(
    raw_items: list[dict[str, Any]], wb: Workbook, folder: Path, exported: set[str]
) -> list[Item]:
    out = []
    for raw in raw_items:
        kind, content = raw.get("type"), raw.get("content", {})
        visible = _visible(raw, wb.params)
        if kind == TEXT and visible:
            out.append(
                Item(
                    raw.get("name", ""),
                    "text",
                    text=content.get("json", ""),
                    style=content.get("style", ""),
                )
            )
        elif kind == QUERY:
            item = _query(raw, content, wb.params, folder, visible)
            drill = "" if visible else _waits_for(raw, exported)
            if drill:
                item = replace(item, drill=drill)
            wb.hidden[item.name] = item
            if visible or drill:
                out.append(item)
    return out


def _exported(items: list[dict[str, Any]]) -> set[str]:
    """The parameters some grid's row selection sets."""
    out = set()
    for raw in items:
        content = raw.get("content", {})
        if raw.get("type") == GROUP:
            out |= _exported(content.get("items", []))
        elif content.get("exportParameterName") and content.get("exportFieldName"):
            out.add(content["exportParameterName"])
    return out


def _waits_for(raw: Mapping[str, Any], exported: set[str]) -> str:
    """The exported parameter an item is hidden for, when that is its only condition
    (``isNotEqualTo ""``: shown once a row is selected)."""
    conditions = raw.get("conditionalVisibilities") or (
        [raw["conditionalVisibility"]] if "conditionalVisibility" in raw else []
    )
    if (
        len(conditions) == 1
        and conditions[0].get("comparison") == "isNotEqualTo"
        and conditions[0].get("value", "") == ""
        and conditions[0].get("parameterName") in exported
    ):
        return str(conditions[0]["parameterName"])
    return ""


def _query(
    raw: dict[str, Any],
    content: Mapping[str, Any],
    params: dict[str, dict[str, Any]],
    folder: Path,
    visible: bool,
) -> Item:
    name = raw.get("name", "")
    qtype = content.get("queryType", LOG_ANALYTICS)
    kind = {LOG_ANALYTICS: "query", RESOURCE_GRAPH: "arg", MERGE: "merge"}.get(qtype, "other")
    text = content.get("query", "")
    if kind in ("query", "arg"):
        file = folder / f"{name}.kql"
        text = file.read_text("utf-8") if file.is_file() else ""
    return Item(
        name,
        kind,
        content.get("title", name),
        text,
        content.get("visualization", "table"),
        content,
        _span(content, params),
        visible,
        exports=content.get("exportParameterName", "") if content.get("exportFieldName") else "",
        export_field=content.get("exportFieldName", ""),
    )


def _span(content: Mapping[str, Any], params: dict[str, dict[str, Any]]) -> timedelta | None:
    if "timeContext" in content:
        return timedelta(milliseconds=content["timeContext"]["durationMs"])
    prm = content.get("timeContextFromParameter")
    if prm and prm in params:
        span: timedelta | None = wbparams.saved_value(params[prm]).duration
        return span
    return None


def _visible(raw: Mapping[str, Any], params: dict[str, dict[str, Any]]) -> bool:
    """Every condition of the item holds with the parameters' saved values."""
    conditions = raw.get("conditionalVisibilities") or (
        [raw["conditionalVisibility"]] if "conditionalVisibility" in raw else []
    )
    for cond in conditions:
        prm = params.get(cond.get("parameterName", ""))
        value = "" if prm is None else _saved_text(prm)
        equal = value == str(cond.get("value", ""))
        if (cond.get("comparison") == "isEqualTo") != equal:
            return False
    return True


def _saved_text(prm: Mapping[str, Any]) -> str:
    value = prm.get("value", prm.get("defaultValue"))
    return "" if value is None else str(value)
