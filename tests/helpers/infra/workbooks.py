"""Walk workbook JSON: items, parameters, queries; substitute parameters for analysis."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from types import ModuleType

from .paths import BUILD_WORKBOOKS

LOG_ANALYTICS = "microsoft.operationalinsights/workspaces"


@dataclass
class WorkbookQuery:
    workbook: str
    path: str  # e.g. items[2].content.items[1]
    name: str
    kind: str  # "item" or "parameter"
    text: str
    content: dict  # the item's content (or the parameter definition)


@cache
def generator() -> ModuleType:
    """tools/build_workbooks.py, imported in-process (it is a script, not a package)."""
    spec = importlib.util.spec_from_file_location("build_workbooks", BUILD_WORKBOOKS)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while it is executed
    spec.loader.exec_module(module)
    return module


def load(path: Path) -> dict:
    return json.loads(path.read_text("utf-8"))


def walk_items(items: list, prefix: str = "items"):
    for i, item in enumerate(items):
        p = f"{prefix}[{i}]"
        yield p, item
        if item.get("type") == 12:
            yield from walk_items(item["content"].get("items", []), f"{p}.content.items")


def parameters(wb: dict) -> dict[str, dict]:
    out = {}
    for _, item in walk_items(wb["items"]):
        if item.get("type") == 9:
            for prm in item["content"].get("parameters", []):
                if prm["name"] in out:
                    raise ValueError(f"parameter {prm['name']} declared twice")
                out[prm["name"]] = prm
    return out


def queries(wb: dict, workbook_name: str) -> list[WorkbookQuery]:
    """Every Log Analytics query of the workbook (query items and query-backed parameters)."""
    out = []
    for p, item in walk_items(wb["items"]):
        c = item.get("content", {})
        if item.get("type") == 3 and "query" in c:
            if c.get("queryType", 0) == 0:
                out.append(
                    WorkbookQuery(workbook_name, p, item.get("name", p), "item", c["query"], c)
                )
        elif item.get("type") == 9:
            for j, prm in enumerate(c.get("parameters", [])):
                if "query" in prm and prm.get("queryType", 0) == 0:
                    out.append(
                        WorkbookQuery(
                            workbook_name,
                            f"{p}.content.parameters[{j}]",
                            f"parameter {prm['name']}",
                            "parameter",
                            prm["query"],
                            prm,
                        )
                    )
    return out


_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)(?::([A-Za-z]+))?\}")


class UnknownParameter(KeyError):
    pass


def substitute(text: str, params: dict[str, dict]) -> str:
    """Replace {Param} / {Param:format} with a representative value, the way the portal would.

    Raises UnknownParameter for a placeholder that names no parameter of the workbook.
    """

    def repl(m: re.Match) -> str:
        name, fmt = m.group(1), m.group(2)
        prm = params.get(name)
        if prm is None:
            raise UnknownParameter(name)
        ptype = prm.get("type")
        if ptype == 4:  # time range
            return {
                None: "> ago(1d)",
                "grain": "1h",
                "start": "datetime(2026-01-01T00:00:00Z)",
                "end": "datetime(2026-01-02T00:00:00Z)",
                "label": "Last 24 hours",
            }[fmt]
        if ptype == 2 and prm.get("multiSelect"):
            q = prm.get("quote", "")
            return f"{q}*{q}"
        if ptype == 1:
            return "00000000-0000-0000-0000-000000000000"
        if ptype in (5, 6):
            return "/subscriptions/00000000-0000-0000-0000-000000000000"
        return "x"

    return _PLACEHOLDER.sub(repl, text)


def placeholders(text: str) -> set[str]:
    return {m.group(1) for m in _PLACEHOLDER.finditer(text)}
