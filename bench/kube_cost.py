#!/usr/bin/env python3
"""CPU and memory per node: the DaemonSet's agent (``[kubernetes]`` with a drain rule) beside the
plain agent, measured in the same run, idle and during a drain.

Both are ``se-forwarder run`` subprocesses polling a simulator of their own at the production
interval (1 s) with the file sink; the DaemonSet's agent also talks to the Kubernetes API
stand-in (HTTPS, a service-account token; lightkube), as it does in its pod. Each simulator plays
the same scenario: nothing for ``--idle`` seconds after a warm-up, then a Reboot of the VM. The
DaemonSet's agent cordons the node, evicts two pods through the Eviction API under a
PodDisruptionBudget (the second refused with 429 and retried with backoff until the bench makes
the first pod's replacement ready, ``--hold`` seconds later), approves early and uncordons after
the event; the plain agent records the same event. CPU: ``sum_exec_runtime`` over the process's
threads (``/proc/<pid>/task/*/schedstat``), per second of the window; memory: VmRSS at the end of
each window and VmHWM (peak) at the end.

    .venv/bin/python bench/kube_cost.py                 # ~2 min: 60 s idle, the drain
    .venv/bin/python bench/kube_cost.py --quick         # smoke test (~20 s)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from support import proc

from se_forwarder_testbed import agentproc
from se_forwarder_testbed.simulator.scenario import Scenario
from se_forwarder_testbed.simulator.server import Simulator
from se_forwarder_testbed.standins.kubernetes import KubernetesApi

NODE = "aks-nodepool1-0"
WARMUP = 6.0  # scenario seconds before the idle window: imports, first call, lightkube's client


@dataclass
class Window:
    cpu_ns: int
    seconds: float


@dataclass
class Result:
    name: str
    idle_cpu_ms_s: float
    idle_rss_mb: float
    drain_cpu_ms_s: float
    drain_rss_mb: float
    peak_rss_mb: float
    startup_cpu_s: float
    threads: int


def scenario(appear: float) -> Scenario:
    event = {
        "type": "Reboot",
        "resources": ["$vm"],
        "source": "Platform",
        "appear": appear,
        "not_before": appear + 600.0,
        "approval_delay": 2.0,
        "remove_after_start": 3.0,
    }
    return Scenario.model_validate(
        {"name": "kube-cost", "vm": {"name": "aks-nodepool1-0-vmss_0"}, "events": [event]}
    )


def cluster(api: KubernetesApi) -> None:
    c = api.cluster
    for name in (NODE, "aks-nodepool1-1"):
        c.add_node(name, labels={"kubernetes.azure.com/cluster": "MC_rg_aks1_westeurope"})
    for name, where in (("web-1", NODE), ("web-2", NODE), ("web-3", "aks-nodepool1-1")):
        c.add_pod(name, where, labels={"app": "web"}, owner=("ReplicaSet", "web-7d4"))
    c.add_pod("kube-proxy-x1", NODE, namespace="kube-system", owner=("DaemonSet", "kube-proxy"))
    c.add_pdb("web", {"app": "web"}, minAvailable=2)


def kubernetes_toml(api: KubernetesApi) -> str:
    return (
        f'\n[kubernetes]\nnode_name = "{NODE}"\napi_server = "{api.url}"\n'
        f'service_account_dir = "{api.service_account_dir}"\n\n'
        '[[kubernetes.drain]]\nevent_types = ["Reboot"]\naction = "drain"\n'
        "approve_when_drained = true\n"
    )


def phases(path: Path) -> list[str]:
    if not path.exists():
        return []
    return [json.loads(line).get("Phase", "") for line in path.read_text().splitlines()]


def wait_for(pred: Any, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.05)
    return bool(pred())


def run(idle: float, hold: float, drain: float) -> tuple[list[Result], list[str], list[str]]:
    appear = WARMUP + idle + 1.0
    with tempfile.TemporaryDirectory(prefix="bench-kube-cost-") as tmp, ExitStack() as stack:
        work = Path(tmp)
        api = stack.enter_context(KubernetesApi(work / "kube"))
        cluster(api)
        procs: dict[str, tuple[subprocess.Popen[str], Simulator, Path]] = {}
        for name, extra in (("agent", ""), ("daemonset", kubernetes_toml(api))):
            sim = stack.enter_context(
                Simulator(scenario(appear), speed=1.0, first_call_delay=0.0, rate_limit=None)
            )
            sink = work / f"{name}.jsonl"
            cfg = agentproc.write_config(
                work / f"{name}.toml",
                sim.url,
                work / f"{name}-state",
                poll_interval=1.0,
                file_sink=sink,
                stop_flush_seconds=2,
                extra=extra,
            )
            procs[name] = (agentproc.start(cfg), sim, sink)
        codes: dict[str, int] = {}
        try:
            sims = [s for _, s, _ in procs.values()]
            wait_for(lambda: all(s.scenario_time() >= WARMUP for s in sims), WARMUP + 30)
            dead = {n: p.poll() for n, (p, _, _) in procs.items() if p.poll() is not None}
            if dead:
                raise SystemExit(f"an agent exited during the warm-up: {dead}")
            pids = {n: p.pid for n, (p, _, _) in procs.items()}
            startup = {n: proc.cpu_seconds(pid) for n, pid in pids.items()}
            t0, c0 = time.monotonic(), {n: proc.cpu_ns(pid) for n, pid in pids.items()}
            time.sleep(idle)
            t1, c1 = time.monotonic(), {n: proc.cpu_ns(pid) for n, pid in pids.items()}
            idle_rss = {n: proc.rss_kb(pid) / 1024 for n, pid in pids.items()}
            wait_for(lambda: all(s.scenario_time() >= appear for s in sims), 30)
            t2, c2 = time.monotonic(), {n: proc.cpu_ns(pid) for n, pid in pids.items()}
            wait_for(lambda: ("web-2", 429) in [(p, c) for _, p, c in api.cluster.evictions], 30)
            time.sleep(hold)  # the budget holds web-2 back; the agent retries with backoff
            api.cluster.ready_replacements()
            ds_sink = procs["daemonset"][2]
            wait_for(lambda: "NodeUncordoned" in phases(ds_sink), drain)
            t3, c3 = time.monotonic(), {n: proc.cpu_ns(pid) for n, pid in pids.items()}
            drain_rss = {n: proc.rss_kb(pid) / 1024 for n, pid in pids.items()}
            results = [
                Result(
                    name=n,
                    idle_cpu_ms_s=(c1[n] - c0[n]) / 1e6 / (t1 - t0),
                    idle_rss_mb=idle_rss[n],
                    drain_cpu_ms_s=(c3[n] - c2[n]) / 1e6 / (t3 - t2),
                    drain_rss_mb=drain_rss[n],
                    peak_rss_mb=proc.peak_rss_kb(pid) / 1024,
                    startup_cpu_s=startup[n],
                    threads=proc.threads(pid),
                )
                for n, pid in pids.items()
            ]
            drain_seconds = t3 - t2
        finally:
            for n, (p, _, _) in procs.items():
                codes[n] = agentproc.stop(p, timeout=10)
        bad = {n: c for n, c in codes.items() if c != 0}
        if bad:
            raise SystemExit(f"exit statuses: {bad}")
        steps = [
            p for p in phases(procs["daemonset"][2]) if p.startswith("Node") or p == "Approved"
        ]
        reasons = api.cluster.event_reasons(NODE)
        print(f"drain window: {drain_seconds:.1f} s (event seen -> NodeUncordoned)")
        return results, steps, reasons


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--idle", type=float, default=60.0, help="seconds of the idle window")
    ap.add_argument("--hold", type=float, default=10.0, help="seconds the budget holds web-2")
    ap.add_argument("--drain-timeout", type=float, default=120.0)
    ap.add_argument("--quick", action="store_true", help="smoke test: 3 s idle, 2 s hold")
    a = ap.parse_args()
    if a.quick:
        a.idle, a.hold = 3.0, 2.0
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())} ({os.cpu_count()} CPUs)")
    results, steps, reasons = run(a.idle, a.hold, a.drain_timeout)
    head = (
        f"{'process':<10} {'idle CPU ms/s':>14} {'idle RSS MB':>12} {'drain CPU ms/s':>15} "
        f"{'drain RSS MB':>13} {'peak RSS MB':>12} {'startup CPU s':>14} {'threads':>8}"
    )
    print(head)
    for r in results:
        print(
            f"{r.name:<10} {r.idle_cpu_ms_s:>14.2f} {r.idle_rss_mb:>12.1f} "
            f"{r.drain_cpu_ms_s:>15.2f} {r.drain_rss_mb:>13.1f} {r.peak_rss_mb:>12.1f} "
            f"{r.startup_cpu_s:>14.2f} "
            f"{r.threads:>8}"
        )
    agent, ds = results
    print(
        f"daemonset / agent: idle CPU x{ds.idle_cpu_ms_s / max(agent.idle_cpu_ms_s, 1e-9):.2f}, "
        f"peak RSS +{ds.peak_rss_mb - agent.peak_rss_mb:.1f} MB"
    )
    print(f"daemonset's node steps: {' '.join(steps)}")
    print(f"kubernetes events: {' '.join(reasons)}")
    drained = "NodeDrained" in steps and "NodeUncordoned" in steps
    print(f"[{'PASS' if drained else 'MISS'}] the drain completed (cordon, drain, uncordon)")
    return 0 if drained else 1


if __name__ == "__main__":
    sys.exit(main())
