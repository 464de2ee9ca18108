#!/usr/bin/env python3
"""How fast the agent acts on an event, and what a configured policy costs while nothing happens.

1. Latency, with the real agent (``se-forwarder run`` as a process, JSON logs) against an
   in-process simulator and a policy ``approve = "after-hooks"`` whose hook is ``/bin/date``:

   - FirstSeen committed -> hook process started: from the time of the agent's ``record`` log
     line for the FirstSeen (written right after the outbox COMMIT, 1 ms resolution) to the time
     the hook itself printed (``date +%s.%N``, its first and only instruction, so exec is
     included). Goal: p99 <= 100 ms.
   - Hook exit -> approval POST sent: from that same printed time (``date`` exits right after
     printing) to the simulator receiving the POST (its request log). Goal: p99 <= 50 ms.

   Beside each, a baseline measured in the same run by this process: ``Popen`` of the same
   ``/bin/date`` (the floor of starting a process here) and a POST from ``http.client`` to the
   same simulator (the floor of one request).

2. Idle cost (``poll_cost.py``'s method): two agents, file sink, unchanged document, each
   against its own simulator, one without a policy and one with hooks and rules configured;
   CPU per unchanged poll (schedstat) and peak RSS (VmHWM), side by side. Goals: <= 1 ms per
   poll, <= 40 MB, with the policy too.

    .venv/bin/python bench/actions_latency.py                 # 40 events, 60 s idle window
    .venv/bin/python bench/actions_latency.py --quick         # smoke test
"""

from __future__ import annotations

import argparse
import http.client
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import poll_cost  # the idle measurement's method, reused
from support import proc
from support.agentlog import AgentLog, log_time, pct

from se_forwarder_testbed import agentproc
from se_forwarder_testbed.simulator.server import Simulator
from se_forwarder_testbed.simulator.wire import SE_PATH

DATE = "/bin/date"
GOAL_HOOK_MS, GOAL_APPROVAL_MS = 100.0, 50.0
POLICY = """
[policy.hooks.stamp]
command = ["{date}", "+%s.%N"]
timeout = 10

[[policy.rules]]
affects_this_vm = true
pre_hooks = ["stamp"]
approve = "after-hooks"
"""


class Log(AgentLog):
    """The agent's FirstSeen commit times and its hook's printed times, by EventId."""

    def __init__(self, stream) -> None:
        super().__init__(stream)
        self.committed: dict[str, float] = {}
        self.stamped: dict[str, float] = {}

    def handle(self, line: dict, raw: str, arrived: float) -> None:
        if line.get("msg") == "record" and line.get("Phase") == "FirstSeen":
            self.committed[line["EventId"]] = log_time(line["time"])
        elif line.get("msg") == "hook output":
            self.stamped[line["EventId"]] = float(line["line"])


def event(i: int) -> dict:
    return {
        "EventId": f"bench-{i:04d}",
        "EventType": "Reboot",
        "ResourceType": "VirtualMachine",
        "Resources": ["bench-vm"],
        "EventStatus": "Scheduled",
        "NotBefore": time.time() + 900,
        "Description": "",
        "EventSource": "Platform",
        "DurationInSeconds": -1,
    }


def latency(events: int, interval: float) -> dict[str, list[float]]:
    with (
        tempfile.TemporaryDirectory(prefix="bench-actions-") as tmp,
        Simulator(vm_name="bench-vm", first_call_delay=0.0) as sim,
    ):
        work = Path(tmp)
        cfg = agentproc.write_config(
            work / "c.toml",
            sim.url,
            work / "state",
            poll_interval=interval,
            extra=POLICY.format(date=DATE),
        )
        agent = agentproc.start(cfg, stderr=subprocess.PIPE)
        log = Log(agent.stderr)
        log.start()
        try:
            for i in range(events):
                sim.set_events([event(i)])
                eid = f"bench-{i:04d}"
                if not log.wait_for(lambda e=eid: e in log.stamped, 30):
                    raise SystemExit(f"no hook run for {eid}: agent exit {agent.poll()}")
                if not sim.wait_until(lambda s, e=eid: e in s.approvals, 10):
                    raise SystemExit(f"no approval for {eid}")
                sim.set_events([])
                time.sleep(interval * 1.5)
        finally:
            agentproc.stop(agent)
        post_at = _post_times(sim)
    ids = sorted(log.stamped)
    return {
        "hook": [(log.stamped[e] - log.committed[e]) * 1000 for e in ids],
        "approval": [(post_at[e] - log.stamped[e]) * 1000 for e in ids],
    }


def _post_times(sim: Simulator) -> dict[str, float]:
    """EventId -> when the simulator received its approval POST (in approval order)."""
    posts = [r.at for r in sim.requests if r.method == "POST" and r.path.startswith(SE_PATH)]
    order = sorted(sim.approvals, key=sim.approvals.get)
    return dict(zip(order, posts, strict=True))


