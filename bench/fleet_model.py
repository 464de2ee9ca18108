#!/usr/bin/env python3
"""The fleet model's queries at fleet size (issue 28), beside a baseline measured in the same run:
the same library queries and alert from another checkout's ``dashboards/`` (default: the ones at
git revision ``main``, exported with ``git archive``), on one mixed fleet
(``se_forwarder_testbed.fleet.mixed``: 29 VMs a cell, a third without an agent, hourly inventory).
Prints each query's seconds and rows, new and baseline, and the process's peak RSS. Not asserted:
the portal's limits and the report's 5 minutes / 4 GB are the figures to read them against.

    .venv/bin/python bench/fleet_model.py                  # 345 cells: 10,005 VMs x 3 days
    .venv/bin/python bench/fleet_model.py --cells 35       # about 1,000 VMs
    .venv/bin/python bench/fleet_model.py --baseline DIR   # another checkout's dashboards/
    .venv/bin/python bench/fleet_model.py --quick          # 2 cells (smoke test)
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import tarfile
import tempfile
import time
from datetime import UTC, datetime
from io import BytesIO
from pathlib import Path

from se_forwarder.report import Engine
from se_forwarder_testbed.fleet.mixed import MixedFleet, MixedSpec, generate_mixed

ROOT = Path(__file__).resolve().parent.parent
QUERIES = [
    "fleet-vms.kql",
    "upcoming-impactful.kql",
    "open-events.kql",
    "started-last-24h.kql",
    "services-upcoming.kql",
    "services-concurrency-risk.kql",
    "services-impact-by-month.kql",
    "alerts/impactful-event-unwatched.kql",
    "alerts/service-concurrency-risk.kql",
]


def _baseline(rev: str, into: Path) -> Path:
    data = subprocess.run(
        ["git", "archive", rev, "dashboards"], cwd=ROOT, check=True, capture_output=True
    ).stdout
    with tarfile.open(fileobj=BytesIO(data)) as tar:
        tar.extractall(into, filter="data")
    return into / "dashboards"


def _time(engine: Engine, path: Path) -> tuple[str, str]:
    if not path.exists():
        return "-", "absent"
    t = time.perf_counter()
    try:
        rows = engine.run(path.read_text("utf-8"))
    except Exception as exc:  # a baseline query this engine cannot run: said, not fatal
        return f"{time.perf_counter() - t:.1f}", f"error: {type(exc).__name__}"
    return f"{time.perf_counter() - t:.1f}", str(len(rows))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cells", type=int, default=345, help="29 VMs each (345: 10,005 VMs)")
    ap.add_argument("--days", type=int, default=3)
    ap.add_argument("--heartbeat-seconds", type=int, default=300)
    ap.add_argument("--baseline", type=Path, help="another checkout's dashboards/ folder")
    ap.add_argument("--rev", default="main", help="git revision of the baseline (no --baseline)")
    ap.add_argument("--quick", action="store_true", help="2 cells: a smoke test")
    args = ap.parse_args(argv)
    cells = 2 if args.quick else args.cells
    t = time.perf_counter()
    fleet = generate_mixed(
        MixedSpec(cells=cells, days=args.days, heartbeat_seconds=args.heartbeat_seconds)
    )
    made = time.perf_counter() - t
    agents = sum(v.agent for v in fleet.truth.vms.values())
    print(
        f"mixed fleet: {len(fleet.truth.vms):,} VMs ({agents:,}"
        f" with an agent), {len(fleet.heartbeats):,} heartbeats, {len(fleet.records):,} records,"
        f" {len(fleet.platform):,} platform rows; generated in {made:.1f} s"
    )
    t = time.perf_counter()
    engine = Engine(fleet.records, fleet.heartbeats, platform=fleet.platform, now=_end(fleet))
    print(f"loaded in {time.perf_counter() - t:.1f} s")
    with tempfile.TemporaryDirectory() as tmp:
        base = args.baseline or _baseline(args.rev, Path(tmp))
        print(f"\n{'query':42} {'new s':>7} {'rows':>7} {'base s':>7} {'rows':>10}")
        for q in QUERIES:
            new_s, new_rows = _time(engine, ROOT / "dashboards" / "queries" / q)
            old_s, old_rows = _time(engine, base / "queries" / q)
            print(f"{q:42} {new_s:>7} {new_rows:>7} {old_s:>7} {old_rows:>10}")
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"\npeak RSS {peak:,.0f} MB (this process: generation, engine and queries)")
    return 0


def _end(fleet: MixedFleet) -> datetime:
    """The data's end: "now" for every query."""
    return datetime.fromtimestamp(fleet.truth.end / 1000, UTC)


if __name__ == "__main__":
    raise SystemExit(main())
