#!/usr/bin/env python3
"""The fleet model's queries at fleet size (issue 28), beside a baseline measured in the same run:
the same library queries and alert from another checkout's ``dashboards/`` (default: the ones at
git revision ``main``, exported with ``git archive``), on one mixed fleet
(``se_forwarder_testbed.fleet.mixed``: 29 VMs a cell, a third without an agent, hourly inventory).
Prints each query's seconds (first run / second run) and rows, new and baseline, and the
process's peak RSS. Not asserted: the portal's limits and the report's 5 minutes / 4 GB are the
figures to read them against. The rows go to JSON Lines files as they are made
(``stream_mixed``), by ``--jobs`` processes (each a share of the cells, into files of its own),
and the engine loads the files: 10,000 VMs' rows do not fit in memory as dicts (5.8 GB and
growing when generated into lists).

    .venv/bin/python bench/fleet_model.py                  # 345 cells: 10,005 VMs x 3 days
    .venv/bin/python bench/fleet_model.py --cells 35       # about 1,000 VMs
    .venv/bin/python bench/fleet_model.py --baseline DIR   # another checkout's dashboards/
    .venv/bin/python bench/fleet_model.py --quick          # 2 cells (smoke test)
    .venv/bin/python bench/fleet_model.py --jobs 1         # generated in this process alone
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import tarfile
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from contextlib import ExitStack
from datetime import UTC, datetime
from io import BytesIO
from pathlib import Path

from se_forwarder.report import Engine
from se_forwarder_testbed.fleet.mixed import MixedSpec, MixedTruth, plan_mixed, stream_mixed

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


def _clock() -> tuple[float, float]:
    """Wall seconds and this process's CPU seconds (every thread: DuckDB's too)."""
    return time.perf_counter(), time.process_time()


def _since(start: tuple[float, float]) -> tuple[float, float]:
    wall, cpu = _clock()
    return wall - start[0], cpu - start[1]


def _load() -> str:
    return "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg())


def _time(engine: Engine, path: Path) -> tuple[str, str, str]:
    """Seconds of the first run (translation, planning, execution) / of a second (the SQL known:
    what each later evaluation of an alert or a refresh costs), the rows, and the CPU seconds of
    the two runs (the machine is shared: wall time is what the others left)."""
    if not path.exists():
        return "-", "absent", "-"
    text = path.read_text("utf-8")
    times, cpus = [], []
    try:
        for _ in range(2):
            t = _clock()
            rows = engine.run(text)
            wall, cpu = _since(t)
            times.append(wall)
            cpus.append(cpu)
    except Exception as exc:  # a baseline query this engine cannot run: said, not fatal
        return "-", f"error: {type(exc).__name__}", "-"
    return f"{times[0]:.1f}/{times[1]:.1f}", str(len(rows)), f"{cpus[0]:.1f}/{cpus[1]:.1f}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cells", type=int, default=345, help="29 VMs each (345: 10,005 VMs)")
    ap.add_argument("--days", type=int, default=3)
    ap.add_argument("--heartbeat-seconds", type=int, default=300)
    ap.add_argument("--baseline", type=Path, help="another checkout's dashboards/ folder")
    ap.add_argument("--rev", default="main", help="git revision of the baseline (no --baseline)")
    ap.add_argument("--jobs", type=int, default=2, help="processes generating the rows")
    ap.add_argument("--quick", action="store_true", help="2 cells: a smoke test")
    args = ap.parse_args(argv)
    cells = 2 if args.quick else args.cells
    spec = MixedSpec(cells=cells, days=args.days, heartbeat_seconds=args.heartbeat_seconds)
    work = Path(tempfile.mkdtemp(prefix="fleet-model-"))
    print(f"start: {_load()}", flush=True)
    t, before = _clock(), _children_cpu()
    truth, counts, files = _write(spec, work, args.jobs)
    made, made_cpu = _since(t)
    made_cpu += _children_cpu() - before
    # read now: a later child (git archive) is forked from this process, engine and all
    made_rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    agents = sum(v.agent for v in truth.vms.values())
    size = sum(f.stat().st_size for f in files) / 1e9
    print(
        f"mixed fleet: {len(truth.vms):,} VMs ({agents:,} with an agent),"
        f" {counts['heartbeats']:,} heartbeats, {counts['records']:,} records,"
        f" {counts['platform']:,} platform rows; generated into files ({size:.2f} GB) in"
        f" {made:.1f} s ({made_cpu:.1f} s CPU, {args.jobs} processes); {_load()}",
        flush=True,
    )
    t = _clock()
    engine = Engine(files=files, now=datetime.fromtimestamp(truth.end / 1000, UTC))
    wall, cpu = _since(t)
    print(f"loaded in {wall:.1f} s ({cpu:.1f} s CPU); {_load()}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        base = args.baseline or _baseline(args.rev, Path(tmp))
        print(
            f"\n{'query':42} {'new s':>11} {'rows':>7} {'base s':>11} {'rows':>10}"
            f" {'new CPU s':>11} {'base CPU s':>11}"
        )
        for q in QUERIES:
            new_s, new_rows, new_cpu = _time(engine, ROOT / "dashboards" / "queries" / q)
            old_s, old_rows, old_cpu = _time(engine, base / "queries" / q)
            print(
                f"{q:42} {new_s:>11} {new_rows:>7} {old_s:>11} {old_rows:>10}"
                f" {new_cpu:>11} {old_cpu:>11}",
                flush=True,
            )
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    makers = f"the largest generating process {made_rss:,.0f} MB" if args.jobs > 1 else "generation"
    print(f"\npeak RSS {peak:,.0f} MB (this process: engine and queries; {makers}); {_load()}")
    engine.close()
    shutil.rmtree(work, ignore_errors=True)
    return 0


def _write(
    spec: MixedSpec, folder: Path, jobs: int
) -> tuple[MixedTruth, dict[str, int], list[Path]]:
    """The fleet's rows into JSON Lines files (the file sink's bare rows, with their ingestion
    time) as they are made, by ``jobs`` processes, each a share of the cells into files of its
    own: 10,000 VMs' rows do not fit in memory as dicts, and one process makes them in ~4 CPU
    minutes."""
    if jobs <= 1:
        counts, files = _write_part(spec, folder, (0, 1))
    else:
        with ProcessPoolExecutor(jobs) as pool:
            parts = list(
                pool.map(
                    _write_part, [spec] * jobs, [folder] * jobs, [(k, jobs) for k in range(jobs)]
                )
            )
        counts = {k: sum(c[k] for c, _ in parts) for k in parts[0][0]}
        files = [f for _, fs in parts for f in fs]
    return plan_mixed(spec)[1], counts, files


def _write_part(
    spec: MixedSpec, folder: Path, part: tuple[int, int]
) -> tuple[dict[str, int], list[Path]]:
    """One process's share of the cells (``stream_mixed``'s ``part``): one file per table."""
    _, rows = stream_mixed(spec, part)
    suffix = f"-{part[0]}" if part[1] > 1 else ""
    paths = {k: folder / f"{k}{suffix}.jsonl" for k in ("records", "heartbeats", "platform")}
    counts = dict.fromkeys(paths, 0)
    with ExitStack() as stack:
        out = {k: stack.enter_context(p.open("w", encoding="utf-8")) for k, p in paths.items()}
        for kind, row in rows:
            out[kind].write(json.dumps(row) + "\n")
            counts[kind] += 1
    return counts, [p for k, p in paths.items() if counts[k]]


def _children_cpu() -> float:
    """CPU seconds of this process's ended children (the generating processes)."""
    use = resource.getrusage(resource.RUSAGE_CHILDREN)
    return use.ru_utime + use.ru_stime


if __name__ == "__main__":
    raise SystemExit(main())
