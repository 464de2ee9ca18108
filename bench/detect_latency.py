#!/usr/bin/env python3
"""Detection latency: from the simulator publishing a new document to the agent's record being
committed to the SQLite outbox, over many changes.

The real agent runs as a subprocess (``se-forwarder run``, file sink, JSON logs) against an
in-process simulator. Every change publishes a new event ``bench-NNNN`` (and removes the previous
one), at random moments relative to the poll schedule. Latency of change k is

    (time field of the agent's ``record`` log line for FirstSeen bench-k) - (sim.changes[k].wall)

The agent writes that log line right after the outbox transaction's COMMIT returns
(``Recorder.answer``: ``_commit`` then ``_emit``), stamped by its own clock
(``LogRecord.created``, printed truncated to the millisecond), so it measures commit time
without polling the database, and the bench's own scheduling delays do not leak in. Both clocks
are this machine's wall clock. After the run, every FirstSeen is also checked in the file sink's
output.

    .venv/bin/python bench/detect_latency.py                    # 0.2 s interval, 150 changes
    .venv/bin/python bench/detect_latency.py --interval 1 --changes 100
    .venv/bin/python bench/detect_latency.py --quick            # smoke test
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from support.agentlog import AgentLog, log_time, pct

from se_forwarder_testbed import agentproc
from se_forwarder_testbed.simulator.server import Simulator
from se_forwarder_testbed.simulator.wire import SE_PATH

SLACK_MS = 50.0


class LogReader(AgentLog):
    """Collects the agent's ``record`` log lines for FirstSeen (EventId → (log time, arrival))."""

    def __init__(self, stream) -> None:
        super().__init__(stream)
        self.first_seen: dict[str, tuple[float, float, int]] = {}
        self.problems: list[str] = []

    def handle(self, line: dict, raw: str, arrived: float) -> None:
        if line.get("level") in ("warning", "error", "critical"):
            self.problems.append(raw.strip())
        if line.get("msg") == "record" and line.get("Phase") == "FirstSeen":
            self.first_seen[line["EventId"]] = (
                log_time(line["time"]),
                arrived,
                line["DocumentIncarnation"],
            )

    def wait_for_records(self, n: int, timeout: float) -> bool:
        return self.wait_for(lambda: len(self.first_seen) >= n, timeout)


def run(interval: float, changes: int, seed: int) -> dict:
    rng = random.Random(seed)
    with (
        tempfile.TemporaryDirectory(prefix="bench-latency-") as tmp,
        Simulator(rate_limit=None, first_call_delay=0.0, vm_name="bench-vm") as sim,
    ):
        work = Path(tmp)
        cfg = agentproc.write_config(
            work / "config.toml",
            sim.url,
            work / "state",
            poll_interval=interval,
            file_sink=work / "records.jsonl",
            stop_flush_seconds=2,
        )
        agent = agentproc.start(cfg, stderr=subprocess.PIPE)
        reader = LogReader(open(agent.stderr.fileno(), encoding="utf-8", closefd=False))  # noqa: SIM115
        reader.start()
        published: list[tuple[str, int]] = []
        try:
            ok = sim.wait_until(
                lambda s: sum(1 for r in s.requests if r.path.startswith(SE_PATH)) >= 5, 60
            )
            if not ok:
                raise SystemExit(f"the agent never polled (exit status {agent.poll()})")
            for k in range(1, changes + 1):
                # a random phase against the poll schedule, at least one poll apart
                time.sleep(interval * rng.uniform(1.2, 2.2))
                eid = f"bench-{k:04d}"
                inc = sim.set_events(
                    [
                        {
                            "EventId": eid,
                            "EventType": "Freeze",
                            "Resources": ["bench-vm"],
                            "DurationInSeconds": 5,
                            "NotBefore": time.time() + 900,
                            "Description": "benchmark change",
                        }
                    ]
                )
                published.append((eid, inc))
            if not reader.wait_for_records(changes, 10 + 3 * interval):
                raise SystemExit(
                    f"only {len(reader.first_seen)} of {changes} changes were recorded"
                )
        finally:
            rc = agentproc.stop(agent)
        reader.join(5)
        if rc != 0:
            raise SystemExit(f"agent exited with status {rc}")
        wall = {c.incarnation: c.wall for c in sim.changes}
        lat, arrival = [], []
        for eid, inc in published:
            logged, arrived, rec_inc = reader.first_seen[eid]
            if rec_inc != inc:
                raise SystemExit(f"{eid}: recorded at incarnation {rec_inc}, published at {inc}")
            lat.append((logged - wall[inc]) * 1000)
            arrival.append((arrived - wall[inc]) * 1000)
        in_file = set()
        for line in (work / "records.jsonl").read_text().splitlines():
            rec = json.loads(line)
            if rec["Phase"] == "FirstSeen":
                in_file.add(rec["EventId"])
        missing = [e for e, _ in published if e not in in_file]
        polls = sum(1 for r in sim.requests if r.path.startswith(SE_PATH))
        return {
            "lat": sorted(lat),
            "arrival": sorted(arrival),
            "missing": missing,
            "problems": reader.problems,
            "polls": polls,
        }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--interval", type=float, default=0.2, help="agent poll interval (s)")
    ap.add_argument("--changes", type=int, default=150)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--quick", action="store_true", help="smoke test: 0.2 s interval, 8 changes")
    args = ap.parse_args(argv)
    if args.quick:
        args.interval, args.changes = 0.2, 8
    r = run(args.interval, args.changes, args.seed)
    lat, arr = r["lat"], r["arrival"]
    goal = args.interval * 1000 + SLACK_MS
    print(
        f"detect_latency: interval {args.interval:g} s, {len(lat)} changes, {r['polls']} polls, "
        f"file sink, change -> outbox commit"
    )
    print()
    print(f"{'measure':<34} {'min':>7} {'p50':>7} {'p90':>7} {'p99':>7} {'max':>7}  (ms)")
    for name, v in (
        ("commit (agent log time, 1 ms res.)", lat),
        ("log line read by the bench", arr),
    ):
        print(
            f"{name:<34} {v[0]:>7.1f} {pct(v, 0.5):>7.1f} {pct(v, 0.9):>7.1f} {pct(v, 0.99):>7.1f} "
            f"{v[-1]:>7.1f}"
        )
    print()
    p99 = pct(lat, 0.99)
    print(
        f"  [{'PASS' if p99 <= goal else 'MISS'}] p99 <= poll interval + {SLACK_MS:g} ms "
        f"({goal:g} ms): {p99:.1f} ms"
    )
    print(
        f"  [{'PASS' if not r['missing'] else 'MISS'}] every FirstSeen reached the file sink"
        + (f" (missing: {r['missing'][:5]})" if r["missing"] else "")
    )
    if r["problems"]:
        print(
            f"  agent warnings/errors during the run: {len(r['problems'])}, first: "
            f"{r['problems'][0]}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
