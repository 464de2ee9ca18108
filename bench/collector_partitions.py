"""The collector's latency with many partitions: seconds from a notification's arrival in the Event
Hub to its row in Log Analytics (stand-ins), with 2 partitions (the baseline) and with 38, in the
same run, beside the stand-in's own floor and with a hostile message before every notification.

For each partition count: ``se-forwarder collect`` as a process (checkpoints in Azurite, rows
through the outbox and the Log Analytics sink, ``linger_seconds = 0.2``) is started, and once it
holds every partition (its status.json), notifications are sent one at a time, a quarter of a
second apart, round robin over the partitions; each one's latency is from its send to the first
time the Logs Ingestion stand-in holds its row (polled every 50 ms). Also printed: how long the
collector took to hold every partition after its start.

Rows:

* ``floor``: the Event Hubs stand-in and the SDK alone: one ``EventHubConsumerClient.receive``
  per partition, each on a thread of its own (no batch, no wait, no parsing, no outbox, no sink),
  in a process, with the collector's AMQP read timeout (``hub.SOCKET_TIMEOUT``: the synchronous
  client hands a message over only when a read times out, 0.2 s by default); latency from the
  send to the consumer's callback. What no collector can beat.
* ``collect``: as above, with 2 and with 38 partitions.
* ``collect, hostile``: 38 partitions, and before every notification, on its partition, a
  message that cannot be read (a 200 KB body of nested arrays, or a body that is not UTF-8, in
  turn): the good notification's latency, with the hostile one kept aside and checkpointed past.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import uuid
from pathlib import Path

from collector_rate import (
    CONTAINER,
    GROUP,
    HUB,
    STREAM,
    collector_toml,
    notification,
    start_collect,
    stop,
)

from se_forwarder_testbed.simulator.server import Simulator
from se_forwarder_testbed.standins.azurite import Azurite
from se_forwarder_testbed.standins.eventhubs import EventHubsStandIn
from se_forwarder_testbed.standins.logs_ingestion import LogsIngestionStandIn
from se_forwarder_testbed.standins.tls import generate
from se_forwarder_testbed.standins.tokens import TokenAuthority

HOSTILE = (b"[" * 100_000 + b"]" * 100_000, b'[{"id": "\xff\xfe"}]')
FLOOR_GROUP = "floor"
FLOOR = textwrap.dedent("""
    import json, sys, threading, time
    from azure.eventhub import EventHubConsumerClient, TransportType
    from azure.identity import ManagedIdentityCredential
    ns, endpoint, ca, parts = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    credential = ManagedIdentityCredential()
    out = threading.Lock()
    def on_event(ctx, event):
        at = time.monotonic()
        for n in json.loads(event.body_as_str()):
            with out:  # one write per line: threads' lines never interleave
                sys.stdout.write(f"{n['data']['resourceInfo']['properties']['EventId']} {at}\\n")
                sys.stdout.flush()
    for p in range(parts):
        client = EventHubConsumerClient(ns, "platform-events", "floor", credential,
                                        custom_endpoint_address=endpoint, connection_verify=ca,
                                        transport_type=TransportType.Amqp,
                                        socket_timeout=0.005)
        threading.Thread(target=client.receive, daemon=True, kwargs=dict(
            on_event=on_event, partition_id=str(p), starting_position="-1")).start()
    while True:
        time.sleep(1)
