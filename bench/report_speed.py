#!/usr/bin/env python3
"""The report at fleet size: wall time, peak memory and temporary files of `se-forwarder report`
over a generated fleet's files, beside the same figures of the report before the streaming
loader (commit BASELINE_REF), measured in the same run; and every workbook query's time in the
local engine (a proxy for the workbooks' own cost in Log Analytics). Printed, not asserted.

    .venv/bin/python bench/report_speed.py                 # 10,000 VMs x 30 days
    .venv/bin/python bench/report_speed.py --quick         # 52 VMs x 1 day (smoke test)
    .venv/bin/python bench/report_speed.py --vms 1040 --days 30
    # generate once, keep
    .venv/bin/python bench/report_speed.py --keep /data/fleet10k --processes 2
    .venv/bin/python bench/report_speed.py --data /data/fleet10k      # ... and reuse

At size the fleet's heartbeats older than --fine-days (default 7) before the end come hourly
(FleetSpec.fine_days): every query's short window keeps the real 5-minute interval, and a
10,000-VM, 30-day fleet has about 26 million heartbeats instead of 87 million. Rows are streamed
to records.jsonl and heartbeats.jsonl (what the file sink writes), then each report runs in a
process of its own, sampled from outside (bench/support/peak.py). The baseline is stopped when it
passes --baseline-limit-gb (it needed 18.8 GB at 10,000 VMs): then its recorded figures are
printed beside the point where it was stopped. Issue 20's goals (4 GB of peak memory, 5 minutes)
are printed PASS or MISS with the load average around the run (a shared machine's wall time says
little without it), and the Services section's items are summed (that section's cost).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from support import gittree, peak

from se_forwarder.report.build import WORKBOOKS
from se_forwarder.report.workbooks import workbook
from se_forwarder.timefmt import format_ms, to_ms
from se_forwarder_testbed.fleet import FleetSpec, cell_rows, plan

REPO = Path(__file__).resolve().parents[1]
#: the last commit whose report read every row into Python and loaded DuckDB in memory
BASELINE_REF = "3dc60a2"
#: its figures at 10,000 VMs x 30 days, bench/README.md (2026-11-23, nothing else running)
RECORDED = (
    "recorded on 3dc60a2 at 10,000 VMs x 30 days (bench/README.md, quiet machine): "
    "peak RSS 18.8 GB, ~25 GB of temporary files, load 727 s + report 88 s"
)
GOAL_MB, GOAL_S = 4096, 300  # issue 20: an operator's laptop
SERVICES = "Services"  # the title of issue 20's section of the scheduled-events workbook

#: the child: the report of the fleet's two files, as `se-forwarder report FILES --now END`
#: would build it (the same build API before and after), with its queries' timings
DRIVER = r"""
import json, sys, time
from datetime import datetime
from pathlib import Path
import se_forwarder
from se_forwarder.report import build, sources
data, dash, end, out, timings = sys.argv[1:6]
t0 = time.perf_counter()
rows = sources.read_paths([Path(data) / "records.jsonl", Path(data) / "heartbeats.jsonl"])
built = build.build(rows, Path(dash), now=datetime.fromisoformat(end))
Path(out).write_text(built.html, "utf-8")
Path(timings).write_text(json.dumps({
    "module": se_forwarder.__file__, "seconds": time.perf_counter() - t0,
    "queries": {f"{k}/{n}": [r.seconds, len(r.rows), r.error]
                for k, res in built.results.items() for n, r in res.items()}}))
