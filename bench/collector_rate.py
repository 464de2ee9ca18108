"""The collector's rate: Event Grid notifications per second from the Event Hub into Log Analytics
(stand-ins), and its peak RSS, beside a bare consumer loop measured in the same run.

Both read the same N notifications (one Scheduled Event status each, Event Grid schema, JSON
array bodies as Event Grid delivers them) from the Event Hubs stand-in (TLS, managed-identity
tokens from the IMDS simulator), on two partitions:

* ``collect``: ``se-forwarder collect`` as a process, checkpoints in Azurite, rows through the
  outbox and the Log Analytics sink into the Logs Ingestion stand-in; timed from its start to the
  N-th row stored by the stand-in ("from start"), and from the first row stored to the N-th
  ("steady": imports, token, partition claims and the first batch left out).
* ``bare consumer`` (the baseline): ``EventHubConsumerClient.receive_batch`` in a process that
  only counts the hub's messages (no parsing, no outbox, no sink, no checkpoint store); timed
  from its start to the last message, and from its first batch to the last.

The notifications are sent ten to a message (JSON arrays, as Event Grid batches them); both
figures are notifications per second. Peak RSS: ``VmHWM`` of the process just before it is
stopped.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
import uuid
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
BARE = textwrap.dedent("""
    import sys, threading, time
    from azure.eventhub import EventHubConsumerClient, TransportType
    from azure.identity import ManagedIdentityCredential
    ns, endpoint, ca, want = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])  # messages
    client = EventHubConsumerClient(ns, "platform-events", "bare", ManagedIdentityCredential(),
                                    custom_endpoint_address=endpoint, connection_verify=ca,
                                    transport_type=TransportType.Amqp)
    got = [0]
    def on_batch(ctx, events):
        if not got[0] and events:
            print("first", len(events), flush=True)
        got[0] += len(events)
        if got[0] >= want:
            print("done", flush=True)
    threading.Thread(target=client.receive_batch, daemon=True, kwargs=dict(
        on_event_batch=on_batch, starting_position="-1", max_batch_size=300,
        max_wait_time=1.0)).start()
    while True:
        time.sleep(1)
""")


def notification(i: int) -> dict:
    eid = str(uuid.UUID(int=i))
    rid = (
        "/subscriptions/s/resourceGroups/rg/providers"
        f"/Microsoft.Compute/virtualMachines/vm-{i % 500}"
        f"/providers/microsoft.maintenance/scheduledevents/{eid}"
    )
    return {
        "id": str(uuid.uuid4()),
        "topic": "/subscriptions/s",
        "subject": rid,
        "eventType": "Microsoft.ResourceNotifications.MaintenanceResources.ScheduledEventEmitted",
        "eventTime": "2026-01-01T00:00:00Z",
        "dataVersion": "3.0",
        "metadataVersion": "1",
        "data": {
            "resourceInfo": {
                "id": rid,
                "name": eid,
                "type": "microsoft.maintenance/scheduledEvents",
                "properties": {
                    "EventId": eid,
                    "EventStatus": "Scheduled",
                    "EventType": "Reboot",
                    "ResourceType": "VirtualMachine",
                    "Resources": [f"vm-{i % 500}"],
                    "NotBefore": "Mon, 19 Sep 2025 18:29:47 GMT",
                    "Description": "Host server maintenance.",
                    "EventSource": "Platform",
                    "DurationInSeconds": -1,
                },
            }
        },
    }


def vm_hwm_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return 0


def stop(proc: subprocess.Popen) -> int:
    rss = vm_hwm_kb(proc.pid)
    proc.terminate()
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
    return rss


PER_MESSAGE = 10  # notifications per hub message


def collector_toml(
    state: Path, hub: EventHubsStandIn, hub_ca: Path, la: LogsIngestionStandIn, az: Azurite
) -> str:
    """The collector's configuration against the stand-ins (its state in ``state``)."""
    return textwrap.dedent(f"""
        [agent]
        state_dir = {json.dumps(str(state))}
        [sinks.log_analytics]
        endpoint = {json.dumps(la.endpoint)}
        dcr_immutable_id = {json.dumps(la.dcr_id)}
        ca_file = {json.dumps(str(la.ca_cert))}
        linger_seconds = 0.2
        [collector]
        namespace = {json.dumps(hub.namespace)}
        hub = "{HUB}"
        consumer_group = "{GROUP}"
        endpoint = {json.dumps(hub.endpoint)}
        ca_file = {json.dumps(str(hub_ca))}
        checkpoint_account_url = {json.dumps(az.account_url)}
        checkpoint_container = "{CONTAINER}"
        checkpoint_ca_file = {json.dumps(str(az.ca_cert))}
        load_balancing_interval = 1.0
        """)


