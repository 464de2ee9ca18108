"""The collector's latency with many partitions: seconds from a notification's arrival in the Event
Hub to its row in Log Analytics (stand-ins), with 2 partitions (the baseline) and with 38, in the
same run.

For each partition count: ``se-forwarder collect`` as a process (checkpoints in Azurite, rows
through the outbox and the Log Analytics sink, ``linger_seconds = 0.2``) is started, and once it
holds every partition (its status.json), notifications are sent one at a time, a quarter of a
second apart, round robin over the partitions; each one's latency is from its send to the first
time the Logs Ingestion stand-in holds its row (polled every 50 ms). Also printed: how long the
collector took to hold every partition after its start.
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
import threading
import time
from pathlib import Path

from collector_rate import CONTAINER, GROUP, HUB, STREAM, collector_toml, notification, stop

from se_forwarder_testbed.agentproc import se_forwarder_cmd
from se_forwarder_testbed.simulator.server import Simulator
from se_forwarder_testbed.standins.azurite import Azurite
from se_forwarder_testbed.standins.eventhubs import EventHubsStandIn
from se_forwarder_testbed.standins.logs_ingestion import LogsIngestionStandIn
from se_forwarder_testbed.standins.tls import generate
from se_forwarder_testbed.standins.tokens import TokenAuthority


def owned(state: Path) -> int:
    try:
        data = json.loads((state / "status.json").read_text())
    except (OSError, ValueError):
        return 0
    return sum(1 for p in (data.get("partitions") or {}).values() if p.get("owned"))


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def one(d: Path, authority: TokenAuthority, sim: Simulator, partitions: int, n: int) -> dict:
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
        (d / "collector.toml").write_text(collector_toml(state, hub, hub_tls.ca_cert, la, az))
        env = {**os.environ, "AZURE_POD_IDENTITY_AUTHORITY_HOST": sim.url}
        t0 = time.monotonic()
        with open(d / "collect.log", "wb") as log:
            proc = subprocess.Popen(
                [*se_forwarder_cmd(), "collect", "--config", str(d / "collector.toml")],
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=log,
            )
        try:
            while owned(state) < partitions:
                if time.monotonic() - t0 > 600 or proc.poll() is not None:
                    raise RuntimeError(f"partitions not all held; see {d / 'collect.log'}")
                time.sleep(0.2)
            claimed = time.monotonic() - t0
            sent: dict[str, float] = {}
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
            for i in range(n):
                body = notification(i)
                sent[body["data"]["resourceInfo"]["properties"]["EventId"]] = time.monotonic()
                hub.inject(HUB, json.dumps([body]), partition=i % partitions)
                time.sleep(0.25)
            deadline = time.monotonic() + 300
            while len(seen) < n and time.monotonic() < deadline:
                time.sleep(0.1)
            done.set()
            watcher.join(5)
        finally:
            cpu = cpu_seconds(proc.pid)
            rss = stop(proc)
    lat = sorted(seen[e] - t for e, t in sent.items() if e in seen)
    return {
        "claimed": claimed,
        "arrived": len(lat),
        "median": statistics.median(lat) if lat else float("nan"),
        "p90": lat[int(0.9 * (len(lat) - 1))] if lat else float("nan"),
        "max": lat[-1] if lat else float("nan"),
        "rss": rss,
        "cpu": cpu,
        "seconds": time.monotonic() - t0,
    }


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--events", type=int, default=76, help="notifications per partition count")
    ap.add_argument("--partitions", type=int, default=38)
    ap.add_argument("--quick", action="store_true", help="20 notifications, 12 partitions")
    args = ap.parse_args()
    n, many = (20, 12) if args.quick else (args.events, args.partitions)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        authority = TokenAuthority()
        with Simulator(None, token_authority=authority) as sim:
            os.environ["AZURE_POD_IDENTITY_AUTHORITY_HOST"] = sim.url
            for p in (2, many):
                d = Path(tmp) / f"p{p}"
                d.mkdir()
                results[p] = one(d, authority, sim, p, n)
    print(
        f"{'partitions':>10} {'held after s':>12} {'notifications':>13} {'median s':>9} "
        f"{'p90 s':>7} {'max s':>7} {'peak RSS MB':>12} {'CPU s':>6} {'of s':>5}"
    )
    for p, r in results.items():
        print(
            f"{p:10d} {r['claimed']:12.1f} {r['arrived']:>6d} of {n:<4d} {r['median']:9.2f} "
            f"{r['p90']:7.2f} {r['max']:7.2f} {r['rss'] / 1024:12.1f} {r['cpu']:6.1f} "
            f"{r['seconds']:5.0f}"
        )
    print("(latency: from the send to the hub to the row held by the Logs Ingestion stand-in)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