"""


def _write_cells(spec: FleetSpec, part: int, parts: int, folder: Path) -> dict[str, int]:
    """Rows of one contiguous share of the cells into ``<table>.<part>.jsonl``."""
    cells, truth = plan(spec)
    share = -(-len(cells) // parts)
    counts = {"records": 0, "heartbeats": 0}
    files = {t: (folder / f"{t}.{part}.jsonl").open("w", encoding="utf-8") for t in counts}
    try:
        for cell in cells[part * share : (part + 1) * share]:
            for table, row in cell_rows(cell, truth, spec):
                files[table].write(json.dumps(row, separators=(",", ":")) + "\n")
                counts[table] += 1
    finally:
        for f in files.values():
            f.close()
    return counts


def generate(spec: FleetSpec, folder: Path, processes: int = 1) -> dict:
    """The fleet streamed into records.jsonl / heartbeats.jsonl; meta.json beside them. With
    ``processes`` > 1 each process writes a contiguous share of the cells to files of its own,
    joined in cell order afterwards: the same rows in the same order as one process."""
    folder.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    with ProcessPoolExecutor(processes) as pool:
        parts = list(
            pool.map(
                _write_cells,
                [spec] * processes,
                range(processes),
                [processes] * processes,
                [folder] * processes,
            )
        )
    counts = {t: sum(p[t] for p in parts) for t in ("records", "heartbeats")}
    for table in counts:
        first = folder / f"{table}.0.jsonl"
        with first.open("ab") as out:
            for part in range(1, processes):
                rest = folder / f"{table}.{part}.jsonl"
                with rest.open("rb") as f:
                    shutil.copyfileobj(f, out, 16 << 20)
                rest.unlink()
        first.rename(folder / f"{table}.jsonl")
    meta = {
        "vms": spec.vms,
        "days": spec.days,
        "counts": counts,
        "end": format_ms(to_ms(spec.end)),
        "seconds": time.perf_counter() - t0,
        "processes": processes,
    }
    (folder / "meta.json").write_text(json.dumps(meta))
    return meta


def measure(
    src: Path, dashboards: Path, data: Path, end: str, work: Path, limit_gb: float | None
) -> tuple[peak.Peak, dict]:
    """One report in a process of its own (``src`` first on its path); its timings file."""
    work.mkdir(parents=True, exist_ok=True)
    timings = work / "timings.json"
    cmd = [
        sys.executable,
        "-c",
        DRIVER,
        str(data),
        str(dashboards),
        end,
        str(work / "report.html"),
        str(timings),
    ]
    got = peak.run(
        cmd,
        work / "scratch",
        env={"PYTHONPATH": str(src)},
        limit_mb=None if limit_gb is None else limit_gb * 1024,
    )
    report = json.loads(timings.read_text()) if timings.is_file() else {}
    if report and not report["module"].startswith(str(src)):
        raise SystemExit(f"the child imported {report['module']}, not the tree under {src}")
    return got, report


def baseline_tree(folder: Path) -> Path | None:
    """``src`` and ``dashboards`` of BASELINE_REF, exported from the repository's history."""
    try:
        return gittree.export(BASELINE_REF, folder / "baseline", "src", "dashboards")
    except subprocess.CalledProcessError:
        return None


def row(name: str, got: peak.Peak | None, report: dict, html: Path | None) -> str:
    if got is None:
        return f"{name:<34} {'(not run)':>9}"
    state = (
        ""
        if got.returncode == 0
        else (" stopped at the memory limit" if got.killed else f" exit {got.returncode}")
    )
    size = f"{html.stat().st_size / 1e3:9,.0f}" if html and html.is_file() else f"{'-':>9}"
    return (
        f"{name:<34} {got.seconds:9.1f} {got.cpu_seconds:9.1f} {got.rss_mb:13,.0f} "
        f"{got.temp_bytes / 1e6:11,.0f} {size}{state}"
    )


def print_queries(report: dict) -> None:
    """Every workbook query's time in the report just built, slowest first."""
    queries = report.get("queries", {})
    for name, (seconds, rows, error) in sorted(queries.items(), key=lambda kv: -kv[1][0]):
        state = f"{rows:>6,} rows" if error is None else "no result: " + error[:60]
        print(f"  {name:<45} {seconds:8.2f} s  {state}")
    print(f"every workbook query: {sum(q[0] for q in queries.values()):.1f} s in all")