def start_collect(d: Path, config: str, env: dict) -> subprocess.Popen:
    """`se-forwarder collect` on ``config`` (in d/collector.toml), log in d/collect.log."""
    (d / "collector.toml").write_text(config)
    with open(d / "collect.log", "wb") as log:
        return subprocess.Popen(
            [*se_forwarder_cmd(), "collect", "--config", str(d / "collector.toml")],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=log,
        )


def run_collect(
    d: Path,
    hub: EventHubsStandIn,
    hub_ca: Path,
    la: LogsIngestionStandIn,
    az: Azurite,
    env: dict,
    n: int,
) -> tuple[float, float, int]:
    t0 = time.monotonic()
    proc = start_collect(d, collector_toml(d / "collector", hub, hub_ca, la, az), env)
    try:
        first = len(la.wait_for(STREAM, 1, timeout=300))
        t1 = time.monotonic()
        la.wait_for(STREAM, n, timeout=600)
        t2 = time.monotonic()
    except TimeoutError:
        raise RuntimeError(f"collect stalled; see {d / 'collect.log'}") from None
    finally:
        rss = stop(proc)
    return t2 - t0, (n - first) / (t2 - t1) if t2 > t1 else float("inf"), rss


def run_bare(hub: EventHubsStandIn, hub_ca: Path, env: dict, n: int) -> tuple[float, float, int]:
    hub.add_consumer_group(HUB, "bare")
    messages = -(-n // PER_MESSAGE)
    t0 = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-c", BARE, hub.namespace, hub.endpoint, str(hub_ca), str(messages)],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    try:
        head = proc.stdout.readline().split()
        t1 = time.monotonic()
        done = proc.stdout.readline().strip()
        t2 = time.monotonic()
    finally:
        rss = stop(proc)
    if len(head) != 2 or head[0] != "first" or done != "done":
        raise RuntimeError(f"the bare consumer stopped early: {head} {done!r}")
    first = min(n, int(head[1]) * PER_MESSAGE)  # the first batch: left out of the steady figure
    return t2 - t0, (n - first) / (t2 - t1) if n > first and t2 > t1 else float("nan"), rss


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--events", type=int, default=5000)
    ap.add_argument("--quick", action="store_true", help="300 events")
    args = ap.parse_args()
    n = 300 if args.quick else args.events
    # a SIGTERM (a timeout) unwinds: the children and Azurite are stopped, not left running
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        authority = TokenAuthority()
        hub_tls = generate(d / "tls-hub")
        with (
            Simulator(None, token_authority=authority) as sim,
            LogsIngestionStandIn(d / "tls-la", authority) as la,
            EventHubsStandIn(
                tls=hub_tls,
                hubs={HUB: 2},
                consumer_groups={HUB: [GROUP]},
                token_authority=authority,
            ) as hub,
            Azurite(d / "azurite") as az,
        ):
            env = {**os.environ, "AZURE_POD_IDENTITY_AUTHORITY_HOST": sim.url}
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
            for start in range(0, n, PER_MESSAGE):  # as arrays, as Event Grid batches them
                hub.inject(
                    HUB,
                    json.dumps(
                        [notification(i) for i in range(start, min(n, start + PER_MESSAGE))]
                    ),
                )
            bare = run_bare(hub, hub_tls.ca_cert, env, n)
            coll = run_collect(d, hub, hub_tls.ca_cert, la, az, env, n)
            stored = la.records(STREAM)
            distinct = len({r["RecordId"] for r in stored})
    print(
        f"{'':16} {'events':>7} {'seconds':>8} {'events/s':>9} {'steady/s':>9} {'peak RSS MB':>12}"
    )
    for name, (secs, steady, rss) in (("bare consumer", bare), ("collect", coll)):
        print(f"{name:16} {n:7d} {secs:8.2f} {n / secs:9.1f} {steady:9.1f} {rss / 1024:12.1f}")
    print(f"rows stored in Log Analytics: {len(stored)} ({distinct} distinct RecordIds)")
    print(
        "(seconds and events/s from process start: imports, token, attach included; steady/s "
        "from the first row (collect: stored in Log Analytics; bare: first batch received))"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
