#!/usr/bin/env python3
"""How many rows every workbook item returns at fleet size, beside the portal's limit: a
workbook's Log Analytics result is cut at 10,000 rows (silently; a hidden item that feeds a merge
then gives wrong merges). Printed, not asserted; dashboards/README.md says how each item stays
inside the limit.

    .venv/bin/python bench/workbook_rows.py                         # 10,000 VMs x 30 days
    .venv/bin/python bench/workbook_rows.py --days 8 --fine-days 2  # 10,000 VMs, lighter
    .venv/bin/python bench/workbook_rows.py --vms 1040 --churn      # a churning fleet
    .venv/bin/python bench/workbook_rows.py --quick                 # 52 VMs x 2 days (smoke test)
    # before/after on one fleet: the baseline's dashboards exported from a git revision
    git archive main dashboards | tar -x -C /tmp/before
    .venv/bin/python bench/workbook_rows.py --baseline /tmp/before/dashboards \
        --items fleet,agent-events

The fleet is generated and loaded as bench/report_speed.py does (heartbeats older than
--fine-days come hourly). Items whose time range is longer than --days see fewer events than a
fleet of that age would: the table prints each item's range beside its rows.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import tempfile
import time
from datetime import timedelta
from pathlib import Path

from report_speed import generate

from se_forwarder.report import Engine, build
from se_forwarder.report.kql import params as wbparams
from se_forwarder.report.workbooks import execute, workbook
from se_forwarder_testbed.fleet import FleetSpec

LIMIT = 10_000  # rows of one workbook query result (Azure Monitor workbooks)


def _span(item) -> str:
    span = item.timespan
    if span is None:
        return "in query"
    return (
        f"{span // timedelta(days=1)}d"
        if span >= timedelta(days=1)
        else f"{span // timedelta(hours=1)}h"
    )


def _results(dashboards: Path, key: str, engine: Engine, only: set[str] | None) -> dict:
    """(result, item) by item name: the workbook's items (``only`` those named) of
    ``dashboards``."""
    wb = workbook.load(dashboards / f"{key}.workbook.json", dashboards / "queries" / "workbook")
    if only is not None:
        wb = dataclasses.replace(wb, hidden={k: v for k, v in wb.hidden.items() if k in only})
    results = execute.run_workbook(wb, engine, None)
    return {name: (results[name], wb.hidden[name]) for name in results}


def _count(result) -> str:
    if result is None:
        return ""
    return "-" if result.error is not None else f"{len(result.rows):,}"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vms", type=int, default=10_000)
    ap.add_argument("--days", type=int, default=30)
    ap.add_argument("--fine-days", type=int, default=7)
    ap.add_argument("--churn", action="store_true", help="a churning fleet (FleetSpec.churn)")
    ap.add_argument("--quick", action="store_true", help="52 VMs x 2 days, every heartbeat")
    ap.add_argument(
        "--baseline", type=Path, help="another dashboards folder: its rows beside these"
    )
    ap.add_argument("--items", help="comma-separated item names (default: every item)")
    args = ap.parse_args(argv)
    if not args.quick:  # measured cold: no translation read from disk; a smoke test (--quick)
        os.environ.pop("SE_FORWARDER_KQL_CACHE", None)  # checks the script, not its figures
    only = set(args.items.split(",")) if args.items else None
    spec = (
        FleetSpec(vms=52, days=2, churn=args.churn)
        if args.quick
        else FleetSpec(vms=args.vms, days=args.days, fine_days=args.fine_days, churn=args.churn)
    )
    dashboards = build.dashboards_dir()
    with tempfile.TemporaryDirectory(prefix="se-rows-bench-") as tmp:
        t0 = time.perf_counter()
        meta = generate(spec, Path(tmp))
        counts = meta["counts"]
        engine = Engine(
            files=[Path(tmp) / "records.jsonl", Path(tmp) / "heartbeats.jsonl"], now=meta["end"]
        )
        print(
            f"fleet: {spec.vms:,} VMs x {spec.days} days{' (churning)' if spec.churn else ''}: "
            f"{counts['records']:,} records, {counts['heartbeats']:,} heartbeats, generated and "
            f"loaded in {time.perf_counter() - t0:.0f} s"
        )
        base = "before" if args.baseline else ""
        print(f"{'item':<44} {'kind':<7} {'range':>8} {base:>8} {'rows':>8} {'limit':>7}  verdict")
        worst = 0
        for key in build.WORKBOOKS:
            now = _results(dashboards, key, engine, only)
            old = _results(args.baseline, key, engine, only) if args.baseline else {}
            for name in sorted(now):
                (r, item), before = now[name], _count(old.get(name, (None, None))[0])
                if r.error is not None:
                    print(
                        f"{key + '/' + name:<44} {item.kind:<7} {_span(item):>8} {before:>8} "
                        f"{'-':>8} {LIMIT:>7,}  "
                        f"not run here: {r.error[:50]}"
                    )
                    continue
                n = len(r.rows)
                worst = max(worst, n)
                verdict = (
                    "OVER THE LIMIT" if n > LIMIT else ("at the limit" if n == LIMIT else "ok")
                )
                print(
                    f"{key + '/' + name:<44} {item.kind:<7} {_span(item):>8} {before:>8} {n:>8,} "
                    f"{LIMIT:>7,}  {verdict}"
                )
        print(f"largest result: {worst:,} rows of {LIMIT:,}")
        for key in build.WORKBOOKS:
            _defaults(dashboards, key, engine)


def _defaults(dashboards: Path, key: str, engine: Engine) -> None:
    """The value each query-driven drop-down opens on (``VmSlice``: all VMs or one slice), and
    what its query costs (it runs once before the items that read it)."""
    wb = workbook.load(dashboards / f"{key}.workbook.json", dashboards / "queries" / "workbook")
    for name, prm in wb.params.items():
        if wbparams.query_default(prm):
            t0 = time.perf_counter()
            rows = engine.run(prm["query"], declared=wb.params)
            print(
                f"{key}/parameters/{name}: opens on {wbparams.selected_value(prm, rows)!r} of "
                f"{len(rows)} choices (its query: {time.perf_counter() - t0:.1f} s)"
            )


if __name__ == "__main__":
    main()
