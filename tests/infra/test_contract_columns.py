"""The contract's columns are append-only: deploying infra/tables.bicep replaces a table's schema
(a full PUT), so a column removed from contract.json would be deleted from the workspace with
its data, and a changed type would be refused or break every query of the old rows.

tests/infra/contract_columns.baseline.json lists every column ever deployed, by table, with its
type. contract.json may add columns (append them to the baseline in the same change); it may not
drop
or retype one.
"""

from __future__ import annotations

import json
from pathlib import Path

from helpers.infra.paths import contract

BASELINE = Path(__file__).with_name("contract_columns.baseline.json")


def removed_or_retyped(
    baseline: dict[str, list[list[str]]], current: dict[str, list[list[str]]]
) -> list[str]:
    problems = []
    for table, columns in baseline.items():
        now = dict(map(tuple, current.get(table, [])))
        if table not in current:
            problems.append(f"table {table} is gone from contract.json")
            continue
        for name, typ in columns:
            if name not in now:
                problems.append(f"{table}.{name} ({typ}) was removed")
            elif now[name] != typ:
                problems.append(f"{table}.{name} changed type {typ} -> {now[name]}")
    return problems


def current_columns() -> dict[str, list[list[str]]]:
    return {
        t["table"]: [[c["name"], c["type"]] for c in t["columns"]]
        for t in contract()["tables"].values()
    }


def test_no_deployed_column_is_removed_or_retyped():
    baseline = json.loads(BASELINE.read_text("utf-8"))["tables"]
    problems = removed_or_retyped(baseline, current_columns())
    assert problems == [], (
        "contract.json is append-only (a table deployment is a full PUT and would delete the "
        "column and its data): " + "; ".join(problems)
    )


def test_new_columns_are_recorded_in_the_baseline():
    baseline = json.loads(BASELINE.read_text("utf-8"))["tables"]
    new = [
        f"{table}.{name}"
        for table, columns in current_columns().items()
        for name, _ in columns
        if [name] not in [[n] for n, _ in baseline.get(table, [])]
    ]
    assert new == [], (
        f"append {new} to {BASELINE.name} (name and type) in this change, so a "
        "later removal is caught"
    )


def test_the_check_catches_a_removal_and_a_type_change():
    baseline = {"T_CL": [["A", "string"], ["B", "int"]]}
    assert (
        removed_or_retyped(baseline, {"T_CL": [["A", "string"], ["B", "int"], ["C", "bool"]]}) == []
    )
    assert removed_or_retyped(baseline, {"T_CL": [["B", "int"]]}) == ["T_CL.A (string) was removed"]
    assert removed_or_retyped(baseline, {"T_CL": [["A", "string"], ["B", "long"]]}) == [
        "T_CL.B changed type int -> long"
    ]
    assert removed_or_retyped(baseline, {}) == ["table T_CL is gone from contract.json"]
