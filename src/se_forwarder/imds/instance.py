"""The instance document (``/metadata/instance``) → the VM identity columns of every record.

pydantic at the edge, leniently: the identity is a label on every record, so a field missing or
of the wrong type becomes null on its own and never costs the others (the document is read as
served: IMDS has shipped numbers as strings)."""

from __future__ import annotations

import socket
from collections.abc import Sequence
from typing import Annotated, Any

from pydantic import (
    BaseModel,
    ConfigDict,
    ValidationError,
    ValidatorFunctionWrapHandler,
    WrapValidator,
)

from .. import __version__
from ..model import VmIdentity
from .tags import choose


def _or_none(value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
    try:
        return handler(value)
    except ValidationError:
        return None


def _numeric(value: Any) -> Any:
    """A count as IMDS serves it: a number, or a string of digits (never a bool)."""
    if isinstance(value, str) and value.strip().isdigit():
        return int(value)
    return value


_Text = Annotated[str | None, WrapValidator(_or_none)]
_Count = Annotated[int | None, WrapValidator(lambda v, h: _or_none(_numeric(v), h))]


class _Compute(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)

    name: _Text = None  # the names are the document's
    vmId: _Text = None
    resourceId: _Text = None
    subscriptionId: _Text = None
    resourceGroupName: _Text = None
    location: _Text = None
    zone: _Text = None
    vmScaleSetName: _Text = None
    platformFaultDomain: _Count = None
    platformUpdateDomain: _Count = None


class _Instance(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)

    compute: Annotated[_Compute | None, WrapValidator(_or_none)] = None


def identity_from_instance(
    doc: dict[str, Any],
    computer: str | None = None,
    vm_name: str | None = None,
    tags: Sequence[str] = (),
) -> VmIdentity:
    """Read ``compute.*``; anything missing or of the wrong type becomes null, never an error.
    Without ``compute.name`` the VM name is ``vm_name`` (``agent.vm_name``) or null: never the
    host name, which is not the VM's name on a scale set (a record naming the wrong VM, and a
    wrong AffectsThisVm, is worse than one that says it does not know)."""
    return read_instance(doc, computer, vm_name, tags)[0]


def read_instance(
    doc: dict[str, Any],
    computer: str | None = None,
    vm_name: str | None = None,
    tags: Sequence[str] = (),
) -> tuple[VmIdentity, tuple[str, ...]]:
    """The identity and the problems met reading the chosen ``tags`` (one line each)."""
    raw = doc.get("compute")
    known = isinstance(raw, dict)
    compute = _Instance.model_validate(doc).compute or _Compute()
    chosen = choose(
        raw if isinstance(raw, dict) else {}, tags if known else ()
    )  # no document yet: tags unknown
    computer = computer if computer is not None else socket.gethostname()
    return VmIdentity(
        Computer=computer,
        VmName=compute.name or vm_name or None,
        VmId=compute.vmId or None,
        VmResourceId=compute.resourceId or None,
        SubscriptionId=compute.subscriptionId or None,
        ResourceGroup=compute.resourceGroupName or None,
        Location=compute.location or None,
        Zone=compute.zone or None,
        ScaleSetName=compute.vmScaleSetName or None,
        FaultDomain=compute.platformFaultDomain,
        UpdateDomain=compute.platformUpdateDomain,
        AgentVersion=__version__,
        IdentityKnown=bool(compute.name or compute.vmId),
        Tags=chosen.values,
    ), chosen.problems
