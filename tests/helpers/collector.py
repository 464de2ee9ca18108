"""The collector's world for tests and the bench: the IMDS simulator (managed-identity tokens), the
Logs Ingestion stand-in, an Event Hubs stand-in (TLS) with the hub the system topics deliver to
and the collector's consumer group, Azurite holding the checkpoints; Event Grid notifications as
the system topic publishes them; ``se-forwarder collect`` as a process."""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

from helpers.azure import AzureWorld, _toml
from se_forwarder_testbed.agentproc import se_forwarder_cmd
from se_forwarder_testbed.standins.azurite import Azurite
from se_forwarder_testbed.standins.eventhubs import EventHubsStandIn
from se_forwarder_testbed.standins.tls import generate

HUB = "platform-events"
GROUP = "se-forwarder-collector"
CONTAINER = "checkpoints"
SUB = "00000000-0000-0000-0000-0000000000aa"
SCHEDULED = "Microsoft.ResourceNotifications.MaintenanceResources.ScheduledEventEmitted"
ANNOTATED = "Microsoft.ResourceNotifications.HealthResources.ResourceAnnotated"


def vm_parent(name: str, rg: str = "rg-app") -> str:
    return (
        f"/subscriptions/{SUB}/resourceGroups/{rg}"
        f"/providers/Microsoft.Compute/virtualMachines/{name}"
    )


def scheduled(
    event_id: str,
    status: str,
    when: str,
    *,
    parent: str | None = None,
    resources: list[str] | None = None,
    event_type: str = "Reboot",
    not_before: str = "Mon, 19 Sep 2025 18:29:47 GMT",
    grid_id: str | None = None,
    cloud: bool = False,
    spelling: str = SCHEDULED,
) -> dict[str, Any]:
    """One Scheduled Event notification, Event Grid schema (or CloudEvents with ``cloud``)."""
    parent = parent or vm_parent("vm-1")
    rid = f"{parent}/providers/microsoft.maintenance/scheduledevents/{event_id}"
    data = {
        "resourceInfo": {
            "id": rid,
            "name": event_id,
            "type": "microsoft.maintenance/scheduledEvents",
            "location": "westeurope",
            "properties": {
                "EventId": event_id,
                "EventStatus": status,
                "EventType": event_type,
                "ResourceType": "VirtualMachine",
                "Resources": resources or [parent.rsplit("/", 1)[-1]],
                "NotBefore": not_before if status == "Scheduled" else "",
                "Description": "Host server maintenance.",
                "EventSource": "Platform",
                "DurationInSeconds": -1,
            },
        },
        "apiVersion": "2024-07-01",
    }
    gid = grid_id or str(uuid.uuid4())
    if cloud:
        return {
            "id": gid,
            "source": f"/subscriptions/{SUB}",
            "subject": rid,
            "type": spelling,
            "time": when,
            "data": data,
            "specversion": "1.0",
        }
    return {
        "id": gid,
        "topic": f"/subscriptions/{SUB}",
        "subject": rid,
        "eventType": spelling,
        "eventTime": when,
        "data": data,
        "dataVersion": "3.0",
        "metadataVersion": "1",
    }


def annotation(
    name: str,
    vm: str,
    when: str,
    *,
    impact: str | None = None,
    start: str | None = None,
    end: str | None = None,
) -> dict[str, Any]:
    aid = str(uuid.uuid4())
    target = vm_parent(vm)
    props = {
        "targetResourceId": target,
        "targetResourceType": "Microsoft.Compute/virtualMachines",
        "occurredTime": when,
        "annotationName": name,
        "reason": "r",
        "summary": "s",
        "context": "Platform Initiated",
        "category": "Planned",
    }
    if impact:
        props["impactType"] = impact
    if start:
        props["impactStartTime"], props["impactEndTime"] = start, end
    return {
        "id": str(uuid.uuid4()),
        "topic": f"/subscriptions/{SUB}",
        "subject": target,
        "eventType": ANNOTATED,
        "eventTime": when,
        "dataVersion": "1",
        "metadataVersion": "1",
        "data": {
            "resourceInfo": {
                "id": f"{target}/providers/Microsoft.ResourceHealth/resourceAnnotations/{aid}",
                "name": aid,
                "type": "Microsoft.ResourceHealth/resourceAnnotations",
                "properties": props,
            },
            "operationalInfo": {"resourceEventTime": when},
            "apiVersion": "2022-08-01",
        },
    }


