"""A fleet with AKS node pools (issue 31: "the fleet view shows the cluster's nodes as a service"),
rows made by the test bed's agent model (``se_forwarder_testbed.fleet.agent.VmAgent``: the
project's tracker and heartbeat code) and the collector's inventory rows
(``collector.record.inventory_rows``), with the plan they come from: the truth the services views
are held to, computed here from the plan, never from the rows.

The data ends at E (``END``, 2026-03-02 12:00 UTC); all of it is in March:

* cluster ``aks-prod`` (node resource group ``MC_rg-aks_aks-prod_westeurope``, AKS's
  ``kubernetes.azure.com/cluster`` label), pool ``nodepool1``, scale set
  ``aks-nodepool1-38231-vmss``: nodes ``_0`` to ``_3`` run the DaemonSet's agent (NodePool and
  Cluster on every row); ``_3`` scaled in at E-30 h by the cluster autoscaler (no Terminate: the
  inventory stops listing it); ``_4`` runs no agent (listed by the inventory only: its pool comes
  from its siblings). A Reboot on ``_1`` and ``_2`` done at E-20 h (10 minutes each); a Reboot
  on ``_0`` and ``_1`` announced at E-1 h for E+3 h: 2 of the pool's 4 live nodes at once;
* pool ``system`` of the same cluster, tagged ``service=aks-system`` at E-5 h (``az aks nodepool
  update --tags``: AKS gives a pool's tags to its scale set; the agents report them from then on):
  the tag wins from then on; a Reboot done on its ``_0`` at E-10 h, before the tag: charged to
  the pool;
* cluster ``aks-staging`` with a pool of the same name ``nodepool1``: another service; a Redeploy
  on its ``_0`` announced for E+5 h;
* a plain scale set ``vmss-web`` (agents, no Kubernetes): the scale set fallback; a Reboot on its
  ``_0`` announced for E+4 h.
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from se_forwarder.collector import record as rec
from se_forwarder.model import VmIdentity
from se_forwarder.report.kql.shims import INGESTION_COLUMN
from se_forwarder.timefmt import to_ms
from se_forwarder_testbed.fleet import documents
from se_forwarder_testbed.fleet.agent import VmAgent, iso
from se_forwarder_testbed.fleet.documents import view_at
from se_forwarder_testbed.fleet.model import HOUR, MINUTE, SECOND, EventPlan, Run, VmPlan

SUB = "3c9a1f70-5b2e-4d18-a6c4-9e0b7d2f1a55"
END = to_ms(datetime(2026, 3, 2, 12, 0, tzinfo=UTC))
START = END - 2 * 24 * HOUR
PROD = "MC_rg-aks_aks-prod_westeurope"
STAGING = "MC_rg-aks_aks-staging_westeurope"
POOL_SET = "aks-nodepool1-38231-vmss"
#: the pool of the issue, as every services view must name it (fleet-vms.kql)
POOL = f"node pool: {SUB}/{PROD}/nodepool1".lower()
#: the typical impact of a Reboot or Redeploy of unknown duration (-1): 10 minutes, Started to
#: removed (../shared/spec/scheduled-events-api.md)
TYPICAL_OTHERS = 600


@dataclass
class Node:
    """One VM of the plan, with what the plan knows of its service."""

    vm: VmIdentity
    agent: bool
    gone_at: int | None = None
    pool: str | None = None  # its node pool (agent or not: the plan knows)
    cluster: str | None = None
    retag: tuple[int, dict[str, str]] | None = None  # from then on, these tags

    def tags(self, t: int) -> dict[str, str]:
        if self.retag is not None and t >= self.retag[0]:
            return self.retag[1]
        return self.vm.Tags or {}

    @property
    def name(self) -> str:
        return self.vm.VmName or ""

    def service(self, t: int = END) -> str:
        """The rule the fleet view documents, at ``t``: the tag, else the node pool, else the
        scale set, else the resource group (qualified, lower case)."""
        if self.tags(t).get("service"):
            return self.tags(t)["service"]
        if self.pool and self.cluster:
            return f"node pool: {SUB}/{self.cluster}/{self.pool}".lower()
        if self.vm.ScaleSetName:
            return f"scale set: {SUB}/{self.vm.ResourceGroup}/{self.vm.ScaleSetName}".lower()
        return f"resource group: {SUB}/{self.vm.ResourceGroup}".lower()

    def live(self, t: int) -> bool:
        return self.gone_at is None or self.gone_at > t


@dataclass
class AksFleet:
    nodes: dict[str, Node] = field(default_factory=dict)
    events: list[EventPlan] = field(default_factory=list)
    records: list[dict[str, Any]] = field(default_factory=list)
    heartbeats: list[dict[str, Any]] = field(default_factory=list)
    platform: list[dict[str, Any]] = field(default_factory=list)


def _node(
    f: AksFleet,
    rg: str,
    scale_set: str,
    k: int,
    *,
    pool: str | None = None,
    agent: bool = True,
    tags: dict[str, str] | None = None,
) -> Node:
    """Instance ``k`` of ``scale_set``; a node of ``pool`` (its cluster: the node resource group
    ``rg``, as AKS's label says) reports NodeName, NodePool and Cluster when it runs an agent."""
    name = f"{scale_set}_{k}"
    rid = (
        f"/subscriptions/{SUB}/resourceGroups/{rg}/providers/Microsoft.Compute"
        f"/virtualMachineScaleSets/{scale_set}/virtualMachines/{k}"
    )
    kube = pool is not None and agent
    vm = VmIdentity(
        Computer=f"{scale_set}{k:06d}" if pool else name.replace("_", "-"),
        VmName=name,
        VmId=str(uuid.uuid5(uuid.NAMESPACE_URL, rid)),
        VmResourceId=rid,
        SubscriptionId=SUB,
        ResourceGroup=rg,
        Location="westeurope",
        Zone=str(1 + k % 3),
        ScaleSetName=scale_set,
        FaultDomain=0,
        UpdateDomain=k % 5,
        IdentityKnown=True,
        Tags=tags or {},
        NodeName=f"{scale_set}{k:06d}" if kube else None,
        NodePool=pool if kube else None,
        Cluster=rg if kube else None,
    )
    node = Node(vm, agent, None, pool, rg if pool else None)
    f.nodes[name] = node
    return node


def _event(
    f: AksFleet, eid: int, etype: str, names: tuple[str, ...], appear: int, nb: int, done: bool
) -> None:
    """A platform event naming ``names``, in the documents of their scale set's live VMs; when
    ``done``, started at NotBefore and removed 10 minutes later."""
    sets = {f.nodes[n].vm.ScaleSetName for n in names}
    audience = tuple(
        n for n, v in f.nodes.items() if v.vm.ScaleSetName in sets and v.live(appear) and v.agent
    )
    f.events.append(
        EventPlan(
            str(uuid.UUID(int=eid, version=4)).upper(),
            etype,
            audience,
            names,
            appear,
            nb,
            nb if done else None,
            nb + 10 * MINUTE if done else None,
        )
    )


def build() -> AksFleet:
    f = AksFleet()
    for k in range(5):
        _node(f, PROD, POOL_SET, k, pool="nodepool1", agent=k != 4)
    f.nodes[f"{POOL_SET}_3"].gone_at = END - 30 * HOUR
    for k in range(2):
        system = _node(f, PROD, "aks-system-38231-vmss", k, pool="system")
        system.retag = (END - 5 * HOUR, {"service": "aks-system"})
        _node(f, STAGING, "aks-nodepool1-99120-vmss", k, pool="nodepool1")
    for k in range(3):
        _node(f, "rg-web", "vmss-web", k)
    p = POOL_SET
    _event(
        f, 1, "Reboot", (f"{p}_1", f"{p}_2"), END - 20 * HOUR, END - 20 * HOUR + 15 * MINUTE, True
    )
    _event(f, 2, "Reboot", (f"{p}_0", f"{p}_1"), END - HOUR, END + 3 * HOUR, False)
    system0 = "aks-system-38231-vmss_0"
    _event(f, 3, "Reboot", (system0,), END - 10 * HOUR, END - 10 * HOUR + 15 * MINUTE, True)
    _event(f, 4, "Reboot", ("vmss-web_0",), END - 2 * HOUR, END + 4 * HOUR, False)
    _event(f, 5, "Redeploy", ("aks-nodepool1-99120-vmss_0",), END - 3 * HOUR, END + 5 * HOUR, False)
    _rows(f)
    return f


def _rows(f: AksFleet) -> None:
    for i, (name, node) in enumerate(f.nodes.items()):
        if not node.agent:
            continue
        seen = [e for e in f.events if name in e.audience]
        runs = [(node.vm, Run(START, node.gone_at, clean=False))]
        if node.retag is not None:  # the agent reads the new tags (here: restarted with them)
            at, tags = node.retag
            runs = [
                (node.vm, Run(START, at)),
                (replace(node.vm, Tags=tags), Run(at + 5 * SECOND, None)),
            ]
        for j, (vm, run) in enumerate(runs):
            plan = VmPlan(vm, [run], duplicate_every=40)
            agent = VmAgent(
                plan, seen, documents.timeline(seen), END, 300 * SECOND, seed=31 + i + 97 * j
            )
            for kind, row in agent.rows():
                (f.records if kind == "record" else f.heartbeats).append(row)
    t = START + 7 * MINUTE
    while t <= END:  # the collector's hourly inventory pass over the subscription
        listed = [
            rec.InventoryVm(
                resource_id=n.vm.VmResourceId or "",
                name=n.name,
                vm_id=n.vm.VmId,
                power_state="PowerState/running",
                zone=n.vm.Zone,
                fault_domain=n.vm.FaultDomain,
                tags=n.tags(t) or None,
            )
            for n in f.nodes.values()
            if n.live(t)
        ]
        for row in rec.inventory_rows(SUB, listed, t):
            if t + 2 * MINUTE <= END:
                f.platform.append({**row.as_dict(), INGESTION_COLUMN: iso(t + 2 * MINUTE)})
        t += HOUR


# -- the truth, from the plan -----------------------------------------------------------------


def windows(f: AksFleet, t: int) -> list[tuple[str, str, str, int, int, int]]:
    """(service, VM name, EventId, start, end, seconds) of each live VM's open event at ``t``
    due within 7 days (the views' window: NotBefore, or the start once Started, for the
    duration; unknown: the type's typical 10 minutes)."""
    out = []
    for e in f.events:
        v = view_at(e, t)
        if v is None:
            continue
        start = e.start if v.status == "Started" and e.start is not None else v.not_before_ms
        assert start is not None
        if start > t + 7 * 24 * HOUR:
            continue
        seconds = v.duration if v.duration >= 0 else TYPICAL_OTHERS
        for name in v.resources:
            node = f.nodes[name]
            if node.live(t):
                end = start + seconds * 1000
                end = max(end, t) if v.status == "Started" else end
                out.append((node.service(t), name, e.event_id, start, end, seconds))
    return out


def upcoming(f: AksFleet, t: int) -> dict[tuple, tuple]:
    """(service, zone, fault domain) -> (events, VMs, earliest NotBefore, VM-minutes)."""
    acc: dict[tuple, dict] = defaultdict(lambda: {"e": set(), "v": set(), "nb": [], "s": 0})
    for service, name, eid, start, _, seconds in windows(f, t):
        e = next(x for x in f.events if x.event_id == eid)
        if e.start is not None and e.start <= t:
            continue  # started: not upcoming
        vm = f.nodes[name].vm
        row = acc[(service, vm.Zone or "", vm.FaultDomain)]
        row["e"].add(eid)
        row["v"].add(name)
        row["nb"].append(start)
        row["s"] += seconds
    return {
        k: (len(r["e"]), len(r["v"]), min(r["nb"]), round(r["s"] / 60, 1)) for k, r in acc.items()
    }


def service_sizes(f: AksFleet, t: int) -> dict[str, int]:
    out: dict[str, int] = defaultdict(int)
    for n in f.nodes.values():
        if n.live(t):
            out[n.service(t)] += 1
    return dict(out)


def at_risk(f: AksFleet, t: int, vms: int = 5, percent: float = 50) -> dict[str, tuple]:
    """service -> (VMs at once, live VMs, names): the most VMs of a service impacted at once,
    for the services at risk (at least ``vms``, or ``percent`` % and at least 2)."""
    by: dict[str, list] = defaultdict(list)
    for w in windows(f, t):
        by[w[0]].append(w)
    sizes, out = service_sizes(f, t), {}
    for service, ws in by.items():
        best = max(({o[1] for o in ws if o[3] <= w[3] < o[4]} for w in ws), key=len)
        n = len(best)
        if n >= vms or (n >= 2 and 100 * n / max(sizes[service], n) >= percent):
            out[service] = (n, sizes[service], best)
    return out


def impact(f: AksFleet) -> dict[tuple, dict]:
    """(service, month) -> the events done (started and removed by E) and their VMs."""
    out: dict[tuple, dict] = defaultdict(lambda: {"vms": set(), "Reboot": set(), "minutes": 0.0})
    for e in f.events:
        if e.start is None or e.remove is None or e.remove > END:
            continue
        for name in e.resources:
            month = datetime.fromtimestamp(e.start / 1000, UTC).strftime("%Y-%m")
            row = out[(f.nodes[name].service(e.start), month)]
            row["vms"].add(name)
            row[e.event_type].add(e.event_id)
            row["minutes"] += (e.remove - e.start) / 60000
    return dict(out)
