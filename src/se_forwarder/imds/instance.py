"""The instance document (``/metadata/instance``) → the VM identity columns of every record."""

from __future__ import annotations

import socket
from collections.abc import Sequence
from typing import Any

from .. import __version__
from ..model import VmIdentity
from .tags import choose


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
                           vm_name: str | None = None, tags: Sequence[str] = ()) -> VmIdentity:
    """Read ``compute.*``; anything missing or of the wrong type becomes null, never an error.
    The VM name is never null: without ``compute.name`` it is ``vm_name`` (``agent.vm_name``),
    else the host name, so AffectsThisVm can be decided before the instance document answers."""
    return read_instance(doc, computer, vm_name, tags)[0]


def read_instance(doc: dict[str, Any], computer: str | None = None, vm_name: str | None = None,
                  tags: Sequence[str] = ()) -> tuple[VmIdentity, tuple[str, ...]]:
    """The identity and the problems met reading the chosen ``tags`` (one line each)."""
    known = isinstance(doc.get("compute"), dict)
    compute = doc["compute"] if known else {}
    computer = computer if computer is not None else socket.gethostname()
    chosen = choose(compute, tags if known else ())  # no document yet: tags unknown (null)
    return VmIdentity(
        Computer=computer,
        VmName=_text(compute.get("name")) or vm_name or computer or None,
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
        Tags=chosen.values,
    ), chosen.problems

