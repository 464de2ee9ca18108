"""The instance document (``/metadata/instance``) → the VM identity columns of every record."""

from __future__ import annotations

import socket
from typing import Any

from .. import __version__
from ..model import VmIdentity


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().isdigit():
        return int(value)
    return None


def identity_from_instance(doc: dict[str, Any], computer: str | None = None,
                           vm_name: str | None = None) -> VmIdentity:
    """Read ``compute.*``; anything missing or of the wrong type becomes null, never an error.
    Without ``compute.name`` the VM name is ``vm_name`` (``agent.vm_name``) or null: never the
    host name, which is not the VM's name on a scale set (a record naming the wrong VM, and a
    wrong AffectsThisVm, is worse than one that says it does not know)."""
    compute = doc.get("compute") if isinstance(doc.get("compute"), dict) else {}
    computer = computer if computer is not None else socket.gethostname()
    return VmIdentity(
        Computer=computer,
        VmName=_text(compute.get("name")) or vm_name or None,
        VmId=_text(compute.get("vmId")),
        VmResourceId=_text(compute.get("resourceId")),
        SubscriptionId=_text(compute.get("subscriptionId")),
        ResourceGroup=_text(compute.get("resourceGroupName")),
        Location=_text(compute.get("location")),
        Zone=_text(compute.get("zone")),
        ScaleSetName=_text(compute.get("vmScaleSetName")),
        FaultDomain=_int(compute.get("platformFaultDomain")),
        UpdateDomain=_int(compute.get("platformUpdateDomain")),
        AgentVersion=__version__,
        IdentityKnown=bool(_text(compute.get("name")) or _text(compute.get("vmId"))),
    )

