#!/usr/bin/env python3
"""How much earlier a service's maintenance ends with early approval across the service
(``approve = "service"``, docs/policy.md), against Azure starting every event at NotBefore.

A service of VMS VMs in ZONES zones; every VM gets a Reboot announced at t = 0 with NotBefore at
``--notice`` and an impact of ``--impact`` (scenario seconds, run ``--scale`` times faster). Two
runs, in this process, against Azurite (the storage emulator; managed-identity tokens from the
IMDS simulator), each VM an agent thread on its own client:

- baseline: no policy; every event starts at NotBefore: all VMs in impact together;
- policy: each agent asks the service's coordinator (``approvals/coordinator.py``: N in impact
  at once, one zone at a time), is in impact from its admission (plus ``--approval-delay``, the
  time Azure takes to start an approved event) for ``--impact``, then gives its slot back; an
  agent not admitted by NotBefore starts there, as Azure would start it.

Printed per run: when the last VM was back (seconds after t = 0, and against NotBefore), the
most VMs in impact at once, the most zones at once, and the coordinator's requests.

``--chaos SEED``: the same service with real agent processes (``se-forwarder run``, each with
its own IMDS simulator) under the chaos that SEED plans (``se_forwarder_testbed.spread``: kill -9
of agents, crashes of the store, a partition, one VM's clock off): the baseline and the policy
under the same faults, and the policy without them, each judged by the observer (invariants, a
record of each decision).

    .venv/bin/python bench/service_spread.py                 # 6 VMs, 3 zones, N = 2
    .venv/bin/python bench/service_spread.py --quick
    .venv/bin/python bench/service_spread.py --chaos 3       # agent processes under chaos
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from dataclasses import replace
from pathlib import Path

from azure.identity import ManagedIdentityCredential
from azure.storage.blob import ContainerClient

from se_forwarder.approvals.coordinator import Coordinator
from se_forwarder.approvals.service import Request
from se_forwarder_testbed.simulator.server import Simulator
from se_forwarder_testbed.standins.azurite import Azurite
from se_forwarder_testbed.standins.tokens import TokenAuthority


class Timeline:
    def __init__(self, scale: float) -> None:
        self.scale, self.t0 = scale, time.monotonic()
        self.lock = threading.Lock()
        self.now_in: dict[str, str] = {}
        self.most, self.zones, self.last_back = 0, 0, 0.0

    def at(self) -> float:
        return (time.monotonic() - self.t0) * self.scale  # scenario seconds

    def sleep_until(self, t: float) -> None:
        time.sleep(max(0.0, (t - self.at()) / self.scale))

    def impact(self, vm: str, zone: str, seconds: float) -> None:
        with self.lock:
            self.now_in[vm] = zone
            self.most = max(self.most, len(self.now_in))
            self.zones = max(self.zones, len(set(self.now_in.values())))
        time.sleep(seconds / self.scale)
        with self.lock:
            del self.now_in[vm]
            self.last_back = max(self.last_back, self.at())


def run(args: argparse.Namespace, container: ContainerClient | None, service: str) -> dict:
    tl, counts = Timeline(args.scale), {"requests": 0}

    def agent(i: int) -> None:
        vm, zone = f"vm-{i}", str(i % args.zones + 1)
        if container is None:  # baseline: Azure starts it at NotBefore
            tl.sleep_until(args.notice)
            tl.impact(vm, zone, args.impact)
            return
        c = Coordinator(container, service, limit=args.n, spread="zone", bound_seconds=3600)
        nb_ms = int(time.time() * 1000 + args.notice / args.scale * 1000)
        req = Request(f"{vm}|e", vm, "e", zone, 0, nb_ms)
        while tl.at() < args.notice:
            counts["requests"] += 1
            ok, _why = c.claim(req)
            if ok:
                tl.sleep_until(tl.at() + args.approval_delay)
                break
            tl.sleep_until(min(args.notice, tl.at() + args.retry))
        tl.impact(vm, zone, args.impact)
        if container is not None:
            counts["requests"] += 1
            c.release(req.key)

    threads = [threading.Thread(target=agent, args=(i,)) for i in range(args.vms)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return {
        "last_back": tl.last_back,
        "vs_not_before": tl.last_back - args.notice,
        "most": tl.most,
        "zones": tl.zones,
        "requests": counts["requests"],
    }


def chaos(args: argparse.Namespace) -> int:
    """Baseline and policy, agent processes under the chaos of one seed; 1 if an invariant broke."""
    from se_forwarder_testbed.spread.chaos import plan
    from se_forwarder_testbed.spread.run import play
    from se_forwarder_testbed.spread.stand import Shape

    shape = Shape(
        vms=args.vms, zones=args.zones, n=args.n, notice=args.notice, impact=args.impact,
        approval_delay=args.approval_delay, speed=args.scale or 30.0,
    )  # fmt: skip
    p = plan(args.chaos, shape)
    runs = {}
    for name, policy, faults in (
        ("baseline (at NotBefore)", False, p.faults),
        ("policy, no chaos", True, ()),
        ("policy, under chaos", True, p.faults),
    ):
        with tempfile.TemporaryDirectory() as tmp:
            runs[name] = play(
                Path(tmp), p.shape, replace(p, shape=replace(p.shape, policy=policy), faults=faults)
            )
        print(f"-- {name}, agent processes" + (" under chaos" if faults else " (no chaos)"))
        print("\n".join(runs[name].lines()))
    print(
        f"service of {shape.vms} VMs in {shape.zones} zones, N = {shape.n}; NotBefore at "
        f"{shape.notice:g} s, impact {shape.impact:g} s each; scenario x{p.shape.speed:g}; "
        f"chaos seed {args.chaos}"
    )
    print(f"{'run':<28}{'last VM back (s)':>18}{'vs NotBefore (s)':>18}{'most in impact':>16}"
          f"{'zones at once':>15}{'approved early':>16}")  # fmt: skip
    for name, r in runs.items():
        early = sum(w.early for w in r.judgement.windows)
        print(
            f"{name:<28}{r.last_back:>18.0f}{r.last_back - shape.notice:>18.0f}"
            f"{r.judgement.most:>16}{r.judgement.zones:>15}{early:>16}"
        )
    base, calm = runs["baseline (at NotBefore)"], runs["policy, no chaos"]
    policy = runs["policy, under chaos"]
    ok = all(r.judgement.ok for r in runs.values())
    print(
        f"maintenance over {base.last_back - calm.last_back:.0f} s earlier with the policy, "
        f"{base.last_back - policy.last_back:.0f} s earlier under chaos (seed {args.chaos}); "
        f"invariants {'held' if ok else 'BROKEN'}"
    )
    return 0 if ok else 1


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--vms", type=int, default=6)
    p.add_argument("--zones", type=int, default=3)
    p.add_argument("-n", type=int, default=2, help="at most this many in impact at once")
    p.add_argument("--notice", type=float, default=900.0, help="NotBefore, scenario seconds")
    p.add_argument("--impact", type=float, default=120.0, help="each VM's impact, seconds")
    p.add_argument("--approval-delay", type=float, default=10.0)
    p.add_argument("--retry", type=float, default=15.0, help="retry_seconds")
    p.add_argument("--scale", type=float, help="scenario seconds per real second (60; --chaos: 30)")
    p.add_argument("--quick", action="store_true", help="4 VMs, 2 zones, scale 200")
    p.add_argument("--chaos", type=int, metavar="SEED", help="agent processes under chaos")
    args = p.parse_args()
    if args.chaos is not None:
        return chaos(args)
    args.scale = args.scale or 60.0
    if args.quick:
        args.vms, args.zones, args.scale = 4, 2, 200.0
    with tempfile.TemporaryDirectory() as tmp:
        sim = Simulator(None, token_authority=TokenAuthority()).start()
        os.environ["AZURE_POD_IDENTITY_AUTHORITY_HOST"] = sim.url
        with Azurite(Path(tmp) / "azurite") as azurite:
            container = ContainerClient(
                azurite.account_url,
                "coordination",
                credential=ManagedIdentityCredential(),
                connection_verify=str(azurite.ca_cert),
            )
            container.create_container()
            base = run(args, None, "svc")
            policy = run(args, container, "svc")
        sim.stop()
    print(
        f"service of {args.vms} VMs in {args.zones} zones, N = {args.n}; NotBefore at "
        f"{args.notice:g} s, impact {args.impact:g} s each, approval starts it "
        f"{args.approval_delay:g} s later; scenario x{args.scale:g}"
    )
    head = f"{'run':<26}{'last VM back (s)':>18}{'vs NotBefore (s)':>18}{'most in impact':>16}"
    print(head + f"{'zones at once':>15}{'coordinator requests':>22}")
    for name, r in (("baseline (at NotBefore)", base), ('approve = "service"', policy)):
        print(
            f"{name:<26}{r['last_back']:>18.0f}{r['vs_not_before']:>18.0f}{r['most']:>16}"
            f"{r['zones']:>15}{r['requests']:>22}"
        )
    earlier = base["last_back"] - policy["last_back"]
    print(
        f"maintenance over {earlier:.0f} s earlier with the policy, never more than "
        f"{policy['most']} VMs in impact (baseline: {base['most']})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
