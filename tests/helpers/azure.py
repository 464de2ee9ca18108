"""Shared test peers for the Azure sinks: the token authority, the IMDS simulator (managed-identity
tokens), the Logs Ingestion and Event Hubs stand-ins, records shaped like the agent's, outbox
items, agent configs, and what reached the stand-ins. The agent itself runs as the test bed's
``AgentRun`` (in this process) or ``AgentProcess``.

Nothing here replaces our own code: the sinks, the worker, the store and the agent under test
are the real ones; only Azure is stood in for, by the stand-ins that speak its protocols.
"""

from __future__ import annotations

import json
import os
import sys
import time
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from se_forwarder.identity.config import IdentityConfig
from se_forwarder.model import record_id
from se_forwarder.sinks.base import OutboxRow
from se_forwarder_testbed.simulator.scenario import Scenario
from se_forwarder_testbed.simulator.server import Simulator
from se_forwarder_testbed.standins.eventhubs import EventHubsStandIn
from se_forwarder_testbed.standins.logs_ingestion import LogsIngestionStandIn
from se_forwarder_testbed.standins.tls import generate
from se_forwarder_testbed.standins.tokens import TokenAuthority

VENV_BIN = Path(sys.executable).parent
AGENT = str(VENV_BIN / "se-forwarder")
HUB = "scheduled-events"
RECORDS = "Custom-ScheduledEvents"
HEARTBEATS = "Custom-ScheduledEventsAgent"
VM_ID = "9f1d2c3b-0000-4000-8000-000000000001"


def wait_until(
    predicate: Callable[[], Any], timeout: float, interval: float = 0.05, what: str = "condition"
) -> Any:
    """Poll ``predicate`` until it returns something truthy; AssertionError after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)


# -- records --------------------------------------------------------------------------------------


def record(i: int, *, vm: str = "vm-a", vm_id: str = VM_ID, pad: int = 0, **over: Any) -> dict:
    """A lifecycle record with every contract column, RecordId derived like the agent's."""
    event_id = str(uuid.UUID(int=i + 1))
    phase = over.pop("Phase", "FirstSeen")
    rec = {
        "TimeGenerated": "2026-11-21T07:00:00.000Z",
        "RecordId": record_id(vm_id, event_id, phase),
        "Phase": phase,
        "Outcome": None,
        "EventId": event_id,
        "EventType": "Reboot",
        "EventStatus": "Scheduled",
        "EventSource": "Platform",
        "ResourceType": "VirtualMachine",
        "Resources": [vm],
        "Description": "Virtual machine is going to be restarted" + "." * pad,
        "DurationInSeconds": -1,
        "NotBefore": "2026-11-21T07:15:00.000Z",
        "DocumentIncarnation": i + 1,
        "FirstSeenAt": "2026-11-21T07:00:00.000Z",
        "StartedAt": None,
        "NoticeSeconds": 900.0,
        "SinceFirstSeenSeconds": 0.0,
        "StartDelaySeconds": None,
        "SinceStartedSeconds": None,
        "UncertaintySeconds": 1.0,
        "AffectsThisVm": True,
        "Computer": vm,
        "VmName": vm,
        "VmId": vm_id,
        "VmResourceId": None,
        "SubscriptionId": None,
        "ResourceGroup": None,
        "Location": "westeurope",
        "Zone": "1",
        "ScaleSetName": None,
        "FaultDomain": 0,
        "UpdateDomain": 0,
        "AgentVersion": "0.1.0",
    }
    rec.update(over)
    return rec


def heartbeat(i: int = 0, vm: str = "vm-a", **over: Any) -> dict:
    hb = {
        "TimeGenerated": "2026-11-21T07:05:00.000Z",
        "RecordId": str(uuid.UUID(int=10**9 + i)),
        "Reason": "periodic",
        "Computer": vm,
        "VmName": vm,
        "VmId": VM_ID,
        "AgentVersion": "0.1.0",
        "UptimeSeconds": 300.5,
        "Polls": 300,
        "PollErrors": 0,
        "LastPollLatencyMs": 2.5,
        "LastIncarnation": 2,
        "OpenEvents": 1,
        "SpoolDepth": 0,
        "DeliveredRecords": 12,
        "FailedDeliveries": 0,
        "DroppedRecords": 0,
        "DeadLetteredRecords": 0,
        "FaultDomain": 0,
        "UpdateDomain": 0,
    }
    hb.update(over)
    return hb