def print_services(report: dict, dashboards: Path) -> None:
    """The Services section's cost (issue 20): its items' times, and their sum."""
    queries = report.get("queries", {})
    for key in WORKBOOKS:
        wb = workbook.load(dashboards / f"{key}.workbook.json", dashboards / "queries" / "workbook")
        for section in wb.sections:
            if not section.title.startswith(SERVICES):
                continue
            names = [f"{key}/{i.name}" for i in section.items if f"{key}/{i.name}" in queries]
            print(
                f"the {section.title.split(':')[0]} section ({key}): "
                f"{sum(queries[n][0] for n in names):.1f} s in all, "
                + ", ".join(f"{n.split('/')[1]} {queries[n][0]:.1f} s" for n in names)
            )


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vms", type=int, default=10_000)
    ap.add_argument("--days", type=int, default=30)
    ap.add_argument("--fine-days", type=int, default=7)
    ap.add_argument("--quick", action="store_true", help="52 VMs x 1 day, every heartbeat")
    ap.add_argument("--data", type=Path, help="reuse a fleet generated with --keep")
    ap.add_argument("--keep", type=Path, help="generate the fleet into this folder and keep it")
    ap.add_argument(
        "--processes",
        type=int,
        default=1,
        help="generate the fleet's cells in this many processes (same rows)",
    )
    ap.add_argument("--no-baseline", action="store_true", help=f"skip the {BASELINE_REF} run")
    ap.add_argument(
        "--baseline-limit-gb",
        type=float,
        default=8.0,
        help="stop the baseline when its RSS passes this (default 8)",
    )
    args = ap.parse_args(argv)
    if not args.quick:  # measured cold: no translation read from disk; a smoke test (--quick)
        os.environ.pop("SE_FORWARDER_KQL_CACHE", None)  # checks the script, not its figures
    with tempfile.TemporaryDirectory(prefix="se-report-bench-") as tmp:
        work = Path(tmp)
        data = args.data or args.keep or work / "fleet"
        if args.data:
            meta = json.loads((data / "meta.json").read_text())
        else:
            spec = (
                FleetSpec(vms=52, days=1)
                if args.quick
                else FleetSpec(vms=args.vms, days=args.days, fine_days=args.fine_days)
            )
            meta = generate(spec, data, args.processes)
        size = sum((data / f"{t}.jsonl").stat().st_size for t in ("records", "heartbeats"))
        print(
            f"fleet: {meta['vms']:,} VMs x {meta['days']} days: "
            f"{meta['counts']['records']:,} records, {meta['counts']['heartbeats']:,} "
            f"heartbeats generated in {meta['seconds']:.1f} s with {meta.get('processes', 1)} "
            f"process(es) ({size / 1e9:.2f} GB of JSON Lines)"
        )
        load = os.getloadavg()
        new, report = measure(
            REPO / "src", REPO / "dashboards", data, meta["end"], work / "new", None
        )
        if new.returncode != 0:
            raise SystemExit(f"the report failed:\n{new.stderr[-3000:]}")
        base = tree = None
        if not args.no_baseline:
            tree = baseline_tree(work)
            if tree is not None:
                base, _ = measure(
                    tree / "src",
                    tree / "dashboards",
                    data,
                    meta["end"],
                    work / "base",
                    args.baseline_limit_gb,
                )
        print(
            f"\n{'the report of the fleet':<34} {'wall s':>9} {'CPU s':>9} {'peak RSS MB':>13} "
            f"{'temp MB':>11} {'html kB':>9}"
        )
        print(row("this tree", new, report, work / "new" / "report.html"))
        print(row(f"before ({BASELINE_REF})", base, {}, work / "base" / "report.html"))
        if args.no_baseline:
            print(f"  baseline: not run (--no-baseline); {RECORDED}")
        elif base is None or base.returncode != 0:
            print(f"  baseline: {RECORDED}" + ("" if tree else " (history not available)"))
        print(
            f"load average (1, 5, 15 min): {' '.join(f'{x:.1f}' for x in load)} before, "
            f"{' '.join(f'{x:.1f}' for x in os.getloadavg())} after, on {os.cpu_count()} cores"
        )
        for ok, what in (
            (new.rss_mb <= GOAL_MB, f"peak RSS <= {GOAL_MB:,} MB: {new.rss_mb:,.0f} MB"),
            (new.seconds <= GOAL_S, f"wall time <= {GOAL_S} s: {new.seconds:.0f} s"),
            (
                new.cpu_seconds <= GOAL_S,
                (
                    f"CPU time <= {GOAL_S} s (the wall time it needs on one free core): "
                    f"{new.cpu_seconds:.0f} s"
                ),
            ),
        ):
            print(
                f"[{'PASS' if ok else 'MISS'}] {what} (at {meta['vms']:,} VMs x {meta['days']} "
                "days)"
            )
        print(
            f"report: built in {report['seconds']:.1f} s "
            f"({(work / 'new' / 'report.html').stat().st_size / 1e3:,.0f} kB), queries included"
        )
        print_queries(report)
        print_services(report, REPO / "dashboards")


if __name__ == "__main__":
    main()
