#!/usr/bin/env python3
"""The state directory's files against ``spool.max_bytes``: this checkout beside a baseline.

The issue-18 workload: a Scheduled Events document of 10,000 events with 4 KB descriptions,
changed at each of six incarnations (every event Updated), no sink configured (everything stays
spooled, so the bound must hold), and the agent restarted at every incarnation (six agent runs).
The real agent (``se-forwarder run``) runs as a process against an in-process simulator, once
with this checkout and once with the baseline's ``src/`` (``git archive`` of ``--baseline``, put
first on ``PYTHONPATH``), with the same configuration. The sizes of ``state.db``, its ``-wal``
and ``status.json`` are sampled every 0.2 s (peak), and read "at rest": in each run, once the
change is committed and the agent has been idle for ``--settle`` seconds (the largest of the
runs is shown). The tracker state's size is read from the database at the end.

    .venv/bin/python bench/spool_bounds.py                      # ~8 min: 10,000 x 4 KB x 6
    .venv/bin/python bench/spool_bounds.py --events 1000 --incarnations 12 --max-mb 16
    .venv/bin/python bench/spool_bounds.py --quick              # smoke test (~15 s)
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from support import gittree

from se_forwarder_testbed.agentproc import AgentProcess, write_config
from se_forwarder_testbed.simulator import Simulator

REPO = Path(__file__).resolve().parents[1]
VM = "vm-spool"
BASELINE = "fc95eca"  # integ before issue 18's spool bounds
FILES = ("state.db", "state.db-wal", "status.json")


def events(n: int, size: int, incarnation: int) -> list[dict]:
    """``n`` events whose descriptions change at every incarnation (each one an Updated)."""
    pad = "d" * max(0, size - 40)
    return [
        {
            "EventId": f"00000000-0000-0000-0000-{i:012d}",
            "EventType": "Freeze",
            "Resources": [VM],
            "NotBefore": time.time() + 3600,
            "DurationInSeconds": 5,
            "Description": f"incarnation {incarnation} event {i} {pad}",
        }
        for i in range(n)
    ]


def baseline_src(ref: str, into: Path) -> Path:
    """The baseline's ``src/`` extracted from git (no work tree touched)."""
    return gittree.export(ref, into, "src") / "src"


class Sampler(threading.Thread):
    """Peak sizes of the state directory's files."""

    def __init__(self, state: Path) -> None:
        super().__init__(daemon=True)
        self.state = state
        self.peak = dict.fromkeys(FILES, 0)
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.wait(0.2):
            for name, size in sizes(self.state).items():
                self.peak[name] = max(self.peak[name], size)


def sizes(state: Path) -> dict[str, int]:
    out = {}
    for name in FILES:
        try:
            out[name] = (state / name).stat().st_size
        except OSError:
            out[name] = 0
    return out


def tracker_bytes(state: Path) -> int:
    """The tracker state's size in the database (read-only, after the last stop)."""
    db = sqlite3.connect(f"file:{state / 'state.db'}?mode=ro", uri=True)
    try:
        row = db.execute("SELECT length(value) FROM meta WHERE key = 'tracker'").fetchone()
    finally:
        db.close()
    return row[0] if row else 0


def status(state: Path) -> dict:
    try:
        return json.loads((state / "status.json").read_text())
    except (OSError, ValueError):
        return {}


def run_variant(label: str, pythonpath: Path | None, args: argparse.Namespace, tmp: Path) -> dict:
    state = tmp / label / "state"
    state.mkdir(parents=True)
    sim = Simulator(vm_name=VM, rate_limit=None).start()
    sampler = Sampler(state)
    sampler.start()
    env = {"PYTHONPATH": str(pythonpath)} if pythonpath else {}
    config = write_config(
        tmp / label / "agent.toml",
        sim.url,
        state,
        poll_interval=1.0,
        log_level="warning",
        extra=f"\n[spool]\nmax_bytes = {int(args.max_mb * 1024 * 1024)}\n",
    )
    started = time.monotonic()
    runs = []
    try:
        for inc in range(args.incarnations):
            want = sim.set_events(events(args.events, args.description, inc))
            agent = AgentProcess(config, env=env)
            seen = agent.wait_for(
                lambda a, w=want: status(state).get("last_incarnation") == w, args.timeout
            )
            time.sleep(args.settle)  # status.json rewritten, a chore or two
            runs.append({"incarnation": want, "seen": seen, **sizes(state)})
            agent.stop(timeout=120)
    finally:
        sampler.stop.set()
        sampler.join()
        sim.stop()
    rest = {name: max(r[name] for r in runs) for name in FILES}
    last = status(state)
    return {
        "label": label,
        "runs": runs,
        "peak": sampler.peak,
        "rest": rest,
        "tracker": tracker_bytes(state),
        "dropped": last.get("dropped"),
        "malformed": last.get("malformed_events"),
        "seconds": time.monotonic() - started,
        "all_seen": all(r["seen"] for r in runs),
    }