def compact(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def items(
    records: Iterable[dict], *, table: str = "records", start: int = 1, key: str = VM_ID
) -> list[OutboxRow]:
    return [OutboxRow.raw(table, key, compact(r), seq=start + n) for n, r in enumerate(records)]


# -- the Azure side -------------------------------------------------------------------------------


class AzureWorld:
    """Token authority + IMDS simulator (instance document, managed-identity tokens) + Logs
    Ingestion stand-in + Event Hubs stand-in (TLS), all in this process.

    ``AZURE_POD_IDENTITY_AUTHORITY_HOST`` is set in this process while it runs (and is in
    ``agent_env()`` for subprocesses), so ``ManagedIdentityCredential`` asks the simulator.
    """

    def __init__(
        self,
        directory: Path,
        *,
        eventhubs: bool = True,
        scenario: Scenario | None = None,
        rate_limit: int | None = None,
    ) -> None:
        self.dir = Path(directory)
        self.authority = TokenAuthority()
        self.sim = Simulator(scenario, token_authority=self.authority, rate_limit=rate_limit)
        self.la = LogsIngestionStandIn(self.dir / "tls-la", self.authority)
        self.tls = generate(self.dir / "tls-eh")
        self.eh = (
            EventHubsStandIn(tls=self.tls, token_authority=self.authority) if eventhubs else None
        )
        self._old_env: str | None = None
        self._not_before: dict[str, float] = {}

    def __enter__(self) -> AzureWorld:
        self.sim.start()
        self.la.start()
        if self.eh is not None:
            self.eh.start()
        self._old_env = os.environ.get("AZURE_POD_IDENTITY_AUTHORITY_HOST")
        os.environ["AZURE_POD_IDENTITY_AUTHORITY_HOST"] = self.sim.url
        return self

    def clean(self) -> None:
        """No faults, no stored records, every identity allowed: the state each test starts from."""
        self.la.reset()
        self.la.set_allowed_subjects(None)
        if self.eh is not None:
            self.eh.clear()
            self.eh.clear_faults()
            self.eh.allowed_subjects = None

    def __exit__(self, *exc: object) -> None:
        if self._old_env is None:
            os.environ.pop("AZURE_POD_IDENTITY_AUTHORITY_HOST", None)
        else:
            os.environ["AZURE_POD_IDENTITY_AUTHORITY_HOST"] = self._old_env
        if self.eh is not None:
            self.eh.stop()
        self.la.stop()
        self.sim.stop()

    # sinks in this process -------------------------------------------------------------------

    def la_sink(self, *, timeout: float = 5.0, identity: IdentityConfig | None = None, **kw: Any):
        from se_forwarder.identity import credential as ident
        from se_forwarder.sinks.log_analytics.sink import LogAnalyticsSink

        idc = identity or IdentityConfig()
        kw.setdefault("renew_credential", lambda: ident.build(idc))
        return LogAnalyticsSink(
            self.la.endpoint,
            self.la.dcr_id,
            ident.build(idc),
            ca_file=str(self.la.ca_cert),
            timeout=timeout,
            identity_name=ident.describe(idc),
            **kw,
        )

    def eh_sink(self, *, timeout: float = 5.0, identity: IdentityConfig | None = None, **kw: Any):
        from se_forwarder.identity import credential as ident
        from se_forwarder.sinks.event_hubs.sink import EventHubsSink

        assert self.eh is not None
        idc = identity or IdentityConfig()
        kw.setdefault("credential", ident.build(idc))
        return EventHubsSink(
            kw.pop("hub", HUB),
            namespace=self.eh.namespace,
            endpoint=self.eh.endpoint,
            ca_file=str(self.tls.ca_cert),
            timeout=timeout,
            identity_name=ident.describe(idc),
            **kw,
        )

    # the agent's configuration -------------------------------------------------------------

    def la_section(self, **extra: Any) -> dict:
        return {
            "endpoint": self.la.endpoint,
            "dcr_immutable_id": self.la.dcr_id,
            "ca_file": str(self.la.ca_cert),
            "timeout": 3.0,
            "linger_seconds": 0.2,
            **extra,
        }

    def eh_section(self, **extra: Any) -> dict:
        assert self.eh is not None
        return {
            "namespace": self.eh.namespace,
            "hub": HUB,
            "endpoint": self.eh.endpoint,
            "ca_file": str(self.tls.ca_cert),
            "timeout": 3.0,
            "linger_seconds": 0.2,
            **extra,
        }

    def agent_config(
        self,
        state_dir: Path,
        *,
        sinks: dict[str, dict],
        spool_max_bytes: int | None = None,
        heartbeat_interval: float = 60.0,
        identity: dict | None = None,
        poll_interval: float = 0.2,
        tags: list[str] | None = None,
    ) -> Path:
        cfg: dict[str, Any] = {
            "agent": {
                "state_dir": str(state_dir),
                "poll_interval": poll_interval,
                "heartbeat_interval": heartbeat_interval,
                "log_format": "json",
                "log_level": "info",
                "stop_flush_seconds": 5.0,
                **({"tags": tags} if tags is not None else {}),
            },
            "imds": {"endpoint": self.sim.url, "first_call_timeout": 5.0, "timeout": 2.0},
            "sinks": sinks,
        }
        if spool_max_bytes is not None:
            cfg["spool"] = {"max_bytes": spool_max_bytes}
        if identity is not None:
            cfg["identity"] = identity
        path = Path(state_dir).parent / f"{Path(state_dir).name}.toml"
        path.write_text(_toml(cfg))
        return path

    def agent_env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("SE_FORWARDER_")}
        env["AZURE_POD_IDENTITY_AUTHORITY_HOST"] = self.sim.url
        env.update(extra)
        return env

    # the simulated VM ------------------------------------------------------------------------

    def publish_events(self, ids: Iterable[str], **fields: Any) -> int:
        """Serve these events (Scheduled Freeze on this VM, NotBefore ~10 minutes after each was
        first published, unchanged afterwards: republishing an event changes nothing about it)."""
        vm = self.sim.scenario.vm.name
        now = time.time()
        out = []
        for e in ids:
            nb = self._not_before.setdefault(e, now + 600)
            out.append(
                {
                    "EventId": e,
                    "EventType": fields.get("EventType", "Freeze"),
                    "Resources": [vm],
                    "NotBefore": nb,
                    "Description": fields.get("Description", ""),
                }
            )
        return self.sim.set_events(out)


