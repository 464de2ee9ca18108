#!/usr/bin/env python3
"""CPU per unchanged poll and peak RSS: the real agent next to Microsoft's sample poller.

Both run as subprocesses against the same in-process simulator at the same poll interval, with
no change to the document. After a warm-up (imports, first call, instance document, SQLite
setup), the CPU each process spends is divided by the scheduled-events requests the simulator
saw from it in the same window. The agent's requests are told apart by their missing
User-Agent (http.client sends none; requests sends ``python-requests/...``).

    .venv/bin/python bench/poll_cost.py                 # 0.2 s interval, 90 s (~450 polls each)
    .venv/bin/python bench/poll_cost.py --interval 1 --duration 300
    .venv/bin/python bench/poll_cost.py --quick         # smoke test (a few seconds)

The agent's IMDS budget is 5 requests/s (config maximum), so 0.2 s is the shortest interval it
can be given; the simulator's own 5 req/s throttle is disabled because the two clients share it.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from support import proc

from se_forwarder_testbed import agentproc
from se_forwarder_testbed.simulator.server import Simulator
from se_forwarder_testbed.simulator.wire import SE_PATH

GOAL_CPU_MS = 1.0
GOAL_RSS_MB = 40.0


@dataclass
class Sample:
    cpu_ticks_s: float
    cpu_ns: int
    requests: int


@dataclass
class Result:
    name: str
    polls: int
    cpu_ms_per_poll: float  # high resolution (schedstat)
    cpu_ms_per_poll_ticks: float  # utime+stime, 10 ms ticks
    startup_cpu_s: float
    peak_rss_mb: float
    rss_mb: float
    threads: int


def count(sim: Simulator, agent: bool) -> int:
    n = 0
    for r in sim.requests:
        if r.method == "GET" and r.path.startswith(SE_PATH) and r.status == 200:
            ua = r.headers.get("User-Agent", "")
            if ua.startswith("python-requests") != agent:
                n += 1
    return n


def snapshot(pid: int, sim: Simulator, agent: bool) -> Sample:
    return Sample(proc.cpu_seconds(pid), proc.cpu_ns(pid), count(sim, agent))


def wait_for(pred, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.05)
    return pred()


def run(interval: float, duration: float, warmup_polls: int) -> list[Result]:
    with tempfile.TemporaryDirectory(prefix="bench-poll-cost-") as tmp, \
            Simulator(rate_limit=None, first_call_delay=0.0) as sim:
        work = Path(tmp)
        cfg = agentproc.write_config(work / "config.toml", sim.url, work / "state",
                                     poll_interval=interval, file_sink=work / "records.jsonl",
                                     stop_flush_seconds=2)
        agent = agentproc.start(cfg)
        sample = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve().parent / "support" / "sample_poller.py"),
             sim.url, "--interval", str(interval)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        procs = {"agent": (agent, True), "sample": (sample, False)}
        try:
            if not wait_for(lambda: all(count(sim, a) >= warmup_polls for _, a in procs.values()),
                            60):
                raise SystemExit("warm-up failed: a client never polled the simulator "
                                 f"(agent exit {agent.poll()}, sample exit {sample.poll()})")
            start = {n: snapshot(p.pid, sim, a) for n, (p, a) in procs.items()}
            startup = {n: proc.cpu_seconds(p.pid) for n, (p, _) in procs.items()}
            time.sleep(duration)
            end = {n: snapshot(p.pid, sim, a) for n, (p, a) in procs.items()}
            results = []
            for name, (p, _) in procs.items():
                polls = end[name].requests - start[name].requests
                if polls <= 0:
                    raise SystemExit(f"{name}: no polls during the measurement")
                results.append(Result(
                    name=name, polls=polls,
                    cpu_ms_per_poll=(end[name].cpu_ns - start[name].cpu_ns) / 1e6 / polls,
                    cpu_ms_per_poll_ticks=(end[name].cpu_ticks_s - start[name].cpu_ticks_s)
                    * 1000 / polls,
                    startup_cpu_s=startup[name],
                    peak_rss_mb=proc.peak_rss_kb(p.pid) / 1024,
                    rss_mb=proc.rss_kb(p.pid) / 1024,
                    threads=proc.threads(p.pid)))
        finally:
            rc = agentproc.stop(agent)
            agentproc.stop(sample, timeout=interval + 5)
        if rc != 0:
            raise SystemExit(f"agent exited with status {rc}")
        return results


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--interval", type=float, default=0.2, help="poll interval, both clients (s)")
    ap.add_argument("--duration", type=float, default=90.0, help="measured window (s)")
    ap.add_argument("--warmup-polls", type=int, default=10)
    ap.add_argument("--quick", action="store_true", help="smoke test: 0.2 s interval, 3 s window")
    args = ap.parse_args(argv)
    if args.quick:
        args.interval, args.duration, args.warmup_polls = 0.2, 3.0, 3
    res = run(args.interval, args.duration, args.warmup_polls)
    agent = next(r for r in res if r.name == "agent")
    sample = next(r for r in res if r.name == "sample")
    print(f"poll_cost: interval {args.interval:g} s, window {args.duration:g} s, unchanged document,"
          f" file sink, {sys.version.split()[0]}")
    print()
    print(f"{'client':<8} {'polls':>6} {'CPU ms/poll':>12} {'(ticks)':>8} {'startup CPU s':>14} "
          f"{'peak RSS MB':>12} {'RSS MB':>7} {'threads':>8}")
    for r in res:
        print(f"{r.name:<8} {r.polls:>6} {r.cpu_ms_per_poll:>12.3f} {r.cpu_ms_per_poll_ticks:>8.2f} "
              f"{r.startup_cpu_s:>14.2f} {r.peak_rss_mb:>12.1f} {r.rss_mb:>7.1f} {r.threads:>8}")
    print()
    checks = [
        (f"agent CPU per unchanged poll <= {GOAL_CPU_MS:g} ms", agent.cpu_ms_per_poll <= GOAL_CPU_MS,
         f"{agent.cpu_ms_per_poll:.3f} ms"),
        (f"agent peak RSS <= {GOAL_RSS_MB:g} MB (file sink)", agent.peak_rss_mb <= GOAL_RSS_MB,
         f"{agent.peak_rss_mb:.1f} MB"),
        ("agent CPU per poll < sample's", agent.cpu_ms_per_poll < sample.cpu_ms_per_poll,
         (f"{agent.cpu_ms_per_poll:.3f} vs {sample.cpu_ms_per_poll:.3f} ms "
          f"({sample.cpu_ms_per_poll / agent.cpu_ms_per_poll:.1f}x less)")),
    ]
    for text, ok, value in checks:
        print(f"  [{'PASS' if ok else 'MISS'}] {text}: {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
