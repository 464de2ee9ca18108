#!/usr/bin/env python3
"""Time the fleet generator (se_forwarder_testbed.fleet) at benchmark size: rows streamed, not
kept (10,000 VMs x 30 days is about 86 million heartbeats).

    .venv/bin/python bench/fleet_generation.py                        # 10,000 VMs x 30 days
    .venv/bin/python bench/fleet_generation.py --vms 520 --days 8     # quicker
    .venv/bin/python bench/fleet_generation.py --processes 2          # cells split over processes

Prints rows per table, rows per second and the wall time; each process generates whole cells
(52 VMs) of the same plan, so the rows are the same whatever the number of processes.
"""

from __future__ import annotations

import argparse
import time
from concurrent.futures import ProcessPoolExecutor

from se_forwarder_testbed.fleet import CELL, FleetSpec, cell_rows, plan


def _count(spec: FleetSpec, part: int, parts: int) -> tuple[int, int]:
    cells, truth = plan(spec)
    counts = {"records": 0, "heartbeats": 0}
    for cell in cells[part::parts]:
        for table, _row in cell_rows(cell, truth, spec):
            counts[table] += 1
    return counts["records"], counts["heartbeats"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vms", type=int, default=10_000)
    ap.add_argument("--days", type=int, default=30)
    ap.add_argument("--processes", type=int, default=1)
    args = ap.parse_args()
    spec = FleetSpec(vms=args.vms, days=args.days)
    t0 = time.perf_counter()
    with ProcessPoolExecutor(args.processes) as pool:
        parts = list(
            pool.map(
                _count,
                [spec] * args.processes,
                range(args.processes),
                [args.processes] * args.processes,
            )
        )
    wall = time.perf_counter() - t0
    records, beats = (sum(p[i] for p in parts) for i in (0, 1))
    vms = -(-args.vms // CELL) * CELL
    print(
        f"{vms} VMs x {args.days} days, {args.processes} process(es): {records:,} records, "
        f"{beats:,} heartbeats in {wall:.1f} s ({(records + beats) / wall:,.0f} rows/s)"
    )


if __name__ == "__main__":
    main()