""")


def owned(state: Path) -> int:
    try:
        data = json.loads((state / "status.json").read_text())
    except (OSError, ValueError):
        return 0
    return sum(1 for p in (data.get("partitions") or {}).values() if p.get("owned"))


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def send(hub: EventHubsStandIn, partitions: int, n: int, *, hostile: bool = False, first: int = 0):
    """``n`` notifications, a quarter of a second apart, round robin over the partitions (each
    after a hostile message on its partition, ``hostile``): EventId -> when it was sent."""
    sent: dict[str, float] = {}
    for i in range(n):
        body = notification(first + i)
        if hostile:
            hub.inject(HUB, HOSTILE[i % 2], partition=i % partitions)
        sent[body["data"]["resourceInfo"]["properties"]["EventId"]] = time.monotonic()
        hub.inject(HUB, json.dumps([body]), partition=i % partitions)
        time.sleep(0.25)
    return sent


def figures(sent: dict[str, float], seen: dict[str, float], **more: float) -> dict:
    lat = sorted(seen[e] - t for e, t in sent.items() if e in seen)
    pick = (lambda q: lat[round(q * (len(lat) - 1))]) if lat else (lambda q: float("nan"))
    return {
        "arrived": len(lat),
        "median": statistics.median(lat) if lat else float("nan"),
        "p95": pick(0.95),
        "max": pick(1.0),
        **more,
    }


def floor(d: Path, authority: TokenAuthority, partitions: int, n: int) -> dict:
    """The stand-in and the SDK alone: a consumer per partition, each on its own thread."""
    hub_tls = generate(d / "tls-hub")
    with EventHubsStandIn(
        tls=hub_tls,
        hubs={HUB: partitions},
        consumer_groups={HUB: [FLOOR_GROUP]},
        token_authority=authority,
    ) as hub:
        t0 = time.monotonic()
        proc = subprocess.Popen(
            [
                sys.executable,
                "-c",
                FLOOR,
                hub.namespace,
                hub.endpoint,
                str(hub_tls.ca_cert),
                str(partitions),
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        seen: dict[str, float] = {}

        def read() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                eid, at = line.split()
                seen.setdefault(eid, float(at))

        threading.Thread(target=read, daemon=True).start()
        try:
            warm = {str(uuid.UUID(int=10**6 + p)) for p in range(partitions)}
            for p in range(partitions):  # every link open before the clock starts
                hub.inject(HUB, json.dumps([notification(10**6 + p)]), partition=p)
            while not warm <= set(seen):
                if time.monotonic() - t0 > 300 or proc.poll() is not None:
                    raise RuntimeError("the floor consumer did not receive on every partition")
                time.sleep(0.1)
            claimed = time.monotonic() - t0
            sent = send(hub, partitions, n)
            deadline = time.monotonic() + 60
            while not set(sent) <= set(seen) and time.monotonic() < deadline:
                time.sleep(0.1)
            cpu = cpu_seconds(proc.pid)
        finally:
            rss = stop(proc)
    return figures(sent, seen, claimed=claimed, rss=rss, cpu=cpu, seconds=time.monotonic() - t0)


def one(
    d: Path, authority: TokenAuthority, sim: Simulator, partitions: int, n: int, hostile: bool
) -> dict:
    hub_tls = generate(d / "tls-hub")
    with (
        LogsIngestionStandIn(d / "tls-la", authority) as la,
        EventHubsStandIn(
            tls=hub_tls,
            hubs={HUB: partitions},
            consumer_groups={HUB: [GROUP]},
            token_authority=authority,
        ) as hub,
        Azurite(d / "azurite") as az,
    ):
        from azure.identity import ManagedIdentityCredential
        from azure.storage.blob import ContainerClient

        with (
            ManagedIdentityCredential() as cred,
            ContainerClient(
                az.account_url, CONTAINER, credential=cred, connection_verify=str(az.ca_cert)
            ) as cc,
        ):
            cc.create_container()
        state = d / "collector"
        env = {**os.environ, "AZURE_POD_IDENTITY_AUTHORITY_HOST": sim.url}
        t0 = time.monotonic()
        proc = start_collect(d, collector_toml(state, hub, hub_tls.ca_cert, la, az), env)
        try:
            while owned(state) < partitions:
                if time.monotonic() - t0 > 600 or proc.poll() is not None:
                    raise RuntimeError(f"partitions not all held; see {d / 'collect.log'}")
                time.sleep(0.2)
            claimed = time.monotonic() - t0
            seen: dict[str, float] = {}
            done = threading.Event()

            def watch() -> None:
                while not done.is_set():
                    now = time.monotonic()
                    for r in la.records(STREAM):
                        seen.setdefault(r["EventId"], now)
                    time.sleep(0.05)

            watcher = threading.Thread(target=watch, daemon=True)
            watcher.start()
            sent = send(hub, partitions, n, hostile=hostile)
            deadline = time.monotonic() + 300
            while len(seen) < n and time.monotonic() < deadline:
                time.sleep(0.1)
            done.set()
            watcher.join(5)
        finally:
            cpu = cpu_seconds(proc.pid)
            rss = stop(proc)
    return figures(sent, seen, claimed=claimed, rss=rss, cpu=cpu, seconds=time.monotonic() - t0)


# What this bench measured with the SDK's batch wait at 1 s (hub.BATCH_WAIT before it was 0.05 s),
# 2026-12-02 05:58, load average ~7, 76 notifications: (median, p95-ish p90, max) in seconds.
BEFORE = {"collect, 2": (0.78, 1.15, 1.34), "collect, 38": (0.87, 1.38, 1.80)}


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--events", type=int, default=76, help="notifications per row")
    ap.add_argument("--partitions", type=int, default=38)
    ap.add_argument("--quick", action="store_true", help="20 notifications, 12 partitions")
    args = ap.parse_args()
    n, many = (20, 12) if args.quick else (args.events, args.partitions)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    results = {}
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        authority = TokenAuthority()
        with Simulator(None, token_authority=authority) as sim:
            os.environ["AZURE_POD_IDENTITY_AUTHORITY_HOST"] = sim.url
            for what, p, hostile in (
                ("floor", many, False),
                ("collect", 2, False),
                ("collect", many, False),
                ("collect, hostile", many, True),
            ):
                d = Path(tmp) / f"{what.replace(', ', '-')}-{p}"
                d.mkdir()
                if what == "floor":
                    results[(what, p)] = floor(d, authority, p, n)
                else:
                    results[(what, p)] = one(d, authority, sim, p, n, hostile)
    print(
        f"{'':<17} {'partitions':>10} {'held after s':>12} {'notifications':>13} "
        f"{'median s':>9} {'p95 s':>7} {'max s':>7} {'peak RSS MB':>12} {'CPU s':>6} "
        f"{'of s':>5}  before (median/p90/max)"
    )
    for (what, p), r in results.items():
        before = BEFORE.get(f"{what}, {p}")
        print(
            f"{what:<17} {p:10d} {r['claimed']:12.1f} {r['arrived']:>6d} of {n:<4d} "
            f"{r['median']:9.2f} {r['p95']:7.2f} {r['max']:7.2f} {r['rss'] / 1024:12.1f} "
            f"{r['cpu']:6.1f} {r['seconds']:5.0f}  "
            + ("/".join(f"{v:.2f}" for v in before) if before else "")
        )
    print(
        "(latency: from the send to the hub to the row held by the Logs Ingestion stand-in; "
        f"floor: to the consumer's callback; load average at the start {load:.1f})"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
