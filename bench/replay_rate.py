#!/usr/bin/env python3
"""Lines per second of ``replay`` on a generated 24-hour trace (86,400 polls, a few dozen events).

In-process: ``se_forwarder.tracefile.read()`` then ``se_forwarder.commands.replay.replay()`` (output
to an in-memory buffer), repeated; best and median reported, wall clock and process CPU. Then once
through the CLI (``se-forwarder replay TRACE --vm-name ... > /dev/null``), which adds interpreter
start-up and imports. The trace is made by ``bench/support/gen_trace.py`` (deterministic).

    .venv/bin/python bench/replay_rate.py                  # 24 h trace, 5 in-process runs + CLI
    .venv/bin/python bench/replay_rate.py --profile        # + cProfile of one in-process run
    .venv/bin/python bench/replay_rate.py --quick          # smoke test: a 3-hour trace
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from support.gen_trace import VM, generate

from se_forwarder import logs, tracefile
from se_forwarder.commands import replay
from se_forwarder_testbed import agentproc

GOAL = 100_000  # lines/s


def in_process(path: Path) -> dict:
    w0, c0 = time.perf_counter(), time.process_time()
    lines = tracefile.read(path)
    w1, c1 = time.perf_counter(), time.process_time()
    out = io.StringIO()
    with tempfile.TemporaryDirectory(prefix="bench-replay-") as state:
        replay.replay(lines, state, VM, out)
    w2, c2 = time.perf_counter(), time.process_time()
    return {
        "read": (w1 - w0, c1 - c0),
        "replay": (w2 - w1, c2 - c1),
        "total": (w2 - w0, c2 - c0),
        "records": out.getvalue().count("\n"),
    }


def via_cli(path: Path) -> tuple[float, float, int, int]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    p = subprocess.run(
        [*agentproc.se_forwarder_cmd(), "replay", str(path), "--vm-name", VM],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        check=False,
    )
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, p.returncode, p.stdout.count(b"\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--trace", type=Path, help="use (or create) this trace file instead of a temp one"
    )
    ap.add_argument("--hours", type=float, default=24.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--runs", type=int, default=5, help="in-process repetitions")
    ap.add_argument("--profile", action="store_true", help="cProfile one in-process run")
    ap.add_argument("--quick", action="store_true", help="smoke test: 3-hour trace, one run")
    args = ap.parse_args(argv)
    if args.quick:
        args.hours, args.runs = 3.0, 1
    logs.setup("json", "error")  # the trace's bad observations would log warnings to stderr

    with tempfile.TemporaryDirectory(prefix="bench-trace-") as tmp:
        path = args.trace or Path(tmp) / "day.jsonl"
        if args.trace is None or not path.exists():
            t0 = time.perf_counter()
            info = generate(path, seed=args.seed, seconds=int(args.hours * 3600))
            gen = time.perf_counter() - t0
            info_text = (
                f"{info['lines']} lines ({info['polls']} polls), {info['events']} events, "
                f"{info['changes']} document changes, {info['errors']} bad observations, "
                f"{info['restarts']} agent restart; generated in {gen:.1f} s"
            )
        else:
            info_text = "existing file"
        n = sum(1 for _ in path.open("rb"))
        size_mb = path.stat().st_size / 1e6
        runs = [in_process(path) for _ in range(args.runs)]
        cli_wall, cli_cpu, rc, cli_records = via_cli(path)
        if rc != 0:
            raise SystemExit(f"se-forwarder replay exited with status {rc}")
        records = runs[0]["records"]
        if cli_records != records:
            raise SystemExit(f"CLI printed {cli_records} records, in-process {records}")

        print(f"replay_rate: {path.name}: {info_text}; {size_mb:.1f} MB; {records} records out")
        print()
        print(
            f"{'phase':<24} {'best s':>8} {'median s':>9} {'lines/s (best)':>15} "
            f"{'lines/s (median)':>17} {'CPU s (best)':>13}"
        )
        for phase in ("read", "replay", "total"):
            walls = [r[phase][0] for r in runs]
            cpus = [r[phase][1] for r in runs]
            best, med = min(walls), statistics.median(walls)
            label = {
                "read": "in-process trace.read",
                "replay": "in-process replay()",
                "total": "in-process read+replay",
            }[phase]
            print(
                f"{label:<24} {best:>8.3f} {med:>9.3f} {n / best:>15,.0f} {n / med:>17,.0f} "
                f"{min(cpus):>13.3f}"
            )
        print(
            f"{'CLI se-forwarder replay':<24} {cli_wall:>8.3f} {'':>9} {n / cli_wall:>15,.0f} "
            f"{'':>17} {cli_cpu:>13.3f}"
        )
        print()
        best_total = n / min(r["total"][0] for r in runs)
        med_total = n / statistics.median(r["total"][0] for r in runs)
        print(
            f"  [{'PASS' if med_total >= GOAL else 'MISS'}] in-process >= {GOAL:,} lines/s: "
            f"{med_total:,.0f} (median), {best_total:,.0f} (best)"
        )
        print(
            f"  [{'PASS' if n / cli_wall >= GOAL else 'MISS'}] CLI incl. start-up >= {GOAL:,} "
            f"lines/s: {n / cli_wall:,.0f}"
        )

        if args.profile:
            prof = cProfile.Profile()
            prof.enable()
            in_process(path)
            prof.disable()
            print("\ncProfile of one in-process run (tottime, top 20):")
            stream = io.StringIO()
            pstats.Stats(prof, stream=stream).sort_stats("tottime").print_stats(20)
            print("\n".join(stream.getvalue().splitlines()[4:]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
