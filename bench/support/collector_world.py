"""The collector's world for its benches: the Event Hubs stand-in (TLS, managed-identity tokens),
Azurite holding the checkpoints, the Logs Ingestion stand-in, and ``se-forwarder collect`` as a
process reading the hub into Log Analytics."""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

from se_forwarder_testbed.agentproc import se_forwarder_cmd
from se_forwarder_testbed.simulator.server import Simulator
from se_forwarder_testbed.standins.azurite import Azurite
from se_forwarder_testbed.standins.eventhubs import EventHubsStandIn
from se_forwarder_testbed.standins.logs_ingestion import LogsIngestionStandIn
from se_forwarder_testbed.standins.tls import generate
from se_forwarder_testbed.standins.tokens import TokenAuthority

HUB, GROUP, CONTAINER = "platform-events", "se-forwarder-collector", "checkpoints"
STREAM = "Custom-ScheduledEventsPlatform"


@dataclass
class World:
    dir: Path
    hub: EventHubsStandIn
    la: LogsIngestionStandIn
    az: Azurite
    hub_ca: Path
    env: dict[str, str]

    @property
    def state(self) -> Path:
        return self.dir / "collector"

    def owned(self) -> int:
        """Partitions the collector holds, by its status.json."""
        try:
            data = json.loads((self.state / "status.json").read_text())
        except (OSError, ValueError):
            return 0
        return sum(1 for p in (data.get("partitions") or {}).values() if p.get("owned"))

    def start(self) -> subprocess.Popen[bytes]:
        config = self.dir / "collector.toml"
        config.write_text(
            textwrap.dedent(f"""
            [agent]
            state_dir = {json.dumps(str(self.state))}
            [sinks.log_analytics]
            endpoint = {json.dumps(self.la.endpoint)}
            dcr_immutable_id = {json.dumps(self.la.dcr_id)}
            ca_file = {json.dumps(str(self.la.ca_cert))}
            linger_seconds = 0.2
            [collector]
            namespace = {json.dumps(self.hub.namespace)}
            hub = "{HUB}"
            consumer_group = "{GROUP}"
            endpoint = {json.dumps(self.hub.endpoint)}
            ca_file = {json.dumps(str(self.hub_ca))}
            checkpoint_account_url = {json.dumps(self.az.account_url)}
            checkpoint_container = "{CONTAINER}"
            checkpoint_ca_file = {json.dumps(str(self.az.ca_cert))}
            load_balancing_interval = 1.0
            """)
        )
        with open(self.dir / "collect.log", "wb") as log:
            return subprocess.Popen(
                [*se_forwarder_cmd(), "collect", "--config", str(config)],
                env=self.env,
                stdout=subprocess.DEVNULL,
                stderr=log,
            )

    def wait_held(self, proc: subprocess.Popen[bytes], partitions: int, timeout: float) -> float:
        """Seconds since now until the collector holds every partition."""
        t0 = time.monotonic()
        while self.owned() < partitions:
            if time.monotonic() - t0 > timeout or proc.poll() is not None:
                raise RuntimeError(f"partitions not all held; see {self.dir / 'collect.log'}")
            time.sleep(0.2)
        return time.monotonic() - t0


@contextmanager
def collector_world(
    d: Path, authority: TokenAuthority, sim: Simulator, partitions: int
) -> Iterator[World]:
    hub_tls = generate(d / "tls-hub")
    with ExitStack() as stack:
        la = stack.enter_context(LogsIngestionStandIn(d / "tls-la", authority))
        hub = stack.enter_context(
            EventHubsStandIn(
                tls=hub_tls,
                hubs={HUB: partitions},
                consumer_groups={HUB: [GROUP]},
                token_authority=authority,
            )
        )
        az = stack.enter_context(Azurite(d / "azurite"))
        os.environ["AZURE_POD_IDENTITY_AUTHORITY_HOST"] = sim.url
        from azure.identity import ManagedIdentityCredential
        from azure.storage.blob import ContainerClient

        with (
            ManagedIdentityCredential() as cred,
            ContainerClient(
                az.account_url, CONTAINER, credential=cred, connection_verify=str(az.ca_cert)
            ) as cc,
        ):
            cc.create_container()
        yield World(d, hub, la, az, hub_tls.ca_cert, {**os.environ})
