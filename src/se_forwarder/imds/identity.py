"""Whose VM this is: the instance document asked for at start, retried on its own schedule until
it answers, then refreshed now and then (a VM can be renamed or moved between scale sets).

Until it answers, the VM name is ``agent.vm_name`` (or unknown: never the host name, which a
scale set's VM does not share) and polling goes on without it; records made meanwhile are held
for it (``recording/hold.py``), and while they are it is asked for at every poll (``urgent``).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .. import logs
from ..backoff import Schedule
from ..errors import ImdsError
from ..model import VmIdentity
from .client import ImdsClient
from .instance import identity_from_instance, read_instance

RETRY = Schedule(5.0, 60.0)  # asking again for an instance document that failed
URGENT_RETRY = 1.0  # ... while records wait for it


class IdentityWatch:
    def __init__(
        self,
        client: ImdsClient,
        *,
        vm_name: str,
        refresh_seconds: float,
        on_change: Callable[[VmIdentity], None] | None = None,
        urgent: Callable[[], bool] = lambda: False,
        tags: Sequence[str] = (),
        node: Callable[[], Mapping[str, Any]] | None = None,
    ) -> None:
        """``node``: the Kubernetes node's columns (NodeName, NodePool, Cluster), on a node."""
        self.client = client
        self.node = node
        self.urgent = urgent
        self.vm_name = vm_name
        self.tags = tuple(tags)  # agent.tags: the only tags read
        self.truncated = 0  # tag values cut or left out, once per instance document that needed it
        self.refresh_seconds = refresh_seconds
        self.on_change = on_change
        self.log = logs.get("agent")
        self.vm = self._with_node(identity_from_instance({}, vm_name=vm_name))
        self._failures = 0

    def _with_node(self, vm: VmIdentity) -> VmIdentity:
        return dataclasses.replace(vm, **self.node()) if self.node is not None else vm

    def node_known(self) -> None:
        """The node's columns changed (read from the API server): on the identity from now."""
        vm = self._with_node(self.vm)
        if vm != self.vm:
            self.vm = vm
            if self.on_change is not None:
                self.on_change(vm)

    def refresh(self) -> float:
        """Ask for the instance document once; seconds until it should be asked for again."""
        try:
            vm, problems = read_instance(
                self.client.instance(), vm_name=self.vm_name, tags=self.tags
            )
            vm = self._with_node(vm)
        except ImdsError as exc:
            delay = RETRY.delay(self._failures) + 1.0
            self._failures += 1
            if self._failures == 1 or self._failures % 10 == 0:
                logs.event(
                    self.log,
                    logging.WARNING,
                    "instance document unavailable; retrying",
                    error=str(exc),
                    failures=self._failures,
                    retry_in=round(delay, 1),
                    VmName=self.vm.VmName,
                )
            if self.urgent():
                return URGENT_RETRY
            return delay if not self.vm.VmId else self.refresh_seconds
        self._failures = 0
        if vm != self.vm:
            logs.event(
                self.log,
                logging.INFO,
                "VM identity",
                VmName=vm.VmName,
                VmId=vm.VmId,
                Zone=vm.Zone,
                ScaleSetName=vm.ScaleSetName,
                Tags=vm.Tags,
            )
            if problems:
                self.truncated += len(problems)
                logs.event(
                    self.log,
                    logging.WARNING,
                    "tags cut or left out (agent.tags)",
                    problems="; ".join(problems),
                    VmName=vm.VmName,
                )
            self.vm = vm
            if self.on_change is not None:
                self.on_change(vm)
        return self.refresh_seconds
