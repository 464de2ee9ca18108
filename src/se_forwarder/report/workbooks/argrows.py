"""Rows of Azure Resource Graph from a file, for the report's "Azure's own record" section and
the agent-health workbook's agentless VMs to be tried offline.

The file is what ``az graph query -q 'maintenanceresources | where type ==
"microsoft.maintenance/scheduledevents"' -o json`` prints: ``{"count", "data": [...],
"skip_token", "total_records"}``, or a bare list of rows. A row is an object with the table's
columns (``maintenanceresources.json``); one without ``type`` or with ``properties`` that is not
an object is counted and skipped. Rows go to the table Resource Graph keeps their type in
(``TABLE_OF_TYPE``: VMs in ``resources``, uniform scale-set instances in ``computeresources``,
anything else in ``maintenanceresources``), all with the standard columns, so one file can hold
the output of several ``az graph query`` runs, concatenated.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from ...errors import ReportError

SCHEDULED_EVENTS = "microsoft.maintenance/scheduledevents"
DEFAULT_TABLE = "maintenanceresources"
TABLE_OF_TYPE = {
    "microsoft.compute/virtualmachines": "resources",
    "microsoft.compute/virtualmachinescalesets/virtualmachines": "computeresources",
}
#: a Resource Graph table named in a query (not a property such as ``properties.Resources``)
_TABLE_WORD = re.compile(r"(?<![.\w])[a-z]*resources\b")


class ArgFileError(ReportError):
    """The file cannot be read as Resource Graph output (one line for a person)."""


@dataclass(slots=True)
class ArgRows:
    path: Path
    rows: list[dict[str, Any]] = field(default_factory=list)
    skipped: int = 0


@cache
def schema() -> tuple[str, list[tuple[str, str]]]:
    """(table name, [(column, Kusto type)]) of ``maintenanceresources``."""
    spec = json.loads(
        resources.files(__package__).joinpath("maintenanceresources.json").read_text("utf-8")
    )
    return spec["table"], [(c[0], c[1]) for c in spec["columns"]]


def by_table(rows: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """The rows by the table Resource Graph keeps them in; ``maintenanceresources`` always."""
    out: dict[str, list[dict[str, Any]]] = {DEFAULT_TABLE: []}
    for row in rows:
        out.setdefault(TABLE_OF_TYPE.get(str(row["type"]).lower(), DEFAULT_TABLE), []).append(row)
    return out


def tables_read(query: str) -> set[str]:
    """The Resource Graph tables a query reads (comments left out)."""
    code = "\n".join(line.split("//", 1)[0] for line in query.splitlines())
    return set(_TABLE_WORD.findall(code))


def read(path: Path) -> ArgRows:
    try:
        doc = json.loads(path.read_text("utf-8"))
    except FileNotFoundError:
        raise ArgFileError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ArgFileError(f"{path}: not Resource Graph JSON ({exc})") from None
    except RecursionError:  # thousands of nested arrays: hostile, not rows
        raise ArgFileError(f"{path}: not Resource Graph JSON (nested too deeply)") from None
    data = doc.get("data") if isinstance(doc, dict) else doc
    if not isinstance(data, list):
        raise ArgFileError(
            f'{path}: expected the JSON of `az graph query` ({{"data": [...]}}) or a list of rows'
        )
    out = ArgRows(path)
    for row in data:
        if (
            isinstance(row, dict)
            and isinstance(row.get("type"), str)
            and isinstance(row.get("properties", {}), dict)
        ):
            out.rows.append(row)
        else:
            out.skipped += 1
    return out
