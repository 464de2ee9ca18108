"""Where things are: the repository, the shared specs, the contract."""

from __future__ import annotations

import json
from functools import cache

from helpers import REPO

SHARED = (REPO / ".." / "shared").resolve()
INFRA = REPO / "infra"
DASHBOARDS = REPO / "dashboards"
QUERIES = DASHBOARDS / "queries"
CONTRACT_JSON = REPO / "src" / "se_forwarder" / "contract.json"
CONTRACT_MD = SHARED / "spec" / "record-contract.md"
WORKBOOK_SCHEMA = SHARED / "schemas" / "workbook.schema.json"
KQL_TOOL = REPO / "tools" / "kql"
BUILD_WORKBOOKS = REPO / "tools" / "build_workbooks.py"
WORKBOOK_QUERIES = QUERIES / "workbook"  # the .kql files the workbooks' queries come from
WORKBOOKS = sorted(DASHBOARDS.glob("*.workbook.json"))


@cache
def contract() -> dict:
    return json.loads(CONTRACT_JSON.read_text("utf-8"))


def kql_tables() -> dict[str, list[list[str]]]:
    """The two Log Analytics tables as Kusto schemas, generated from contract.json.

    Contract types are Kusto scalar type names (string, datetime, dynamic, int, long, real, bool).
    """
    return {
        spec["table"]: [[c["name"], c["type"]] for c in spec["columns"]]
        for spec in contract()["tables"].values()
    }


def transform_input(key: str) -> dict[str, list[list[str]]]:
    """What a DCR transformation sees: the virtual table ``source`` with the stream's columns."""
    spec = contract()["tables"][key]
    return {"source": [[c["name"], c["type"]] for c in spec["columns"]]}
