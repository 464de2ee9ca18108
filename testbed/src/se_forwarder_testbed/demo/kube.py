"""``se-forwarder demo --kubernetes``: an AKS node pool through a Reboot, locally.

Two nodes of pool ``nodepool1``, each a scale-set VM with its own IMDS simulator and its own
real agent (``[kubernetes]``, a drain rule for Reboot that approves once drained), against the
Kubernetes API stand-in: a Deployment's three pods (``web``, a budget of minAvailable 2), a
DaemonSet's pod on each node. The platform reboots the first node's VM, then, once that is over,
the second's: each drain evicts one pod at once, is refused the next by the budget until the
replacement (started on the other node) is ready (``READY_AFTER`` scenario seconds later, the
stand-in's ReplicaSet), then approves, the VM reboots, and the node is uncordoned. The timeline,
the Kubernetes events and the nodes' state at the end are printed; exit status 0 when every node
was drained within its budget and is schedulable again. Then the fleet view's report on what the
agents delivered (``kube_report``): the pool is one service in its Services section.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any, TextIO

from ..scaledclock import ScaledClock
from ..simulator.scenario import Scenario
from ..simulator.server import Simulator
from ..standins.kubernetes import KubernetesApi

SPEED = 10.0  # scenario seconds per real second
READY_AFTER = 20.0  # scenario seconds until a replacement pod is ready
NODES = ("aks-nodepool1-38231-vmss000000", "aks-nodepool1-38231-vmss000001")
VMS = ("aks-nodepool1-38231-vmss_0", "aks-nodepool1-38231-vmss_1")
CLUSTER = "MC_rg-demo_aks-demo_westeurope"
APPEAR = (10.0, 150.0)  # the second VM's Reboot comes once the first is over
END = 320.0  # scenario seconds


def scenario(i: int) -> Scenario:
    return Scenario.model_validate(
        {
            "name": f"aks-reboot-{i}",
            "vm": {"name": VMS[i], "scale_set": "aks-nodepool1-38231-vmss", "update_domain": i},
            "events": [
                {
                    "type": "Reboot",
                    "resources": ["$vm"],
                    "source": "Platform",
                    "appear": APPEAR[i],
                    "not_before": APPEAR[i] + 600.0,
                    "approval_delay": 5.0,
                    "remove_after_start": 30.0,
                }
            ],
        }
    )


def config(base: Path, i: int, sim: Simulator, api: KubernetesApi) -> Path:
    state = base / NODES[i]
    text = f"""
[agent]
state_dir = "{state}"
poll_interval = 1.0
heartbeat_interval = 60
log_format = "text"

[imds]
endpoint = "{sim.url}"
first_call_timeout = 10

[sinks.file]
path = "{base / f"{NODES[i]}.records.jsonl"}"
heartbeat_path = "{base / f"{NODES[i]}.heartbeats.jsonl"}"

[kubernetes]
node_name = "{NODES[i]}"
api_server = "{api.url}"
service_account_dir = "{api.service_account_dir}"

