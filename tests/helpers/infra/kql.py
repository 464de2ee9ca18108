"""Run Kusto's language service (tools/kql/check.js, Node) over a batch of queries."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from .paths import KQL_TOOL, kql_tables

SETUP_HINT = "run `npm ci --prefix tools/kql` (Node 18+) before the tests"


class KqlToolMissing(RuntimeError):
    pass


@dataclass
class Query:
    id: str
    text: str
    tables: dict | None = (
        None  # replaces the contract tables (e.g. {"source": ...} for a transform)
    )


@dataclass
class Result:
    id: str
    errors: list[dict]
    warnings: list[dict]
    syntax_kinds: list[str]
    tables_referenced: list[str]
    result_columns: list[str] | None
    functions_called: list[str] = field(default_factory=list)
    raw: dict = field(repr=False, default_factory=dict)

    def describe_errors(self) -> str:
        return "; ".join(
            f"{e['code']} at {e['start']} ({e['text']!r}): {e['message']}" for e in self.errors
        )


def ensure_tool() -> str:
    node = shutil.which("node")
    if node is None:
        raise KqlToolMissing(f"`node` is not on PATH: install Node.js 18+ and {SETUP_HINT}")
    pkg = KQL_TOOL / "node_modules" / "@kusto" / "language-service-next" / "package.json"
    if not pkg.is_file():
        raise KqlToolMissing(f"{pkg} is missing: {SETUP_HINT}")
    return node


def analyze(
    queries: list[Query], tables: dict | None = None, timeout: float = 240
) -> dict[str, Result]:
    """Analyze every query in one Node process; return results by id."""
    node = ensure_tool()
    ids = [q.id for q in queries]
    if len(set(ids)) != len(ids):
        raise ValueError(f"duplicate query ids: {sorted({i for i in ids if ids.count(i) > 1})}")
    payload = {
        "tables": tables if tables is not None else kql_tables(),
        "queries": [
            {"id": q.id, "text": q.text, **({"tables": q.tables} if q.tables else {})}
            for q in queries
        ],
    }
    proc = subprocess.run(
        [node, str(KQL_TOOL / "check.js")],
        input=json.dumps(payload),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(
            f"check.js failed (exit {proc.returncode}): {proc.stderr.strip()[:2000]}"
        )
    out = json.loads(proc.stdout)
    results = {}
    for r in out["results"]:
        cols = r.get("resultColumns")
        results[r["id"]] = Result(
            id=r["id"],
            errors=r["errors"],
            warnings=r["warnings"],
            syntax_kinds=r["syntaxKinds"],
            tables_referenced=r["tablesReferenced"],
            result_columns=[c[0] for c in cols] if cols is not None else None,
            functions_called=r.get("functionsCalled", []),
            raw=r,
        )
    return results


# --- the DCR transformation subset -----------------------------------------------------------
# Azure Monitor "Supported KQL features in transformations": input is the virtual table `source`;
# tabular operators extend, project, where, parse, project-away, project-rename, print, datatable
# (plus columnifexists and the scalar functions). Not summarize, join, mv-expand, union, etc.
TRANSFORM_ALLOWED_OPERATORS = {
    "ExtendOperator",
    "ProjectOperator",
    "FilterOperator",
    "ParseOperator",
    "ProjectAwayOperator",
    "ProjectRenameOperator",
    "PrintOperator",
    "DataTableExpression",
}


# Scalar functions from the same page (conservative: only these are accepted in a transform).
TRANSFORM_ALLOWED_FUNCTIONS = {
    # conversion
    "tobool",
    "todatetime",
    "todouble",
    "toint",
    "tolong",
    "toreal",
    "tostring",
    "totimespan",
    # date and time
    "ago",
    "datetime_add",
    "datetime_diff",
    "dayofmonth",
    "dayofweek",
    "dayofyear",
    "endofday",
    "endofmonth",
    "endofweek",
    "endofyear",
    "getmonth",
    "getyear",
    "hourofday",
    "make_datetime",
    "make_timespan",
    "now",
    "startofday",
    "startofmonth",
    "startofweek",
    "startofyear",
    "weekofyear",
    # dynamic
    "array_concat",
    "array_length",
    "pack_array",
    "pack",
    "parse_json",
    "parse_xml",
    "zip",
    # math
    "abs",
    "bin",
    "bin_at",
    "ceiling",
    "exp",
    "floor",
    "log",
    "pow",
    "round",
    "sign",
    "sqrt",
    # conditional
    "case",
    "iif",
    "iff",
    "max_of",
    "min_of",
    # string
    "base64_decodestring",
    "base64_encodestring",
    "countof",
    "extract",
    "extract_all",
    "indexof",
    "isempty",
    "isnotempty",
    "parse_path",
    "replace",
    "split",
    "strcat",
    "strcat_delim",
    "strlen",
    "substring",
    "tolower",
    "toupper",
    "trim",
    "trim_end",
    "trim_start",
    "hash_sha256",
    # type and special
    "isnotnull",
    "isnull",
    "columnifexists",
}


def operator_kinds(result: Result) -> set[str]:
    """Syntax kinds that are query operators (…Operator), plus the tabular datatable expression."""
    return {k for k in result.syntax_kinds if k.endswith("Operator") or k == "DataTableExpression"}


def transform_violations(result: Result) -> list[str]:
    problems = []
    bad_ops = sorted(operator_kinds(result) - TRANSFORM_ALLOWED_OPERATORS)
    if bad_ops:
        problems.append(f"operators outside the transformation subset: {bad_ops}")
    bad_functions = sorted(set(result.functions_called) - TRANSFORM_ALLOWED_FUNCTIONS)
    if bad_functions:
        problems.append(f"functions outside the transformation subset: {bad_functions}")
    other_tables = sorted(set(result.tables_referenced) - {"source"})
    if other_tables:
        problems.append(f"reads tables other than `source`: {other_tables}")
    if "source" not in result.tables_referenced:
        problems.append("does not read `source`")
    return problems


# --- KQL files -------------------------------------------------------------------------------


def kql_files(folder: Path, pattern: str = "*.kql") -> list[Path]:
    return sorted(folder.glob(pattern))


_COMMENT = re.compile(r"^\s*//")


def header_comment(text: str) -> str:
    lines = []
    for line in text.splitlines():
        if not _COMMENT.match(line):
            break
        lines.append(line)
    return "\n".join(lines)