def baselines(n: int) -> dict[str, list[float]]:
    spawn, post = [], []
    for _ in range(n):
        t0 = time.time()
        out = subprocess.run([DATE, "+%s.%N"], capture_output=True, text=True, check=True)
        spawn.append((float(out.stdout) - t0) * 1000)
    with Simulator(first_call_delay=0.0, rate_limit=None) as sim:
        host, port = sim.url.removeprefix("http://").split(":")
        conn = http.client.HTTPConnection(host, int(port))
        for i in range(n):
            t0 = time.time()
            conn.request(
                "POST",
                f"{SE_PATH}?api-version=2020-07-01",
                json.dumps({"StartRequests": [{"EventId": f"x-{i}"}]}),
                {"Metadata": "true"},
            )
            conn.getresponse().read()
            post.append((sim.requests[-1].at - t0) * 1000)
        conn.close()
    return {"hook": spawn, "approval": post}


def idle(interval: float, duration: float) -> dict[str, tuple[int, float, float]]:
    """name -> (polls, CPU ms per poll, peak RSS MB), both agents measured in the same window."""
    with (
        tempfile.TemporaryDirectory(prefix="bench-actions-idle-") as tmp,
        Simulator(rate_limit=None, first_call_delay=0.0) as plain_sim,
        Simulator(rate_limit=None, first_call_delay=0.0) as policy_sim,
    ):
        work = Path(tmp)
        agents = {}
        for name, sim, extra in (
            ("no policy", plain_sim, ""),
            ("policy", policy_sim, POLICY.format(date=DATE)),
        ):
            cfg = agentproc.write_config(
                work / f"{name[:2]}.toml",
                sim.url,
                work / f"{name[:2]}-state",
                poll_interval=interval,
                file_sink=work / f"{name[:2]}.jsonl",
                extra=extra,
            )
            agents[name] = (agentproc.start(cfg), sim)
        try:
            count = {n: (lambda s=s: poll_cost.count(s, True)) for n, (_, s) in agents.items()}
            if not poll_cost.wait_for(lambda: all(c() >= 10 for c in count.values()), 60):
                raise SystemExit("warm-up failed: an agent never polled")
            start = {n: (proc.cpu_ns(p.pid), count[n]()) for n, (p, _) in agents.items()}
            time.sleep(duration)
            out = {}
            for n, (p, _) in agents.items():
                polls = count[n]() - start[n][1]
                out[n] = (
                    polls,
                    (proc.cpu_ns(p.pid) - start[n][0]) / 1e6 / max(polls, 1),
                    proc.peak_rss_kb(p.pid) / 1024,
                )
        finally:
            for p, _ in agents.values():
                agentproc.stop(p)
    return out


def show(title: str, values: list[float]) -> str:
    return (
        f"{title:<44} {len(values):>4} {pct(values, 0.5):>8.1f} {pct(values, 0.9):>8.1f} "
        f"{pct(values, 0.99):>8.1f} {max(values):>8.1f}"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--events", type=int, default=40)
    ap.add_argument("--interval", type=float, default=0.5, help="poll interval (s)")
    ap.add_argument("--idle-seconds", type=float, default=60.0)
    ap.add_argument(
        "--quick", action="store_true", help="smoke test: 5 events, 0.2 s interval, 2 s idle window"
    )
    args = ap.parse_args(argv)
    if args.quick:
        args.events, args.interval, args.idle_seconds = 5, 0.2, 2.0
    lat = latency(args.events, args.interval)
    base = baselines(args.events)
    print(
        f"actions_latency: {args.events} events, poll interval {args.interval:g} s, hook "
        f"{DATE}, {sys.version.split()[0]}\n"
    )
    print(f"{'latency (ms)':<44} {'n':>4} {'p50':>8} {'p90':>8} {'p99':>8} {'max':>8}")
    print(show("FirstSeen committed -> hook started", lat["hook"]))
    print(show("  baseline: Popen -> process started", base["hook"]))
    print(show("hook exit -> approval POST received", lat["approval"]))
    print(show("  baseline: http.client POST -> received", base["approval"]))
    cost = idle(args.interval, args.idle_seconds)
    print(
        f"\n{'idle agent, unchanged document':<32} {'polls':>6} {'CPU ms/poll':>12} "
        f"{'peak RSS MB':>12}"
    )
    for name, (polls, cpu, rss) in cost.items():
        print(f"{name:<32} {polls:>6} {cpu:>12.3f} {rss:>12.1f}")
    print()
    pol = cost["policy"]
    for text, ok, value in [
        (
            f"FirstSeen -> hook started p99 <= {GOAL_HOOK_MS:g} ms",
            pct(lat["hook"], 0.99) <= GOAL_HOOK_MS,
            f"{pct(lat['hook'], 0.99):.1f} ms",
        ),
        (
            f"hook exit -> approval POST p99 <= {GOAL_APPROVAL_MS:g} ms",
            pct(lat["approval"], 0.99) <= GOAL_APPROVAL_MS,
            f"{pct(lat['approval'], 0.99):.1f} ms",
        ),
        ("CPU per unchanged poll <= 1 ms with a policy", pol[1] <= 1.0, f"{pol[1]:.3f} ms"),
        ("peak RSS <= 40 MB with a policy", pol[2] <= 40.0, f"{pol[2]:.1f} MB"),
    ]:
        print(f"  [{'PASS' if ok else 'MISS'}] {text}: {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
