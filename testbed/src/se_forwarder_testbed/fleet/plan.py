"""The scenario of one fleet cell (52 VMs): who the VMs are and what happens to them.

A cell is an availability set (6 VMs, fault and update domains, no zone), two scale sets (20
zonal instances, 10 Spot instances) and 16 standalone VMs. Larger fleets repeat the cell with
other names and identities and shifted times. What happens (times relative to the data's end E
or start S; ``kind`` on each event and ``fate`` on each VM name it for the tests):

* routine Freezes (live migration) on every standalone VM every few days; an update-domain walk
  of Reboots on the availability set (affected VMs reboot: clean stop, back minutes later);
* an event updated from Freeze to Reboot, its duration changed, a VM added and NotBefore moved
  earlier; a scale-set Reboot whose update removes a VM from ``Resources``;
* a Redeploy announced 3 days ahead and still scheduled at E; Reboots cancelled (Cancelled);
  an event removed while the agent was down (Unknown); a user Reboot approved early;
* a hardware failure seen only by the siblings (the failed VM crashes and returns later);
* an agent down for 3 hours across an event it saw start; Spot evictions (Preempt), one VM
  evicted 20 h before E that came back, reported for hours and fell silent; a scale-in
  (Terminate) after a clean stop; a stop never followed by a start; a crash loop;
* failing deliveries (drained, still failing at E, dropping records), 5.6 % poll errors over
  the last 3 hours, a version rollout, and rows delivered twice (late copies).
"""

from __future__ import annotations

import random
import uuid
from dataclasses import replace
from typing import Any

from se_forwarder.model import VmIdentity

from .model import SECOND, EventPlan, Run, VmPlan

SUBSCRIPTION = "6d0c1a9e-3f1b-4b6a-9c37-2a5e8f0d4b11"
NEW_VERSION = "0.2.0"


