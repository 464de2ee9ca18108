"""``approve = "service"``: an event is approved early only once the service's coordinator
admits this VM (at most N of the service in impact at once, one zone or fault domain at a time;
docs/policy.md, "Early approval across a service"), asked again every ``retry_seconds`` until
then, NotBefore, or the event starting or ending; the slot is given back when the event is over
(after its hooks after it). Any failure to reach the coordinator is a "no": the event starts at
NotBefore, as without the policy.

A slot this VM was given is kept in its state database (``service-slot/<EventId>``) until it is
given back: the release is retried every ``retry_seconds`` (storage down, a partition), and taken
up again after a restart (a kill -9 between the event's end and the release), so a slot is not
left to its expiry, which would hold the service's next VMs back until NotBefore.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .. import logs
from ..approvals.service import Request
from ..clock import Clock
from ..identity.config import IdentityConfig
from ..model import LifecycleRecord, VmIdentity
from ..timefmt import parse_iso_ms

if TYPE_CHECKING:
    from ..approvals.coordinator import Coordinator
    from ..outbox import Store
    from ..policy.service_config import ServiceConfig
    from .book import Book


SLOT = "service-slot/"  # a slot this VM holds, in its state database, until it is given back


def service_of(vm: VmIdentity, tag: str) -> str | None:
    """The VM's service as the fleet view reads it: its tag, else its Kubernetes node pool,
    else its scale set, else its resource group (dashboards/definitions/fleet-vms.kql)."""
    tags = vm.Tags or {}
    named = next((v for k, v in tags.items() if k.lower() == tag.lower() and v), None)
    if named:
        return f"tag:{named}"
    if vm.NodePool and vm.Cluster:
        return f"node-pool:{vm.Cluster.lower()}/{vm.NodePool.lower()}"
    if vm.ScaleSetName:
        return f"scale-set:{vm.ScaleSetName.lower()}"
    return f"resource-group:{vm.ResourceGroup.lower()}" if vm.ResourceGroup else None


class ServiceGate:
    def __init__(
        self,
        cfg: ServiceConfig,
        identity: IdentityConfig | None,
        book: Book,
        clock: Clock,
        log: logging.Logger,
        coordinator: Callable[[str], Coordinator] | None = None,
        store: Store | None = None,
    ) -> None:
        self.cfg, self.identity, self.book, self.clock, self.log = cfg, identity, book, clock, log
        self._make = coordinator or self._build
        self._coordinators: dict[str, Coordinator] = {}
        self._stop = clock.event()
        self._lock = threading.Lock()
        self._via: dict[str, str] = {}  # EventId -> how it was admitted (for what it got)
        self.store = store  # the slots this VM holds (SLOT + EventId -> service and key)

    def _build(self, service: str) -> Coordinator:
        from azure.storage.blob import ContainerClient

        from ..approvals.coordinator import Coordinator
        from ..identity import credential

        # no retry of the SDK's own: its first waits 15 s (ExponentialRetry's initial_backoff),
        # holding this event's lane past ``retry_seconds``; the gate asks again on its own cadence
        kw: dict[str, Any] = {"retry_total": 0, "connection_timeout": 5, "read_timeout": 10}
        if self.cfg.ca_file is not None:
            kw["connection_verify"] = str(self.cfg.ca_file)
        client = ContainerClient(
            self.cfg.account_url,
            self.cfg.container,
            credential=credential.build(self.identity or IdentityConfig(), clock=self.clock),
            **kw,
        )
        return Coordinator(
            client,
            service,
            limit=self.cfg.limit,
            spread=self.cfg.spread,
            bound_seconds=self.cfg.impact_bound_seconds,
            log=self.log,
        )

    def _coordinator(self, service: str) -> Coordinator:
        with self._lock:
            if service not in self._coordinators:
                self._coordinators[service] = self._make(service)
            return self._coordinators[service]

    @staticmethod
    def _key(r: LifecycleRecord, vm: VmIdentity) -> str:
        """The claim's key: the VM and its event (a started event's records have no NotBefore)."""
        return f"{vm.key}|{r.EventId}"

    def _request(self, r: LifecycleRecord, vm: VmIdentity) -> Request:
        return Request(
            self._key(r, vm),
            vm.VmName or vm.key,
            r.EventId,
            vm.Zone or "",
            vm.FaultDomain,
            parse_iso_ms(r.NotBefore or ""),
        )

    def admitted(self, r: LifecycleRecord, vm: VmIdentity, wanted: Callable[[], bool]) -> bool:
        """Ask until admitted (True: approve it now) or no longer worth asking (False)."""
        service = service_of(vm, self.cfg.tag)
        if service is None:
            self._say(r, "not approved early: this VM's service is unknown", logging.WARNING)
            return False
        try:
            req, coordinator = self._request(r, vm), self._coordinator(service)
        except Exception as exc:  # no credential, no SDK: a "no", said once
            self._say(r, f"not approved early: no coordinator ({exc})", logging.ERROR)
            return False
        while not self._stop.is_set():
            if not wanted() or self.clock.wall_ms() >= req.not_before_ms:
                self._say(r, "not approved early: it starts at NotBefore", logging.INFO)
                return False
            ok, why = coordinator.claim(req)
            if ok:
                self._keep(r.EventId, service, req.key)
                with self._lock:
                    self._via[r.EventId] = f"{service}: {why}"
                self._say(r, f"admitted by the service's coordinator ({why})", logging.INFO)
                return True
            self._say(r, f"waiting for the service's coordinator: {why}", logging.INFO)
            self.clock.wait(self._stop, self.cfg.retry_seconds)
        return False

    def via(self, eid: str) -> str | None:
        with self._lock:
            return self._via.get(eid)

    def release(self, r: LifecycleRecord, vm: VmIdentity) -> None:
        """The event is over: its slot back (retried while this VM holds it)."""
        service = service_of(vm, self.cfg.tag)
        if service is not None:
            self.give_back(r.EventId, service, self._key(r, vm))

    def held(self) -> dict[str, tuple[str, str]]:
        """The slots this VM holds: EventId -> (service, key)."""
        try:
            saved = self.store.scan(SLOT) if self.store is not None else {}
        except Exception as exc:
            logs.event(self.log, logging.WARNING, "cannot read the service slots", error=str(exc))
            return {}
        return {k[len(SLOT) :]: (str(v["service"]), str(v["key"])) for k, v in saved.items()}

    def give_back(self, eid: str, service: str, key: str) -> None:
        """Release until done, this run stops, or ``impact_bound_seconds`` (then it expires)."""
        kept = eid in self.held()
        deadline = self.clock.monotonic() + self.cfg.impact_bound_seconds
        while True:
            done, why = self._coordinator(service).release(key)
            over = done or not kept or self.clock.monotonic() >= deadline
            if over or self._stop.is_set():
                break
            self.clock.wait(self._stop, self.cfg.retry_seconds)
        if done and kept:
            self._forget(eid)
        logs.event(
            self.log,
            logging.INFO if done else logging.WARNING,
            "service slot given back" if done else "service slot not given back (it expires)",
            EventId=eid,
            service=service,
            why=why if done or not self._stop.is_set() else f"{why}; again after a restart",
        )

    def _keep(self, eid: str, service: str, key: str) -> None:
        if self.store is None:
            return
        try:
            self.store.save(SLOT + eid, {"service": service, "key": key})
        except Exception as exc:  # kept in the store anyway: it expires there at the latest
            logs.event(self.log, logging.WARNING, "cannot keep a service slot", error=str(exc))

    def _forget(self, eid: str) -> None:
        if self.store is not None:
            try:
                self.store.forget([SLOT + eid])
            except Exception as exc:
                logs.event(self.log, logging.WARNING, "cannot forget a slot", error=str(exc))

    def stop(self) -> None:
        self._stop.set()

    def _say(self, r: LifecycleRecord, words: str, level: int) -> None:
        self.book.approval(r.EventId, words)
        logs.event(self.log, level, "service approval", EventId=r.EventId, decision=words)
