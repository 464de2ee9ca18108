#!/usr/bin/env python3
"""Each alert rule's query at every 5-minute evaluation over a stretch of a churning fleet's time
(VMs deleted, evicted, late, upgraded; Azure's own record beside the agents'), evaluated one by
one (``Engine.run``, the baseline: DuckDB plans the query again at every moment) beside planned
together (``Engine.run_at``: one lateral join over the moments, report/kql/moments.py), in the
same run on the same engine: CPU seconds of this process for each, and whether every moment's
rows are the same. Printed, not asserted.

    .venv/bin/python bench/alert_moments.py               # 8 hours: 97 evaluations a rule
    .venv/bin/python bench/alert_moments.py --hours 24
    .venv/bin/python bench/alert_moments.py --quick       # 2 rules, 30 minutes (smoke test)
"""

from __future__ import annotations

import argparse
import sys
import time
from datetime import timedelta
from pathlib import Path

from se_forwarder.report import Engine
from se_forwarder_testbed.fleet import FleetSpec, generate

ALERTS = Path(__file__).resolve().parent.parent / "dashboards" / "queries" / "alerts"
STEP = timedelta(minutes=5)  # the rules' evaluation frequency (infra/modules/alerts.bicep)
RANGE = timedelta(days=2)  # their query time range (overrideQueryTimeRange)
# the churning fleet of the fleet-view tests, with the collector's rows; its incidents fall in
# the 8 hours from 2 days 16 hours after its first row (tests/report/kql/test_run_at.py)
SPEC = FleetSpec(vms=52, days=3, churn=True, seed=16, platform=True)
START = timedelta(days=2, hours=16)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hours", type=float, default=8.0, help="the stretch of evaluations")
    ap.add_argument("--quick", action="store_true", help="2 rules, 30 minutes")
    args = ap.parse_args(argv)
    paths = sorted(ALERTS.glob("*.kql"))
    if args.quick:
        paths, args.hours = [ALERTS / "agent-silent.kql", ALERTS / "many-vms-hit.kql"], 0.5
    fleet = generate(SPEC)
    with Engine(fleet.records, fleet.heartbeats, platform=fleet.platform) as engine:
        oldest = engine.oldest()
        assert oldest is not None
        start = oldest + START
        at = [start + k * STEP for k in range(int(timedelta(hours=args.hours) / STEP) + 1)]
        print(
            f"{len(fleet.records):,} records, {len(fleet.heartbeats):,} heartbeats, "
            f"{len(fleet.platform):,} platform rows; {len(at)} evaluations every "
            f"{STEP.seconds // 60} min from {start:%Y-%m-%d %H:%M}, query range {RANGE.days} days"
        )
        print(f"{'rule':<28} {'one by one s':>13} {'together s':>11} {'x':>6} {'rows':>7}  same")
        total = [0.0, 0.0]
        for path in paths:
            query = path.read_text("utf-8")
            engine.run(query, now=at[0], timespan=RANGE)  # translated once before timing
            cpu = time.process_time()
            each = {t: engine.run(query, now=t, timespan=RANGE) for t in at}
            one = time.process_time() - cpu
            cpu = time.process_time()
            together = engine.run_at(query, at, timespan=RANGE)
            both = time.process_time() - cpu
            same = all(sorted(map(repr, each[t])) == sorted(map(repr, together[t])) for t in at)
            total[0] += one
            total[1] += both
            rows = sum(map(len, each.values()))
            print(
                f"{path.stem:<28} {one:>13.2f} {both:>11.2f} {one / max(both, 1e-9):>6.1f} "
                f"{rows:>7,}  {'yes' if same else 'NO'}"
            )
        print(
            f"{'all':<28} {total[0]:>13.2f} {total[1]:>11.2f} "
            f"{total[0] / max(total[1], 1e-9):>6.1f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