[[kubernetes.drain]]
name = "reboots: drain, then approve"
event_types = ["Reboot"]
node_pools = ["nodepool1"]
action = "drain"
approve_when_drained = true
"""
    path = base / f"{NODES[i]}.toml"
    path.write_text(text)
    return path


def cluster(api: KubernetesApi) -> None:
    c = api.cluster
    for node in NODES:
        c.add_node(node, labels={"kubernetes.azure.com/cluster": CLUSTER})
        c.add_pod(
            f"kube-proxy-{node[-2:]}",
            node,
            namespace="kube-system",
            owner=("DaemonSet", "kube-proxy"),
        )
    for name, node in (("web-7d4-a", NODES[0]), ("web-7d4-b", NODES[0]), ("web-7d4-c", NODES[1])):
        c.add_pod(name, node, labels={"app": "web"}, owner=("ReplicaSet", "web-7d4"))
    c.add_pdb("web", {"app": "web"}, minAvailable=2)


def replica_set(api: KubernetesApi, clock: ScaledClock, stop: threading.Event) -> None:
    """Replacement pods become ready ``READY_AFTER`` scenario seconds after they appear."""
    first: dict[str, float] = {}
    while not stop.wait(0.1):
        now = clock.monotonic()
        for name in api.cluster.unready_replacements():
            first.setdefault(name, now)
            if now - first[name] >= READY_AFTER:
                api.cluster.ready_replacements([name])


def run_pool(base: Path, out: TextIO, speed: float = SPEED) -> int:
    from se_forwarder.agent import Agent
    from se_forwarder.config import load
    from se_forwarder.sinks import registry
    from se_forwarder.sinks.base import SinkContext

    clock = ScaledClock(speed, start_ms=int(time.time() // 60 * 60_000))
    stop = threading.Event()
    with KubernetesApi(base / "kube") as api:
        cluster(api)
        sims = [Simulator(scenario(i), clock=clock).start() for i in range(2)]
        agents = []
        try:
            for i, sim in enumerate(sims):
                cfg = load(config(base, i, sim, api), env={})
                agent = Agent(
                    cfg,
                    registry.build(cfg.sinks, SinkContext.of(cfg, clock)),
                    stop=clock.event(),
                    clock=clock,
                )
                threading.Thread(target=agent.run, name=f"agent-{i}", daemon=True).start()
                agents.append(agent)
            ready = threading.Thread(target=replica_set, args=(api, clock, stop), daemon=True)
            ready.start()
            print(
                f"AKS node pool nodepool1 ({CLUSTER}): {len(NODES)} nodes, "
                f"a Reboot each, at {speed:g}x",
                file=out,
            )
            while clock.monotonic() < END and not _done(base):
                time.sleep(0.2)
        finally:
            stop.set()
            for agent in agents:
                agent.request_stop()
            time.sleep(1.0)
            for sim in sims:
                sim.stop()
        rc = _summary(base, api, out)
    from .kube_report import report

    files = [base / f"{n}.{kind}.jsonl" for n in NODES for kind in ("records", "heartbeats")]
    report(base, files, clock.wall_ms(), out)
    return rc


def _rows(base: Path, node: str) -> list[dict[str, Any]]:
    path = base / f"{node}.records.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def _done(base: Path) -> bool:
    return all(any(r["Phase"] == "NodeUncordoned" for r in _rows(base, n)) for n in NODES)


def _summary(base: Path, api: KubernetesApi, out: TextIO) -> int:
    rows = sorted((r for n in NODES for r in _rows(base, n)), key=lambda r: r["TimeGenerated"])
    print("\nrecords (scenario time, node, phase, what the node step did):", file=out)
    for r in rows:
        print(
            f"  {r['TimeGenerated'][11:19]}  {r['NodeName']}  {r['Phase']:<18} "
            f"{r.get('NodeDetail') or ''}",
            file=out,
        )
    c = api.cluster
    print("\nKubernetes events (in order):", file=out)
    for e in c.events:
        node = e["involvedObject"]["name"]
        print(f"  {node}  {e['type']:<7} {e['reason']:<22} {e['message']}", file=out)
    print("\nevictions: " + ", ".join(f"{p} {code}" for _, p, code in c.evictions), file=out)
    ok = True
    for n in NODES:
        node = c.get_node(n)
        phases = [r["Phase"] for r in _rows(base, n)]
        fine = (
            not node["spec"].get("unschedulable")
            and "NodeDrained" in phases
            and "NodeUncordoned" in phases
        )
        ok = ok and fine
        print(
            f"{n}: {'CORDONED' if node['spec'].get('unschedulable') else 'schedulable'}; "
            f"steps: {', '.join(phases)}",
            file=out,
        )
    order = [
        (r["NodeName"], r["Phase"])
        for r in rows
        if r["Phase"] in ("NodeCordoned", "NodeUncordoned")
    ]
    one_at_a_time = order == [
        (NODES[0], "NodeCordoned"),
        (NODES[0], "NodeUncordoned"),
        (NODES[1], "NodeCordoned"),
        (NODES[1], "NodeUncordoned"),
    ]
    blocked = any(code == 429 for _, _, code in c.evictions)
    print(
        f"one node at a time: {one_at_a_time}; a budget held an eviction back: {blocked}", file=out
    )
    return 0 if ok and one_at_a_time and blocked else 1