class Cell:
    """Plans of one cell: ``vms`` (by name) and ``events``."""

    def __init__(
        self, index: int, start: int, end: int, rng: random.Random, churn: bool = False
    ) -> None:
        self.i, self.start, self.end, self.rng, self.churn = index, start, end, rng, churn
        self.vms: dict[str, VmPlan] = {}
        self.events: list[EventPlan] = []
        #: Azure's own record of the cell (platform.plan: events, facts), with FleetSpec.platform
        self.platform: tuple[list[Any], list[Any]] = ([], [])
        self._identities()

    # -- who --------------------------------------------------------------------------------

    def _identities(self) -> None:
        c = self.i
        for k in range(6):
            self._vm(f"web-{c}-{k}", f"rg-web-{c}", "", k % 3, k % 5, None)
        for k in range(20):
            self._vm(
                f"vmss-app-{c}_{k}", f"rg-app-{c}", str(1 + k % 3), k % 2, k % 5, f"vmss-app-{c}"
            )
        for k in range(10):
            self._vm(
                f"vmss-spot-{c}_{k}", f"rg-spot-{c}", str(1 + k % 3), k % 2, k % 5, f"vmss-spot-{c}"
            )
        for k in range(16):
            self._vm(f"vm-{c}-{k:02d}", f"rg-std-{c}", "" if k < 4 else str(1 + k % 3), 0, 0, None)

    def _vm(self, name: str, rg: str, zone: str, fd: int, ud: int, scale_set: str | None) -> None:
        if self.churn and _other_casing(name):
            rg = "RG-" + rg[3:].capitalize()  # Azure gave this VM its group in another casing
        base = f"/subscriptions/{SUBSCRIPTION}/resourceGroups/{rg}/providers/Microsoft.Compute"
        rid = (
            f"{base}/virtualMachineScaleSets/{scale_set}/virtualMachines/{name.rsplit('_', 1)[1]}"
            if scale_set
            else f"{base}/virtualMachines/{name}"
        )
        vm = VmIdentity(
            Computer=name.replace("_", "-"),
            VmName=name,
            VmId=str(uuid.uuid5(uuid.NAMESPACE_URL, rid)),
            VmResourceId=rid,
            SubscriptionId=SUBSCRIPTION,
            ResourceGroup=rg,
            Location="westeurope",
            Zone=zone or None,
            ScaleSetName=scale_set,
            FaultDomain=fd,
            UpdateDomain=ud,
            Tags=tags_of(name),
        )
        self.vms[name] = VmPlan(vm, [Run(self.start, None)], duplicate_every=40)

    def group(self, name: str) -> tuple[str, ...]:
        """The VMs whose documents carry an event for ``name`` (availability set, placement
        group of a scale set, or the VM alone)."""
        prefix = (
            name.rsplit("_", 1)[0] + "_"
            if "_" in name
            else (name.rsplit("-", 1)[0] + "-" if name.startswith("web-") else name)
        )
        return tuple(n for n in self.vms if n.startswith(prefix)) if prefix != name else (name,)

    # -- what happens to a VM ------------------------------------------------------------------

    def interrupt(self, name: str, at: int, back: int | None, clean: bool = True) -> None:
        """The agent stops at ``at`` (a stop heartbeat when ``clean``) and starts at ``back``."""
        runs = self.vms[name].runs
        for k, run in enumerate(runs):
            if run.start <= at and (run.end is None or at < run.end):
                tail = Run(back, run.end, run.clean, run.version) if back is not None else None
                run.end, run.clean = at, clean
                if tail is not None and (tail.end is None or tail.start < tail.end):
                    runs.insert(k + 1, tail)
                return

    def upgrade(self, name: str, at: int) -> None:
        self.interrupt(name, at, at + 5 * SECOND)
        for run in self.vms[name].runs:
            if run.start > at:
                run.version = NEW_VERSION

    def event(
        self,
        names: tuple[str, ...],
        event_type: str,
        appear: int,
        notice: int | None,
        start_after: int | None,
        last: int | None,
        kind: str,
        **kw: Any,
    ) -> EventPlan:
        """An event for ``names``: NotBefore ``notice`` after ``appear`` (None: already
        Started), started ``start_after`` after NotBefore (None: never), removed ``last``
        after the start (or after NotBefore when it never starts; None: never)."""
        nb = None if notice is None else appear + notice
        start = appear if nb is None else (None if start_after is None else nb + start_after)
        anchor = start if start is not None else (nb if nb is not None else appear)
        served = tuple(self.vms[n].vm.VmName or n for n in names)  # a recreated VM keeps its name
        e = EventPlan(
            str(uuid.UUID(int=self.rng.getrandbits(128), version=4)).upper(),
            event_type,
            self.group(names[0]),
            served,
            appear,
            nb,
            start,
            None if last is None else anchor + last,
            kind=kind,
            **kw,
        )
        self.events.append(e)
        return e

    def impact(self, e: EventPlan, names: tuple[str, ...], down: int, clean: bool = False) -> None:
        """The affected VMs restart when ``e`` starts, back ``down`` later: a platform reboot is
        hard (no stop heartbeat; records not yet sent wait for the VM to be back), a user's
        reboot shuts the OS down cleanly."""
        assert e.start is not None
        for n in names:
            self.interrupt(n, e.start + 3 * SECOND, e.start + down, clean)

    def delete(self, name: str, at: int, how: str) -> None:
        """The VM stops existing at ``at`` (its agent dies with it, no stop heartbeat): no run
        after that, whatever was planned."""
        self.interrupt(name, at, None, clean=False)
        vp = self.vms[name]
        vp.runs[:] = [r for r in vp.runs if r.start < at]
        vp.gone_at, vp.gone_how = at, how

    def add_vm(self, name: str, like: str, at: int) -> VmPlan:
        """Scale-out: a new instance ``name`` of ``like``'s scale set, its agent from ``at``."""
        v = self.vms[like].vm
        self._vm(
            name,
            (v.ResourceGroup or "").lower(),
            v.Zone or "",
            v.FaultDomain or 0,
            v.UpdateDomain or 0,
            v.ScaleSetName,
        )
        self.vms[name].runs = [Run(at, None)]
        return self.vms[name]

    def recreate(self, name: str, at: int, back: int) -> VmPlan:
        """The VM is deleted at ``at`` (no Terminate) and created again under the same name and
        resource id with a new VmId, its agent from ``back``; the new one is ``name~2``."""
        old = self.vms[name]
        self.delete(name, at, "replaced")
        old.fate = "recreated-old"
        vm = replace(
            old.vm, VmId=str(uuid.uuid5(uuid.NAMESPACE_URL, f"{old.vm.VmResourceId}#{back}"))
        )
        new = VmPlan(
            vm,
            [Run(back, None)],
            duplicate_every=old.duplicate_every,
            fate="recreated",
            lag=old.lag,
        )
        self.vms[f"{name}~2"] = new
        return new


def tags_of(name: str) -> dict[str, str]:
    """The chosen tags a VM carries (docs/record-contract.md §7): three services of several VMs
    each, across every cell (storefront: the availability set; checkout: the app scale set;
    payments: half the standalone VMs); the Spot scale set and the other standalone VMs have no
    ``service`` tag, so they group under their scale set and their resource group."""
    base = name.split("~")[0]
    if base.startswith("web-"):
        return {"service": "storefront", "team": "shop", "env": "prod"}
    if base.startswith("vmss-app-"):
        return {"service": "checkout", "team": "shop", "env": "prod"}
    if base.startswith("vmss-spot-"):
        return {"team": "batch", "env": "prod"}
    if int(base.rsplit("-", 1)[1]) < 8:
        return {"service": "payments", "team": "money", "env": "prod"}
    return {}


def _other_casing(name: str) -> bool:
    """The VMs of a churning cell whose resource group is spelled in another casing."""
    last = name.rsplit("_", 1)[-1].rsplit("-", 1)[-1]
    return last.isdigit() and int(last) % 2 == 1 and not name.startswith("vm-")
