"""A workbook Merge item (``queryType`` 7, JSON ``Merge/1.0``) applied to other items' rows.

A Merge joins the results of two items of the workbook, which is how a workbook puts Resource
Graph rows beside Log Analytics rows (no single query can read both). The report runs each
source item, then this, so a merge shows the same rows as in the portal:

* ``merges``: ``{id, mergeType, leftTable, rightTable, leftColumn, rightColumn}``, applied in
  order; a later merge may name an earlier one's ``id`` as its table. Types: ``inner``,
  ``leftouter``, ``rightouter``, ``fullouter``, ``leftanti``, ``rightanti``, ``leftsemi``,
  ``rightsemi``, ``union``;
* ``projectRename``: the output columns, each ``{originalName: "[table].column", mergedName}``
  (none: every column, named ``[table].column`` when both sides have it).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ...errors import ReportError

Row = dict[str, Any]

KINDS = {
    "inner",
    "leftouter",
    "rightouter",
    "fullouter",
    "leftanti",
    "rightanti",
    "leftsemi",
    "rightsemi",
    "union",
}


class MergeError(ReportError):
    """The merge JSON cannot be applied (unknown type, table or column)."""


def sources(spec_text: str) -> list[str]:
    """The items a merge reads (its tables that are not earlier merges)."""
    spec = json.loads(spec_text)
    ids = {m["id"] for m in spec.get("merges", [])}
    out: list[str] = []
    for m in spec.get("merges", []):
        for t in (m["leftTable"], m.get("rightTable")):
            if t and t not in ids and t not in out:
                out.append(t)
    return out


def apply(spec_text: str, tables: Mapping[str, list[Row]]) -> list[Row]:
    """The merge's rows from ``tables`` (rows by item name)."""
    spec = json.loads(spec_text)
    if spec.get("version") != "Merge/1.0":
        raise MergeError(f"unsupported merge version {spec.get('version')!r}")
    done: dict[str, list[dict[str, Any]]] = {}
    last: list[dict[str, Any]] = []
    for m in spec.get("merges", []):
        left, right = (_qualified(t, tables, done) for t in (m["leftTable"], m["rightTable"]))
        last = _join(m, left, right)
        done[m["id"]] = last
    return [_project(r, spec.get("projectRename", [])) for r in last]


def _qualified(
    name: str, tables: Mapping[str, list[Row]], done: dict[str, list[dict[str, Any]]]
) -> list[dict[str, Any]]:
    """Rows with every column named ``[item].column`` (a merge's rows already are)."""
    if name in done:
        return done[name]
    if name not in tables:
        raise MergeError(f"the merge reads {name!r}, which has no result")
    return [{f"[{name}].{k}": v for k, v in row.items()} for row in tables[name]]


def _join(
    m: Mapping[str, Any], left: list[dict[str, Any]], right: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    kind = m.get("mergeType", "inner")
    if kind not in KINDS:
        raise MergeError(f"unsupported mergeType {kind!r}")
    if kind == "union":
        return left + right
    lkey, rkey = (
        _column(m["leftTable"], m["leftColumn"]),
        _column(m["rightTable"], m["rightColumn"]),
    )
    index: dict[Any, list[dict[str, Any]]] = {}
    for r in right:
        index.setdefault(_key(r, rkey, m["rightTable"]), []).append(r)
    matched: set[int] = set()
    out: list[dict[str, Any]] = []
    for row in left:
        hits = index.get(_key(row, lkey, m["leftTable"]), [])
        matched.update(id(h) for h in hits)
        if kind in ("inner", "leftouter", "fullouter", "rightouter"):
            out += [{**row, **h} for h in hits]
        if (
            (kind in ("leftouter", "fullouter") and not hits)
            or (kind == "leftanti" and not hits)
            or (kind == "leftsemi" and hits)
        ):
            out.append(dict(row))
    if kind in ("rightouter", "fullouter", "rightanti"):
        out += [dict(r) for r in right if id(r) not in matched]
    if kind == "rightsemi":
        out = [dict(r) for r in right if id(r) in matched]
    return out


def _column(table: str, column: str) -> str:
    return column if column.startswith("[") else f"[{table}].{column}"


def _key(row: Mapping[str, Any], column: str, table: str) -> Any:
    if column in row:
        return row[column]
    bare = column.split("].", 1)[-1]
    for k, v in row.items():  # a column of an earlier merge, whichever table it came from
        if k.split("].", 1)[-1] == bare:
            return v
    raise MergeError(f"{table} has no column {bare!r}")


def _project(row: Mapping[str, Any], renames: list[Mapping[str, str]]) -> Row:
    if not renames:
        return dict(row)
    return {r.get("mergedName") or r["originalName"]: row.get(r["originalName"]) for r in renames}
