"""Every KQL query of the project, gathered once and analyzed in one Node process."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path

from . import kql, workbooks
from .paths import QUERIES, REPO, WORKBOOK_QUERIES, WORKBOOKS, contract


@dataclass
class Entry:
    id: str
    kind: str  # library, alert, transform, workbook, negative
    query: kql.Query
    source: Path | None = None  # the .kql file; for a workbook query, the workbook JSON
    transform_key: str | None = None  # contract table key for a transform
    workbook_query: workbooks.WorkbookQuery | None = None
    query_file: Path | None = None  # for a workbook query: the .kql file it comes from


def _rel(p: Path) -> str:
    return p.relative_to(REPO).as_posix()


@cache
def entries() -> tuple[Entry, ...]:
    out = []
    for p in kql.kql_files(QUERIES):
        out.append(Entry(_rel(p), "library", kql.Query(_rel(p), p.read_text("utf-8")), p))
    for p in kql.kql_files(QUERIES / "alerts"):
        out.append(Entry(_rel(p), "alert", kql.Query(_rel(p), p.read_text("utf-8")), p))
    keys = set(contract()["tables"])
    for p in kql.kql_files(QUERIES / "transforms"):
        key = p.stem
        if key not in keys:
            raise ValueError(
                f"{_rel(p)}: the file name must be a contract table key ({sorted(keys)})"
            )
        from .paths import transform_input

        out.append(
            Entry(
                _rel(p),
                "transform",
                kql.Query(_rel(p), p.read_text("utf-8"), transform_input(key)),
                p,
                transform_key=key,
            )
        )
    # Workbook queries are analyzed from the .kql files they are generated from
    # (tools/build_workbooks.py; test_workbooks.py holds the JSON to them), with the workbook's
    # parameters substituted as the portal would. Resource Graph files are not Log Analytics KQL.
    gen = workbooks.generator()
    for wb_path in WORKBOOKS:
        wb = workbooks.load(wb_path)
        params = workbooks.parameters(wb)
        files = {s.where: s.file for s in gen.slots(wb, wb_path, WORKBOOK_QUERIES)}
        for q in workbooks.queries(wb, wb_path.name):
            f = files.get(q.path)
            if f is None or not f.is_file():
                raise ValueError(
                    f"{_rel(wb_path)}#{q.path} ({q.name}): no source file "
                    f"(run `python tools/build_workbooks.py --extract`)"
                )
            qid = f"{_rel(f)} ({wb_path.name} {q.name})"
            text = workbooks.substitute(gen.query_of(f), params)
            out.append(
                Entry(
                    qid,
                    "workbook",
                    kql.Query(qid, text),
                    wb_path,
                    workbook_query=q,
                    query_file=f,
                )
            )
    return tuple(out)


# Queries that must NOT pass: they prove the analysis really checks names against the contract.
NEGATIVE = {
    "negative:unknown-column": "ScheduledEvents_CL | where NoSuchColumn == 'x'",
    "negative:wrong-case": "ScheduledEvents_CL | where AffectsThisVM == true",
    "negative:other-tables-column": "ScheduledEventsAgent_CL | where Phase == 'Started'",
    "negative:unknown-table": "ScheduledEvent_CL | take 1",
    "negative:syntax": "ScheduledEvents_CL | where",
    "negative:unknown-function": "ScheduledEvents_CL | extend x = no_such_function(EventId)",
}
NEGATIVE_TRANSFORMS = {
    "negative-transform:summarize": ("records", "source | summarize count() by EventId"),
    "negative-transform:join": ("records", "source | join kind=inner (source) on RecordId"),
    "negative-transform:mv-expand": ("records", "source | mv-expand Resources"),
    "negative-transform:other-table": ("records", "ScheduledEvents_CL | extend x = 1"),
    "negative-transform:unknown-column": ("heartbeats", "source | extend x = Phase"),
    "negative-transform:function": (
        "records",
        "source | extend Day = format_datetime(TimeGenerated, 'yyyy')",
    ),
}


@cache
def results() -> dict[str, kql.Result]:
    """Analyze every query (and the negative controls) in one run of the language service."""
    from .paths import transform_input

    queries = [e.query for e in entries()]
    queries += [kql.Query(k, v) for k, v in NEGATIVE.items()]
    queries += [
        kql.Query(k, text, transform_input(key)) for k, (key, text) in NEGATIVE_TRANSFORMS.items()
    ]
    return kql.analyze(queries)


def results_or_fail(factory) -> dict[str, kql.Result]:
    """``results()`` once per test run (helpers/once.py; ``factory``: the run's
    ``tmp_path_factory``), or a test failure (not a skip) that says how to install the tool.
    test_kql.py and test_workbooks.py both read them, and ``--dist loadfile`` may hand them to two
    workers."""
    import pytest

    from helpers.once import once_value

    try:
        kql.ensure_tool()  # before the shared build: its failure is this message on every worker
        return once_value(factory, "kql-results", lambda _: results())
    except kql.KqlToolMissing as exc:
        pytest.fail(f"KQL language service not installed: {exc}", pytrace=False)
