"""Walk workbook JSON: items, parameters, queries; substitute parameters for analysis."""

from __future__ import annotations

import importlib.util
import json
import sys
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import cache
from pathlib import Path
from types import ModuleType

from se_forwarder.report.kql import params as report_params

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


ANALYSIS_NOW = datetime(2026, 1, 2, tzinfo=UTC)


def substitute(text: str, params: dict[str, dict]) -> str:
    """Replace {Param} / {Param:format} with a representative value, the way the portal would
    (se_forwarder.report.kql.params: the one implementation), for static analysis.

    Raises UnknownParameter for a placeholder that names no parameter of the workbook.
    """
    values: dict[str, object] = {}
    for name, prm in params.items():
        if prm.get("type") == report_params.TIME_RANGE:
            values[name] = report_params.TimeRange(timedelta(days=1), timedelta(hours=1))
        elif prm.get("type") == report_params.TEXT:
            values[name] = "00000000-0000-0000-0000-000000000000"
        elif prm.get("type") in (report_params.RESOURCE, report_params.RESOURCE_TYPE):
            values[name] = "/subscriptions/00000000-0000-0000-0000-000000000000"
        elif prm.get("type") == report_params.DROPDOWN and prm.get("multiSelect"):
            values[name] = None  # "all"
    return report_params.substitute(text, params, values, now=ANALYSIS_NOW)


UnknownParameter = report_params.UnknownParameter
placeholders = report_params.placeholders