class CollectorWorld(AzureWorld):
    """AzureWorld (simulator + Logs Ingestion) plus the collector's hub and Azurite."""

    def __init__(self, directory: Path, partitions: int = 2) -> None:
        super().__init__(directory, eventhubs=False)
        self.hub_tls = generate(self.dir / "tls-hub")
        self.hub = EventHubsStandIn(
            tls=self.hub_tls,
            hubs={HUB: partitions},
            consumer_groups={HUB: [GROUP]},
            token_authority=self.authority,
        )
        self.azurite = Azurite(self.dir / "azurite")

    def __enter__(self) -> CollectorWorld:
        super().__enter__()
        self.hub.start()
        self.azurite.start()
        from azure.identity import ManagedIdentityCredential
        from azure.storage.blob import ContainerClient

        with (
            ManagedIdentityCredential() as cred,
            ContainerClient(
                self.azurite.account_url,
                CONTAINER,
                credential=cred,
                connection_verify=str(self.azurite.ca_cert),
            ) as cc,
        ):
            cc.create_container()
        return self

    def __exit__(self, *exc: object) -> None:
        self.azurite.stop()
        self.hub.stop()
        super().__exit__(*exc)

    def publish(self, *events: dict[str, Any], array: bool = True) -> None:
        """Deliver notifications to the hub as Event Grid does: a JSON array per message
        (``array``) or one event per message."""
        if array:
            self.hub.inject(HUB, json.dumps(list(events)))
        else:
            for e in events:
                self.hub.inject(HUB, json.dumps(e))

    def collector_config(self, state_dir: Path, **collector: Any) -> Path:
        cfg = {
            "agent": {
                "state_dir": str(state_dir),
                "log_format": "json",
                "log_level": "info",
                "stop_flush_seconds": 5.0,
            },
            "sinks": {"log_analytics": self.la_section()},
            "collector": {
                "namespace": self.hub.namespace,
                "hub": HUB,
                "consumer_group": GROUP,
                "endpoint": self.hub.endpoint,
                "ca_file": str(self.hub_tls.ca_cert),
                "checkpoint_account_url": self.azurite.account_url,
                "checkpoint_container": CONTAINER,
                "checkpoint_ca_file": str(self.azurite.ca_cert),
                "load_balancing_interval": 1.0,
                "ownership_expiration": 4.0,
                **collector,
            },
        }
        path = Path(state_dir).parent / f"{Path(state_dir).name}.toml"
        path.write_text(_toml(cfg))
        return path

    def start_collector(self, config: Path, *args: str) -> subprocess.Popen[bytes]:
        log = open(config.with_suffix(".log"), "ab")  # noqa: SIM115 - the process keeps it
        proc = subprocess.Popen(
            [*se_forwarder_cmd(), "collect", "--config", str(config), *args],
            env=self.agent_env(),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        log.close()
        return proc

    def wait_started(self, config: Path, since: int = 0, timeout: float = 60.0) -> None:
        """Until the collector's log shows a start after byte ``since`` (its stop handler is in
        place)."""
        log = config.with_suffix(".log")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if log.exists() and b"collector started" in log.read_bytes()[since:]:
                return
            time.sleep(0.1)
        raise AssertionError(f"the collector did not start within {timeout} s")

    def log_size(self, config: Path) -> int:
        log = config.with_suffix(".log")
        return log.stat().st_size if log.exists() else 0

    def platform_rows(self) -> list[dict]:
        return self.la.records("Custom-ScheduledEventsPlatform")
