#!/usr/bin/env python3
"""CPU per unchanged poll and peak RSS: the real agent next to Microsoft's sample poller and the
floors (the least a Python process can spend per poll), measured in one run.

Every client is a subprocess polling a simulator of its own (in this process) at the same
interval, with a document that never changes:

* ``agent``: ``se-forwarder run`` with the file sink (this checkout);
* ``baseline`` (``--baseline-src DIR``): the same, with another checkout's ``src/`` first on
  ``PYTHONPATH`` (the code before a change, measured beside it on the same loaded machine);
* ``sample``: Microsoft's sample poller (``support/sample_poller.py``, ``requests``);
* ``floor http.client`` and ``floor socket``: a bare keep-alive ``http.client`` loop and a raw
  socket request (``support/floor_poller.py``).

After a warm-up (imports, first call, instance document, SQLite set-up), the CPU each process
spends is divided by the scheduled-events requests its simulator answered in the same window.

    .venv/bin/python bench/poll_cost.py --interval 1 --duration 150   # the production interval
    .venv/bin/python bench/poll_cost.py --interval 1 --duration 150 --baseline-src ../main/src
    .venv/bin/python bench/poll_cost.py --quick         # smoke test (a few seconds)

The agent's IMDS budget is 5 requests/s (config maximum), so 0.2 s is the shortest interval it
can be given; the simulators' own 5 req/s throttle is off (the bench is the only client).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from support import proc

from se_forwarder_testbed import agentproc
from se_forwarder_testbed.simulator.server import Simulator
from se_forwarder_testbed.simulator.wire import SE_PATH

SUPPORT = Path(__file__).resolve().parent / "support"
GOAL_CPU_MS = 0.40  # per unchanged poll, at the production interval (1 s)
GOAL_RSS_MB = 32.0  # peak, file sink (Log Analytics: bench/sink_throughput.py, <= 50 MB)


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


def count(sim: Simulator, agent: bool = True) -> int:
    """Scheduled-events GETs the simulator answered 200 (``agent``: only those without a
    User-Agent, when other clients share the simulator)."""
    n = 0
    for r in sim.requests:
        if (
            r.method == "GET"
            and r.path.startswith(SE_PATH)
            and r.status == 200
            and (not agent or not r.headers.get("User-Agent"))
        ):
            n += 1
    return n


def snapshot(pid: int, sim: Simulator) -> Sample:
    return Sample(proc.cpu_seconds(pid), proc.cpu_ns(pid), count(sim, agent=False))


def wait_for(pred, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.05)
    return pred()


def start_clients(
    stack: ExitStack, work: Path, interval: float, baseline_src: str | None
) -> dict[str, tuple[subprocess.Popen, Simulator]]:
    """Every client, each on a simulator of its own."""

    def sim() -> Simulator:
        return stack.enter_context(Simulator(rate_limit=None, first_call_delay=0.0))

    def agent(name: str, src: str | None) -> subprocess.Popen:
        s = sims[name] = sim()
        cfg = agentproc.write_config(
            work / f"{name}.toml",
            s.url,
            work / f"{name}-state",
            poll_interval=interval,
            file_sink=work / f"{name}.jsonl",
            stop_flush_seconds=2,
        )
        env = (
            None
            if src is None
            else {
                "PYTHONPATH": os.pathsep.join(
                    [str(Path(src).resolve()), os.environ.get("PYTHONPATH", "")]
                ).rstrip(os.pathsep)
            }
        )
        return agentproc.start(cfg, env=env)

    def script(name: str, *argv: str) -> subprocess.Popen:
        s = sims[name] = sim()
        return subprocess.Popen(
            [sys.executable, *argv, s.url, "--interval", str(interval)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    sims: dict[str, Simulator] = {}
    procs = {"agent": agent("agent", None)}
    if baseline_src:
        procs["baseline"] = agent("baseline", baseline_src)
    procs["sample"] = script("sample", str(SUPPORT / "sample_poller.py"))
    for kind in ("http.client", "socket"):
        procs[f"floor {kind}"] = script(f"floor {kind}", str(SUPPORT / "floor_poller.py"), kind)
    return {name: (p, sims[name]) for name, p in procs.items()}


def run(
    interval: float, duration: float, warmup_polls: int, baseline_src: str | None = None
) -> list[Result]:
    with tempfile.TemporaryDirectory(prefix="bench-poll-cost-") as tmp, ExitStack() as stack:
        clients = start_clients(stack, Path(tmp), interval, baseline_src)
        try:
            if not wait_for(
                lambda: all(count(s, False) >= warmup_polls for _, s in clients.values()), 60
            ):
                raise SystemExit(
                    "warm-up failed: a client never polled its simulator (exit "
                    f"statuses: { {n: p.poll() for n, (p, _) in clients.items()} })"
                )
            start = {n: snapshot(p.pid, s) for n, (p, s) in clients.items()}
            time.sleep(duration)
            end = {n: snapshot(p.pid, s) for n, (p, s) in clients.items()}
            results = []
            for name, (p, _) in clients.items():
                polls = end[name].requests - start[name].requests
                if polls <= 0:
                    raise SystemExit(f"{name}: no polls during the measurement")
                results.append(
                    Result(
                        name=name,
                        polls=polls,
                        cpu_ms_per_poll=(end[name].cpu_ns - start[name].cpu_ns) / 1e6 / polls,
                        cpu_ms_per_poll_ticks=(end[name].cpu_ticks_s - start[name].cpu_ticks_s)
                        * 1000
                        / polls,
                        startup_cpu_s=start[name].cpu_ticks_s,
                        peak_rss_mb=proc.peak_rss_kb(p.pid) / 1024,
                        rss_mb=proc.rss_kb(p.pid) / 1024,
                        threads=proc.threads(p.pid),
                    )
                )
        finally:
            codes = {n: agentproc.stop(p, timeout=interval + 5) for n, (p, _) in clients.items()}
        for name in ("agent", "baseline"):
            if codes.get(name, 0) != 0:
                raise SystemExit(f"{name} exited with status {codes[name]}")
        return results


def checks(res: dict[str, Result]) -> list[tuple[str, bool, str]]:
    agent, sample = res["agent"], res["sample"]
    out = [
        (
            f"agent CPU per unchanged poll <= {GOAL_CPU_MS:.2f} ms",
            agent.cpu_ms_per_poll <= GOAL_CPU_MS,
            (
                f"{agent.cpu_ms_per_poll:.3f} ms (floors: http.client "
                f"{res['floor http.client'].cpu_ms_per_poll:.3f}, socket "
                f"{res['floor socket'].cpu_ms_per_poll:.3f})"
            ),
        ),
        (
            f"agent peak RSS <= {GOAL_RSS_MB:g} MB (file sink)",
            agent.peak_rss_mb <= GOAL_RSS_MB,
            f"{agent.peak_rss_mb:.1f} MB (sample {sample.peak_rss_mb:.1f} MB)",
        ),
        (
            "agent CPU per poll < sample's",
            agent.cpu_ms_per_poll < sample.cpu_ms_per_poll,
            (
                f"{agent.cpu_ms_per_poll:.3f} vs {sample.cpu_ms_per_poll:.3f} ms "
                f"({sample.cpu_ms_per_poll / agent.cpu_ms_per_poll:.1f}x less)"
            ),
        ),
    ]
    if "baseline" in res:
        base = res["baseline"]
        out.append(
            (
                "agent lighter than the baseline",
                agent.cpu_ms_per_poll < base.cpu_ms_per_poll
                and agent.peak_rss_mb <= base.peak_rss_mb,
                (
                    f"CPU {base.cpu_ms_per_poll:.3f} -> {agent.cpu_ms_per_poll:.3f} ms/poll, "
                    f"peak RSS {base.peak_rss_mb:.1f} -> {agent.peak_rss_mb:.1f} MB"
                ),
            )
        )
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--interval", type=float, default=1.0, help="poll interval, every client (s)")
    ap.add_argument("--duration", type=float, default=150.0, help="measured window (s)")
    ap.add_argument("--warmup-polls", type=int, default=10)
    ap.add_argument(
        "--baseline-src",
        metavar="DIR",
        help="another checkout's src/ directory, run beside this one as 'baseline'",
    )
    ap.add_argument("--quick", action="store_true", help="smoke test: 0.2 s interval, 3 s window")
    args = ap.parse_args(argv)
    if args.quick:
        args.interval, args.duration, args.warmup_polls = 0.2, 3.0, 3
    load = os.getloadavg()
    res = {
        r.name: r for r in run(args.interval, args.duration, args.warmup_polls, args.baseline_src)
    }
    print(
        f"poll_cost: interval {args.interval:g} s, window {args.duration:g} s, unchanged "
        f"document, file sink, {sys.version.split()[0]}, {os.cpu_count()} CPUs, load average "
        f"{load[0]:.1f} at the start, {os.getloadavg()[0]:.1f} at the end"
    )
    print()
    print(
        f"{'client':<18} {'polls':>6} {'CPU ms/poll':>12} {'(ticks)':>8} {'startup CPU s':>14} "
        f"{'peak RSS MB':>12} {'RSS MB':>7} {'threads':>8}"
    )
    for r in res.values():
        print(
            f"{r.name:<18} {r.polls:>6} {r.cpu_ms_per_poll:>12.3f} {r.cpu_ms_per_poll_ticks:>8.2f} "
            f"{r.startup_cpu_s:>14.2f} {r.peak_rss_mb:>12.1f} {r.rss_mb:>7.1f} {r.threads:>8}"
        )
    print()
    for text, ok, value in checks(res):
        print(f"  [{'PASS' if ok else 'MISS'}] {text}: {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
