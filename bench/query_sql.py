#!/usr/bin/env python3
"""Every dashboard query's SQL in the local engine: its size and DuckDB's planning time (CPU),
for this tree's dashboards/ beside another commit's (``--before``), on one small fleet, with the
same engine. A KQL construct can make duckdb-kql's SQL grow with the product of its nested
conversions (``strcat(tostring(toint(...)))``: 350 kB and seconds of planning for one column),
whatever the data's size; this finds such a query. Printed, not asserted.

    .venv/bin/python bench/query_sql.py                   # this tree beside main
    .venv/bin/python bench/query_sql.py --before HEAD~1 --top 15
    .venv/bin/python bench/query_sql.py --quick           # a few queries (smoke test)
    .venv/bin/python bench/query_sql.py --narrowing       # this tree: duckdb-kql's SQL as
                                                          # written beside the engine's narrowed

Items: the workbooks' Log Analytics queries (saved parameter values; drill-downs left out, as
the report's first pass), the library (dashboards/queries/*.kql) and the alert rules' queries.
Planning: the SQL run with its bound values (on 52 VMs, planning is most of it; ``EXPLAIN``
would add rendering the plan as text, seconds for the largest), CPU time of this process (the
machine is shared: wall time says little), the best of ``--repeat`` runs.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from support import gittree

from se_forwarder.report import Engine
from se_forwarder.report.build import WORKBOOKS
from se_forwarder.report.workbooks import workbook
from se_forwarder.timefmt import format_ms
from se_forwarder_testbed.fleet import FleetSpec, generate

REPO = Path(__file__).resolve().parents[1]


def queries(dash: Path) -> dict[str, tuple[str, dict | None]]:
    """(query, declared parameters) by item name."""
    out: dict[str, tuple[str, dict | None]] = {}
    for key in WORKBOOKS:
        wb = workbook.load(dash / f"{key}.workbook.json", dash / "queries" / "workbook")
        for item in wb.hidden.values():
            if item.kind == "query" and not item.drill and item.text.strip():
                out[f"{key}/{item.name}"] = (item.text, wb.params)
    for path in sorted((dash / "queries").glob("*.kql")) + sorted(
        (dash / "queries" / "alerts").glob("*.kql")
    ):
        out[str(path.relative_to(dash / "queries"))] = (path.read_text("utf-8"), None)
    return out


def measure(
    engine: Engine, query: str, declared: dict | None, repeat: int, narrowed: bool = True
) -> tuple[int, float]:
    """(characters of SQL, best CPU seconds of planning and running it)."""
    sql, values = engine.sql(query, declared=declared, narrowed=narrowed)
    best = float("inf")
    for _ in range(repeat):
        t0 = time.process_time()
        engine.con.execute(sql, values).fetchall()
        best = min(best, time.process_time() - t0)
    return len(sql), best


def main(argv: list[str] | None = None) -> int:
    os.environ.pop("SE_FORWARDER_KQL_CACHE", None)  # measured cold: no translation read from disk
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", default="main", help="the commit whose dashboards/ to compare with")
    ap.add_argument("--repeat", type=int, default=2, help="plannings per query (the best is kept)")
    ap.add_argument("--top", type=int, default=0, help="print only the N largest (after)")
    ap.add_argument("--quick", action="store_true", help="4 queries, 1 planning each")
    ap.add_argument(
        "--narrowing",
        action="store_true",
        help="this tree only: duckdb-kql's SQL as written (before) beside the narrowed (after)",
    )
    args = ap.parse_args(argv)
    fleet = generate(FleetSpec(vms=10, days=2))  # one cell of 52 VMs: planning hardly sees rows
    with (
        tempfile.TemporaryDirectory(prefix="se-query-sql-") as tmp,
        Engine(fleet.records, fleet.heartbeats, now=format_ms(fleet.truth.end)) as engine,
    ):
        after = queries(REPO / "dashboards")
        if args.narrowing:
            before, args.before = after, "duckdb-kql's SQL as written"
        else:
            before = queries(gittree.export(args.before, Path(tmp), "dashboards") / "dashboards")
        names = sorted(set(before) | set(after))
        if args.quick:
            names, args.repeat = names[:4], 1
        rows = []
        for name in names:
            got = [
                measure(engine, *side[name], args.repeat, narrowed=not (args.narrowing and b))
                if name in side
                else None
                for b, side in ((True, before), (False, after))
            ]
            rows.append((name, *got))
    rows.sort(key=lambda r: -max(r[1][0] if r[1] else 0, r[2][0] if r[2] else 0))
    if args.top:
        rows = rows[: args.top]
    what = (
        "this tree's dashboards/, duckdb-kql's SQL as written (before) and narrowed (after)"
        if args.narrowing
        else f"dashboards/ of {args.before} (before) and of this tree (after)"
    )
    print(f"{what}, one engine; planning = the SQL run, CPU s, best of {args.repeat}")
    print(f"{'item':<52} {'SQL kB before':>13} {'after':>8} {'plan s before':>13} {'after':>7}")
    for name, b, a in rows:
        cells = [f"{x[0] / 1000:.1f}" if x else "-" for x in (b, a)] + [
            f"{x[1]:.3f}" if x else "-" for x in (b, a)
        ]
        print(f"{name:<52} {cells[0]:>13} {cells[1]:>8} {cells[2]:>13} {cells[3]:>7}")
    both = [(b, a) for _, b, a in rows if b and a]
    print(
        f"total over {len(both)} queries in both: SQL {sum(b[0] for b, _ in both) / 1000:,.0f} kB "
        "-> "
        f"{sum(a[0] for _, a in both) / 1000:,.0f} kB, planning {sum(b[1] for b, _ in both):.2f} "
        "s -> "
        f"{sum(a[1] for _, a in both):.2f} s CPU"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
