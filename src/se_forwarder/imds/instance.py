"""The instance document (``/metadata/instance``) → the VM identity columns of every record."""

from __future__ import annotations

import logging
import socket
import threading
import time
from typing import Any

from .. import __version__, logs
from ..delivery.backoff import Schedule
from ..errors import ImdsError
from ..model import VmIdentity
from .client import ImdsClient

INSTANCE_RETRY = Schedule(1.0, 60.0)


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


def identity_from_instance(doc: dict[str, Any], computer: str | None = None) -> VmIdentity:
    """Read ``compute.*``; anything missing or of the wrong type becomes null, never an error."""
    compute = doc.get("compute") if isinstance(doc.get("compute"), dict) else {}
    return VmIdentity(
        Computer=computer if computer is not None else socket.gethostname(),
        VmName=_text(compute.get("name")),
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
    )


def read_identity(client: ImdsClient, stop: threading.Event, wait: float,
                  log: logging.Logger, *, quiet: bool = False) -> VmIdentity:
    """The VM identity from the instance document, retrying for up to ``wait`` seconds: every
    record carries it. Then the agent polls without it rather than miss events (a Spot eviction
    gives 30 s): the identity columns fill in when it answers (asked again every minute)."""
    attempt = 0
    deadline = time.monotonic() + wait
    while not stop.is_set():
        try:
            return identity_from_instance(client.instance())
        except ImdsError as exc:
            delay = min(60.0, INSTANCE_RETRY.delay(attempt) + 1.0)
            if time.monotonic() + delay > deadline:
                if quiet:
                    logs.event(log, logging.WARNING, "instance document refresh failed",
                               error=str(exc))
                else:
                    logs.event(log, logging.ERROR, "instance document unavailable; polling "
                               "without it (VM identity columns null until it answers)",
                               error=str(exc))
                break
            logs.event(log, logging.WARNING, "instance document unavailable; retrying",
                       error=str(exc), retry_in=round(delay, 1))
            attempt += 1
            stop.wait(delay)
    return identity_from_instance({})
