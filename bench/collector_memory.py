"""The collector's peak RSS under hostile messages beside its normal figure, in one run (issue 33).

Each case is a fresh ``se-forwarder collect`` process (Event Hubs stand-in, checkpoints in
Azurite, rows into the Logs Ingestion stand-in) reading the messages of that case from one
partition, followed by one good notification; the figure is the process's ``VmHWM`` once that
last row is in Log Analytics (every message before it has been read, recorded or kept aside):

* ``normal``: 1,000 notifications, ten to a message (JSON arrays, as Event Grid batches them);
* ``20,000 names``: one scale-set event naming 20,000 VMs (190 KB; before issue 33: 3.6 GB);
* ``nested arrays``: a 200 KB body of nested arrays (before: a RecursionError, re-read forever);
* ``1 MB Description``: one event with a 1,000,000-character Description;
* ``all three``: the three hostile messages together, then 1,000 normal notifications.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import tempfile
import time
from pathlib import Path

from collector_rate import notification
from support.collector_world import HUB, STREAM, collector_world
from support.proc import cpu_seconds, status_kb

from se_forwarder_testbed.simulator.server import Simulator
from se_forwarder_testbed.standins.tokens import TokenAuthority

SUB = "00000000-0000-0000-0000-0000000000aa"


def scale_set_event(names: int) -> dict:
    e = notification(10_000_001)
    rid = (
        f"/subscriptions/{SUB}/resourceGroups/rg/providers/Microsoft.Compute/"
        f"virtualMachineScaleSets/big/providers/microsoft.maintenance/scheduledevents/E-NAMES"
    )
    e["subject"] = e["data"]["resourceInfo"]["id"] = rid
    props = e["data"]["resourceInfo"]["properties"]
    props["EventId"], props["Resources"] = "E-NAMES", [f"big_{i}" for i in range(names)]
    return e


def long_description() -> dict:
    e = notification(10_000_002)
    e["data"]["resourceInfo"]["properties"]["Description"] = "x" * 1_000_000
    return e


def normal(n: int) -> list[str]:
    return [
        json.dumps([notification(i) for i in range(s, min(n, s + 10))]) for s in range(0, n, 10)
    ]


def cases(n: int) -> dict[str, list[bytes | str]]:
    nested = b"[" * 100_000 + b"]" * 100_000
    return {
        "normal": [*normal(n)],
        "20,000 names": [json.dumps([scale_set_event(20_000)])],
        "nested arrays": [nested],
        "1 MB Description": [json.dumps([long_description()])],
        "all three": [
            json.dumps([scale_set_event(20_000)]),
            nested,
            json.dumps([long_description()]),
            *normal(n),
        ],
    }


def run(
    d: Path, authority: TokenAuthority, sim: Simulator, bodies: list
) -> tuple[int, float, float]:
    with collector_world(d, authority, sim, partitions=2) as w:
        proc = w.start()
        try:
            w.wait_held(proc, 2, 300)
            t0 = time.monotonic()
            for body in bodies:
                w.hub.inject(HUB, body, partition=0)
            last = notification(99_999_999)
            w.hub.inject(HUB, json.dumps([last]), partition=0)
            eid = last["data"]["resourceInfo"]["properties"]["EventId"]
            deadline = time.monotonic() + 300
            while not any(r["EventId"] == eid for r in w.la.records(STREAM)):
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError(f"the last row never came; see {d / 'collect.log'}")
                time.sleep(0.1)
            seconds = time.monotonic() - t0
            return status_kb(proc.pid, "VmHWM"), seconds, cpu_seconds(proc.pid)
        finally:
            proc.terminate()
            try:
                proc.wait(30)
            except Exception:
                proc.kill()


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--events", type=int, default=1000, help="normal notifications")
    ap.add_argument("--quick", action="store_true", help="100 normal notifications")
    args = ap.parse_args()
    n = 100 if args.quick else args.events
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        authority = TokenAuthority()
        with Simulator(None, token_authority=authority) as sim:
            for i, (name, bodies) in enumerate(cases(n).items()):
                d = Path(tmp) / f"case{i}"
                d.mkdir()
                results[name] = run(d, authority, sim, bodies)
    base = results["normal"][0]
    print(f"{'case':18} {'peak RSS MB':>12} {'vs normal MB':>13} {'read in s':>10} {'CPU s':>6}")
    for name, (kb, secs, cpu) in results.items():
        print(f"{name:18} {kb / 1024:12.1f} {(kb - base) / 1024:+13.1f} {secs:10.2f} {cpu:6.1f}")
    print(f"(normal: {n} notifications; 'read in s': from the first send to the last row stored)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