def mb(n: int) -> str:
    return f"{n / 1024 / 1024:.1f}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--events", type=int, default=10_000)
    ap.add_argument("--description", type=int, default=4096, help="bytes per description")
    ap.add_argument(
        "--incarnations", type=int, default=6, help="document changes, one agent run each"
    )
    ap.add_argument("--max-mb", type=float, default=256.0, help="spool.max_bytes in MiB")
    ap.add_argument("--baseline", default=BASELINE, help="git ref of the baseline")
    ap.add_argument("--no-baseline", action="store_true")
    ap.add_argument("--timeout", type=float, default=300.0, help="per incarnation, seconds")
    ap.add_argument("--settle", type=float, default=12.0, help="seconds after each change")
    ap.add_argument(
        "--quick", action="store_true", help="smoke test: 300 events, 2 runs, 1 MiB, 1.5 s settle"
    )
    args = ap.parse_args(argv)
    if args.quick:
        args.events, args.incarnations, args.max_mb, args.settle = 300, 2, 1.0, 1.5
    bound = int(args.max_mb * 1024 * 1024)
    results = []
    with tempfile.TemporaryDirectory(prefix="bench-spool-") as tmp_name:
        tmp = Path(tmp_name)
        if not args.no_baseline:
            try:
                src = baseline_src(args.baseline, tmp / "baseline")
            except (subprocess.CalledProcessError, OSError) as exc:
                print(f"baseline {args.baseline}: unavailable ({exc}); this checkout only")
            else:
                results.append(run_variant(f"baseline {args.baseline}", src, args, tmp))
        results.append(run_variant("this checkout", None, args, tmp))

    print(
        f"spool_bounds: {args.events} events x {args.description} B descriptions, "
        f"{args.incarnations} incarnations (one agent run each), no sink; "
        f"spool.max_bytes {mb(bound)} MiB"
    )
    print()
    head = (
        f"{'':<22} {'state.db peak':>13} {'at rest':>8} {'WAL peak':>9} {'at rest':>8} "
        f"{'tracker state':>14} {'status.json peak':>17} {'dropped':>8} {'not taken':>10} "
        f"{'s':>6}"
    )
    print(head + "   (MiB; status.json KiB)")
    for r in results:
        p, f = r["peak"], r["rest"]
        print(
            f"{r['label']:<22} {mb(p['state.db']):>13} {mb(f['state.db']):>8} "
            f"{mb(p['state.db-wal']):>9} {mb(f['state.db-wal']):>8} {mb(r['tracker']):>14} "
            f"{p['status.json'] / 1024:>17.1f} {r['dropped']!s:>8} {r['malformed']!s:>10} "
            f"{r['seconds']:>6.0f}"
        )
    print()
    for r in results:
        if not r["all_seen"]:
            print(
                f"  [MISS] {r['label']}: an incarnation was not processed within "
                f"{args.timeout:.0f} s"
            )
    mine = results[-1]
    limit = bound + mine["tracker"] + 4 * 1024 * 1024
    db = mine["rest"]["state.db"]
    print(
        f"  [{'PASS' if db <= limit else 'MISS'}] this checkout: state.db at rest {mb(db)} MiB "
        f"<= bound + tracker state + 4 MiB ({mb(limit)} MiB)"
    )
    wal = mine["rest"]["state.db-wal"]
    print(
        f"  [{'PASS' if wal <= 4 * 1024 * 1024 else 'MISS'}] this checkout: WAL at rest "
        f"{mb(wal)} MiB <= 4 MiB"
    )
    ok = mine["peak"]["status.json"] <= 64 * 1024
    print(f"  [{'PASS' if ok else 'MISS'}] this checkout: status.json <= 64 KiB")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
