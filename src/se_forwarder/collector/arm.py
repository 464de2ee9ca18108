"""ARM resource ids as the collector needs them: the VM (or scale set) an event names, the
VMs a scale-set event affects, and the lower-cased form every platform row carries. A VM's name
keeps the case Azure gives it (the agents report it so; the contract's ``VmName`` is "as Azure
names it"): only the ids, subscription, group and scale set are lower-cased."""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import UnreadableEvent
from ..model import vm_name_key

_PARENT = re.compile(
    r"^/subscriptions/(?P<sub>[^/]+)/resourcegroups/(?P<rg>[^/]+)/providers/microsoft\.compute/"
    r"(?P<kind>virtualmachines|virtualmachinescalesets)/(?P<name>[^/]+)"
    r"(?:/virtualmachines/(?P<instance>[^/]+))?",
    re.IGNORECASE,
)


@dataclass(frozen=True, slots=True)
class Target:
    """A VM a platform row is about (ids lower-cased; the name as given)."""

    resource_id: str
    name: str
    subscription: str
    resource_group: str
    scale_set: str | None


def _vm_id(sub: str, rg: str, name: str) -> str:
    return (
        f"/subscriptions/{sub}/resourcegroups/{rg}"
        f"/providers/microsoft.compute/virtualmachines/{name}"
    )


def whole_scale_set(resource_id: str) -> bool:
    """The id names a scale set itself (not one of its VMs): its event lists the VMs."""
    m = _PARENT.match(resource_id.strip())
    return (
        m is not None and m["kind"].lower() == "virtualmachinescalesets" and m["instance"] is None
    )


def targets(resource_id: str, resources: list[str] | tuple[str, ...] = ()) -> list[Target]:
    """The VMs an event's ARM id (or an annotation's target id) is about.

    A VM's id gives that VM. A scale set's id gives one VM per name in ``resources``
    (``{scaleset}_{instance}``), each at ``.../virtualMachines/{name}`` as Microsoft's page
    assembles it; with no names, the scale set itself (so nothing is lost; the caller counts
    it). A Uniform scale-set VM (``.../virtualMachineScaleSets/{ss}/virtualMachines/{n}``) keeps
    its own id."""
    m = _PARENT.match(resource_id.strip())
    if m is None:
        raise UnreadableEvent(f"not a VM or scale-set id: {resource_id[:200]!r}")
    sub, rg = m["sub"].lower(), m["rg"].lower()
    name = m["name"]
    if m["kind"].lower() == "virtualmachines":
        return [Target(_vm_id(sub, rg, name.lower()), name, sub, rg, None)]
    ss = name.lower()
    if m["instance"] is not None:
        rid = m.group(0).lower()
        given = [r.strip() for r in resources if r and r.strip()]
        # the instance's name as Azure gives it ({scaleset}_{instance}), when the row names it
        own = next((r for r in given if r.lower() == f"{ss}_{m['instance'].lower()}"), None)
        return [Target(rid, own or f"{name}_{m['instance']}", sub, rg, ss)]
    names = [r.strip() for r in resources if r and r.strip()]
    if not names:
        rid = (
            f"/subscriptions/{sub}/resourcegroups/{rg}/providers/microsoft.compute/"
            f"virtualmachinescalesets/{ss}"
        )
        return [Target(rid, ss, sub, rg, ss)]
    unique: dict[str, str] = {}
    for n in names:  # one row per VM, whatever the casing; its name as first given
        unique.setdefault(n.lower(), n)
    return [Target(_vm_id(sub, rg, k), n, sub, rg, ss) for k, n in unique.items()]


def vm_key(subscription: str | None, resource_group: str | None, name: str | None) -> str:
    """The fleet view's key of a VM (``fleet-vms.kql``'s VmKey): subscription/group/name, lower
    case, the name compared as ``vm_name_key`` does."""
    return f"{subscription or ''}/{resource_group or ''}/{vm_name_key(name or '')}".lower()