def _toml(cfg: dict, prefix: str = "") -> str:
    """Enough TOML for our configs: nested tables of strings, numbers, booleans."""
    lines: list[str] = []
    tables: list[tuple[str, dict]] = []
    for key, value in cfg.items():
        if isinstance(value, dict):
            tables.append((f"{prefix}{key}", value))
        else:
            lines.append(f"{key} = {json.dumps(value)}")
    out = "\n".join(lines) + ("\n" if lines else "")
    for name, table in tables:
        body = _toml(table, prefix=f"{name}.")
        head = f"[{name}]\n"
        out += "\n" + head + body
    return out


# -- what reached the stand-ins ------------------------------------------------------------------


def vm_key(w: AzureWorld) -> str:
    """The VM in RecordIds (its VmId: the instance document answers)."""
    return w.sim.scenario.vm.vm_id


def new_ids(n: int) -> list[str]:
    return [str(uuid.uuid4()) for _ in range(n)]


def expected(w: AzureWorld, event_ids: Iterable[str], phases=("FirstSeen",)) -> set[str]:
    return {record_id(vm_key(w), e, p) for e in event_ids for p in phases}


def la_ids(w: AzureWorld) -> list[str]:
    return [r["RecordId"] for r in w.la.records(RECORDS)]


def eh_ids(w: AzureWorld) -> list[str]:
    assert w.eh is not None
    return [b["RecordId"] for b in (json.loads(e.body) for e in w.eh.events) if "Phase" in b]


def has_all(got: Iterable[str], want: set[str]) -> bool:
    return want <= set(got)
