#!/usr/bin/env python3
"""Time every workbook query over a generated fleet in the local engine (a proxy for the
workbooks' own cost in Log Analytics), and the report's build time. Printed, not asserted.

    .venv/bin/python bench/report_speed.py                 # 10,000 VMs x 30 days
    .venv/bin/python bench/report_speed.py --quick         # 52 VMs x 2 days (smoke test)
    .venv/bin/python bench/report_speed.py --vms 1040 --days 30

At size the fleet's heartbeats older than --fine-days (default 7) before the end come hourly
(FleetSpec.fine_days): every query's short window keeps the real 5-minute interval, and a
10,000-VM, 30-day fleet has about 26 million heartbeats instead of 87 million. Rows are
streamed to two JSON Lines files, then loaded once.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from se_forwarder.report import Engine, build, execute, workbook
from se_forwarder.report.sources import Rows
from se_forwarder.timefmt import format_ms
from se_forwarder_testbed.fleet import FleetSpec, stream


def _spill(spec: FleetSpec, folder: Path) -> tuple[dict[str, int], str]:
    """Generate the fleet into records.jsonl / heartbeats.jsonl; counts and the end moment."""
    truths: list = []
    counts = {"records": 0, "heartbeats": 0}
    files = {t: (folder / f"{t}.jsonl").open("w", encoding="utf-8") for t in counts}
    try:
        for table, row in stream(spec, truths):
            files[table].write(json.dumps(row, separators=(",", ":")) + "\n")
            counts[table] += 1
    finally:
        for f in files.values():
            f.close()
    return counts, format_ms(truths[0].end)


def _rows(path: Path) -> Iterator[dict]:
    with path.open(encoding="utf-8") as f:
        for line in f:
            yield json.loads(line)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vms", type=int, default=10_000)
    ap.add_argument("--days", type=int, default=30)
    ap.add_argument("--fine-days", type=int, default=7)
    ap.add_argument("--quick", action="store_true", help="52 VMs x 2 days, every heartbeat")
    args = ap.parse_args(argv)
    spec = FleetSpec(vms=52, days=2) if args.quick else \
        FleetSpec(vms=args.vms, days=args.days, fine_days=args.fine_days)
    dashboards = build.dashboards_dir()
    with tempfile.TemporaryDirectory(prefix="se-report-bench-") as tmp:
        folder = Path(tmp)
        t0 = time.perf_counter()
        counts, end = _spill(spec, folder)
        t1 = time.perf_counter()
        print(f"fleet: {spec.vms:,} VMs x {spec.days} days: {counts['records']:,} records, "
              f"{counts['heartbeats']:,} heartbeats generated in {t1 - t0:.1f} s")
        engine = Engine(_rows(folder / "records.jsonl"), _rows(folder / "heartbeats.jsonl"), now=end)
        t2 = time.perf_counter()
        print(f"engine: loaded in {t2 - t1:.1f} s")
        _time_queries(engine, dashboards)
        rows = Rows(now=engine.now)
        rows.described.append("generated fleet")
        t3 = time.perf_counter()
        built = build.render_with(engine, rows, dashboards)
        print(f"report: built in {time.perf_counter() - t3:.1f} s ({len(built.html) / 1e3:,.0f} kB), "
              "queries included")


def _time_queries(engine: Engine, dashboards: Path) -> None:
    total = 0.0
    for key in build.WORKBOOKS:
        wb = workbook.load(dashboards / f"{key}.workbook.json", dashboards / "queries" / "workbook")
        results = execute.run_workbook(wb, engine, None)
        for name, r in sorted(results.items(), key=lambda kv: -kv[1].seconds):
            total += r.seconds
            state = f"{len(r.rows):>6,} rows" if r.error is None else "no result: " + r.error[:60]
            print(f"  {key}/{name:<28} {r.seconds:8.2f} s  {state}")
    print(f"every workbook query: {total:.1f} s in all")


if __name__ == "__main__":
    main()
