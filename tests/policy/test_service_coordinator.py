"""Early approval across a service (issue 32): the admission rule, pure, and the coordinator in
Blob Storage against Azurite (the storage emulator, managed-identity tokens from the IMDS
simulator): never more than N in impact, one zone at a time, even with racing agents, an agent
killed with its slot held, and storage unreachable (no approval)."""

from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from se_forwarder.approvals.service import Holder, Request, Slots, admit
from se_forwarder.policy.service_config import limit_of

MIN = 60_000


def req(
    vm: str, zone: str = "1", fd: int | None = 0, nb: int = 10 * MIN, event: str = "e"
) -> Request:
    return Request(f"{vm}|{event}", vm, event, zone, fd, nb)


def held(*pairs: tuple[str, str], expires: int = 99 * MIN) -> Slots:
    return Slots({f"{vm}|e": Holder(vm, "e", zone, 0, expires) for vm, zone in pairs})


def test_at_most_n_and_the_same_vm_finds_its_claim_again():
    slots = Slots()
    for vm in ("a", "b"):
        v = admit(slots, req(vm), now_ms=0, limit=2, spread="zone", bound_ms=MIN)
        assert v.admitted
        slots = v.slots
    third = admit(slots, req("c"), now_ms=0, limit=2, spread="zone", bound_ms=MIN)
    assert (third.admitted, third.why, third.slots) == (False, "2 of 2 in impact", slots)
    again = admit(slots, req("a"), now_ms=5, limit=2, spread="zone", bound_ms=MIN)
    assert again.admitted and again.slots == slots  # a restart: no second entry
    assert slots.holders["a|e"].expires_ms == 10 * MIN + MIN  # from NotBefore, on storage's clock


@pytest.mark.parametrize(
    "spread,zone,fd,admitted",
    [
        ("zone", "2", 0, False),  # zone 1 is in impact: zone 2 waits its turn
        ("zone", "1", 1, True),
        ("fault-domain", "2", 0, True),
        ("fault-domain", "1", 1, False),
        ("none", "2", 1, True),
    ],
)
def test_zones_or_fault_domains_apart(spread, zone, fd, admitted):
    v = admit(held(("a", "1")), req("b", zone, fd), now_ms=0, limit=3, spread=spread, bound_ms=MIN)
    assert v.admitted is admitted


def test_an_expired_claim_is_reclaimed_on_storages_clock():
    slots = held(("a", "1"), ("b", "1"), expires=20 * MIN)
    assert not admit(
        slots, req("c"), now_ms=20 * MIN, limit=2, spread="zone", bound_ms=MIN
    ).admitted
    v = admit(slots, req("c", "2"), now_ms=20 * MIN + 1, limit=2, spread="zone", bound_ms=MIN)
    assert v.admitted and set(v.slots.holders) == {"c|e"} and "2 expired" in v.why


def test_n_from_a_fraction_of_the_service():
    assert limit_of(2, None, None) == 2
    assert limit_of(5, 0.34, 6) == 2
    assert limit_of(5, 0.01, 6) == 1  # never 0: the policy would approve nothing
    assert Slots.from_json(held(("a", "1")).to_json()) == held(("a", "1"))


# -- against Azurite ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def storage(tmp_path_factory):
    """Azurite over HTTPS with managed-identity tokens from the IMDS simulator; a container."""
    from se_forwarder_testbed.simulator.server import Simulator
    from se_forwarder_testbed.standins.azurite import Azurite, executable
    from se_forwarder_testbed.standins.tokens import TokenAuthority

    if executable() is None:
        pytest.skip("Azurite is not installed (npm ci --prefix tools/azurite)")
    d = tmp_path_factory.mktemp("coordination")
    sim = Simulator(None, token_authority=TokenAuthority()).start()
    old = os.environ.get("AZURE_POD_IDENTITY_AUTHORITY_HOST")
    os.environ["AZURE_POD_IDENTITY_AUTHORITY_HOST"] = sim.url
    azurite = Azurite(d / "azurite").start()
    try:
        make_container(azurite).create_container()
        yield azurite, sim.url
    finally:
        azurite.stop()
        sim.stop()
        if old is None:
            os.environ.pop("AZURE_POD_IDENTITY_AUTHORITY_HOST", None)
        else:
            os.environ["AZURE_POD_IDENTITY_AUTHORITY_HOST"] = old


def make_container(azurite):
    from azure.identity import ManagedIdentityCredential
    from azure.storage.blob import ContainerClient

    return ContainerClient(
        azurite.account_url,
        "coordination",
        credential=ManagedIdentityCredential(),
        connection_verify=str(azurite.ca_cert),
    )


def coordinator(azurite, service: str, **kw):
    from se_forwarder.approvals.coordinator import Coordinator

    kw = {"limit": 2, "spread": "zone", "bound_seconds": 3600, **kw}
    return Coordinator(make_container(azurite), service, **kw)


@pytest.mark.e2e
@pytest.mark.tls
def test_six_racing_agents_never_have_more_than_two_in_impact_nor_two_zones(storage):
    """Six VMs of one service in three zones, each an agent on its own client: claim until
    admitted, stay "in impact" a moment, give the slot back; what the test sees admitted at once
    never exceeds 2, and never spans two zones."""
    azurite, _ = storage
    in_impact: dict[str, str] = {}
    seen: list[tuple[int, int]] = []  # (how many at once, how many zones at once)
    lock = threading.Lock()
    errors: list[str] = []

    def agent(i: int) -> None:
        c = coordinator(azurite, "web")
        r = req(f"vm-{i}", zone=str(i % 3 + 1), nb=2**40)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            ok, why = c.claim(r)
            if ok:
                break
            if why == "coordinator unreachable":
                errors.append(why)
            time.sleep(random.uniform(0.01, 0.05))
        else:
            errors.append(f"vm-{i} never admitted")
            return
        with lock:
            in_impact[r.vm] = r.zone
            seen.append((len(in_impact), len(set(in_impact.values()))))
        time.sleep(random.uniform(0.05, 0.2))
        with lock:
            del in_impact[r.vm]  # out of the set before the slot is given back
        assert c.release(r.key) == (True, "slot given back")

    threads = [threading.Thread(target=agent, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(90)
    assert errors == [] and len(seen) == 6
    assert max(n for n, _ in seen) <= 2 and max(z for _, z in seen) == 1
    assert coordinator(azurite, "web").claim(req("late"))[0]  # all given back


CLAIMER = """
import sys, time
from azure.identity import ManagedIdentityCredential
from azure.storage.blob import ContainerClient
from se_forwarder.approvals.coordinator import Coordinator
from se_forwarder.approvals.service import Request
url, ca, nb = sys.argv[1], sys.argv[2], int(sys.argv[3])
c = Coordinator(ContainerClient(url, "coordination", credential=ManagedIdentityCredential(),
    connection_verify=ca), "db", limit=2, spread="zone", bound_seconds=2)
print(c.claim(Request("vm-k|e", "vm-k", "e", "1", 0, nb)), flush=True)
time.sleep(600)  # "in impact": killed here
"""


@pytest.mark.e2e
@pytest.mark.tls
@pytest.mark.process
def test_a_slot_outlives_its_agent_killed_with_kill_9_until_its_claim_expires(storage, tmp_path):
    azurite, sim_url = storage
    env = {**os.environ, "AZURE_POD_IDENTITY_AUTHORITY_HOST": sim_url}
    nb = int(time.time() * 1000)  # its NotBefore is now: the claim expires 2 s after storage's now
    proc = subprocess.Popen(
        [sys.executable, "-c", CLAIMER, azurite.account_url, str(azurite.ca_cert), str(nb)],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert proc.stdout.readline().strip() == "(True, 'slot 1 of 2')"
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
    c = coordinator(azurite, "db", bound_seconds=2)
    assert c.claim(req("vm-a", nb=0)) == (True, "slot 2 of 2")
    assert c.claim(req("vm-b", nb=0)) == (False, "2 of 2 in impact")  # the dead agent's counts
    time.sleep(3.5)  # storage's clock passes both claims' expiry (NotBefore + 2 s)
    ok, why = c.claim(req("vm-b", zone="2", nb=0))
    assert ok and "2 expired claim(s) reclaimed" in why


@pytest.mark.e2e
@pytest.mark.tls
def test_no_approval_when_the_coordinator_is_unreachable(tmp_path):
    from azure.core.credentials import AzureNamedKeyCredential
    from azure.storage.blob import ContainerClient

    from se_forwarder.approvals.coordinator import Coordinator

    # a port nobody listens on: every request fails at once
    client = ContainerClient(
        "https://127.0.0.1:9/devstoreaccount1",
        "coordination",
        credential=AzureNamedKeyCredential("devstoreaccount1", "a2V5"),
        retry_total=0,
    )
    c = Coordinator(client, "web", limit=2, spread="zone", bound_seconds=60)
    assert c.claim(req("vm-a")) == (False, "coordinator unreachable")


# -- the policy: approve = "service", through the controller ---------------------------------------


def _agent(
    azurite, tmp_path: Path, i: int, zone: str, max_in_impact: int = 2, service: str = "svc-a"
):
    """One VM's policy controller: its own IMDS simulator (which honours approvals), its own
    state, the service's coordinator in Azurite."""
    from helpers.actions import scenario

    from se_forwarder.actions.controller import Actions
    from se_forwarder.config import IdentityConfig
    from se_forwarder.hooks import Journal
    from se_forwarder.imds.client import ImdsClient
    from se_forwarder.model import VmIdentity
    from se_forwarder.outbox import Store
    from se_forwarder.policy import PolicyConfig
    from se_forwarder.recording.recorder import Recorder
    from se_forwarder_testbed.simulator.server import Simulator

    name = f"vm-{i}"
    sim = Simulator(scenario(name, appear=0.0, not_before=600.0), speed=1.0, first_call_delay=0.0)
    sim.start()
    config = PolicyConfig.model_validate(
        {
            "rules": [{"name": "spread", "approve": "service"}],
            "service": {
                "account_url": azurite.account_url,
                "container": "coordination",
                "max_in_impact": max_in_impact,
                "retry_seconds": 0.2,
                "ca_file": str(azurite.ca_cert),
            },
        }
    )
    store = Store(tmp_path / f"{name}-state")
    act = Actions(
        config,
        Journal(store),
        lambda: ImdsClient(sim.url, timeout=2.0, first_call_timeout=2.0),
        identity=IdentityConfig(),
    )
    vm = VmIdentity(
        VmName=name, VmId=f"id-{i}", Computer=name, Zone=zone, Tags={"service": service}
    )
    act.start(Recorder(store, vm))
    return sim, act, vm


def _record(sim, vm, phase: str = "FirstSeen", **over):
    from se_forwarder.model import LifecycleRecord
    from se_forwarder.timefmt import format_ms

    nb = format_ms(int(time.time() * 1000) + 600_000)
    base = {
        "TimeGenerated": format_ms(int(time.time() * 1000)),
        "RecordId": f"r-{vm.VmName}-{phase}",
        "Phase": phase,
        "Outcome": None,
        "EventId": sim.event_id(0),
        "EventType": "Reboot",
        "EventStatus": "Scheduled",
        "EventSource": "Platform",
        "ResourceType": "VirtualMachine",
        "Resources": [vm.VmName],
        "Description": "",
        "DurationInSeconds": -1,
        "NotBefore": nb,
        "DocumentIncarnation": 1,
        "FirstSeenAt": nb,
        "StartedAt": None,
        "NoticeSeconds": 600.0,
        "SinceFirstSeenSeconds": 0.0,
        "StartDelaySeconds": None,
        "SinceStartedSeconds": None,
        "UncertaintySeconds": 1.0,
        "AffectsThisVm": True,
        "vm": vm,
    }
    return LifecycleRecord(**{**base, **over})


def _wait(done, timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if done():
            return True
        time.sleep(0.05)
    return False


@pytest.mark.e2e
@pytest.mark.tls
def test_a_service_of_four_is_approved_early_two_at_a_time_one_zone_at_a_time(storage, tmp_path):
    azurite, _ = storage
    agents = [_agent(azurite, tmp_path, i, zone) for i, zone in enumerate(("1", "2", "1", "2"))]
    try:
        for sim, act, vm in agents:
            act.on_records([_record(sim, vm)])

        def approved() -> list[int]:
            return [i for i, (sim, _, _) in enumerate(agents) if sim.approvals]

        assert _wait(lambda: len(approved()) == 2)
        time.sleep(1.0)  # the others keep asking: still two
        first = approved()
        assert len(first) == 2 and len({agents[i][2].Zone for i in first}) == 1
        waiting = [a for i, a in enumerate(agents) if i not in first]
        assert all(
            "waiting for the service's coordinator" in a[1].stats().acted_events[0] for a in waiting
        )
        for i in first:  # their reboots are over: the slots go back
            sim, act, vm = agents[i]
            act.on_records(  # as the tracker writes it: a started event has no NotBefore
                [
                    _record(
                        sim,
                        vm,
                        "Removed",
                        Outcome="Completed",
                        EventStatus="Started",
                        NotBefore=None,
                    )
                ]
            )
        assert _wait(lambda: len(approved()) == 4)
        for i in first:
            [line] = agents[i][1].stats().acted_events
            assert re.search(r"approved by this VM \(service tag:svc-a: slot [12] of 2\)$", line)
    finally:
        for sim, act, _ in agents:
            act.stop()
            sim.stop()


@pytest.mark.e2e
@pytest.mark.tls
def test_no_approval_when_the_policys_coordinator_is_unreachable(storage, tmp_path):
    azurite, _ = storage

    class Away:
        account_url = "https://127.0.0.1:9/devstoreaccount1"
        ca_cert = azurite.ca_cert

    sim, act, vm = _agent(Away, tmp_path, 9, "1")
    try:
        act.on_records([_record(sim, vm)])
        # said at once: no retry of the SDK's own (azure-storage-blob waits 15 s before one)
        assert _wait(lambda: "coordinator unreachable" in (act.stats().acted_events or ("",))[0], 5)
        time.sleep(0.5)
        assert sim.approvals == {}
    finally:
        act.stop()
        sim.stop()


def _holders(azurite, service: str) -> set[str]:
    from se_forwarder.approvals.service import Slots

    blob = coordinator(azurite, service).blob
    return set(Slots.from_json(blob.download_blob().readall()).holders)


def _removed(sim, vm):
    return _record(sim, vm, "Removed", Outcome="Completed", EventStatus="Started", NotBefore=None)


@pytest.mark.e2e
@pytest.mark.tls
def test_a_slot_is_given_back_once_the_store_is_reachable_again(storage, tmp_path):
    """The event ends while the agent cannot reach the store (a partition): the release is
    retried until it is done, not left to the claim's expiry (which holds the service's next
    VMs back until NotBefore)."""
    from se_forwarder_testbed.demo.network import Link

    azurite, _ = storage
    link = Link(int(azurite.account_url.split(":")[2].split("/")[0]))

    class Partitioned:
        account_url = f"https://127.0.0.1:{link.port}/devstoreaccount1"
        ca_cert = azurite.ca_cert

    sim, act, vm = _agent(Partitioned, tmp_path, 7, "1", service="svc-p")
    try:
        act.on_records([_record(sim, vm)])
        assert _wait(lambda: bool(sim.approvals))
        assert _holders(azurite, "tag:svc-p") == {f"{vm.key}|{sim.event_id(0)}"}
        link.cut()
        act.on_records([_removed(sim, vm)])
        time.sleep(1.0)  # its first tries fail
        assert _holders(azurite, "tag:svc-p") == {f"{vm.key}|{sim.event_id(0)}"}
        link.restore()
        assert _wait(lambda: not _holders(azurite, "tag:svc-p"), 10)
    finally:
        act.stop()
        sim.stop()
        link.close()


@pytest.mark.e2e
@pytest.mark.tls
def test_a_slot_held_when_the_agent_stopped_is_given_back_after_its_restart(storage, tmp_path):
    """The agent stops with a slot held and comes back to find its event over (it ended while
    the agent was down, so no Removed reaches the policy): the slot, kept in the state database,
    is given back at the start."""
    azurite, _ = storage
    sim, act, vm = _agent(azurite, tmp_path, 8, "1", service="svc-r")
    try:
        act.on_records([_record(sim, vm)])
        assert _wait(lambda: bool(sim.approvals))
        act.stop()
        act.journal.store.close()
        assert _holders(azurite, "tag:svc-r") == {f"{vm.key}|{sim.event_id(0)}"}
        again = _agent(azurite, tmp_path, 8, "1", service="svc-r")  # the same state database
        again[0].stop()
        try:
            assert _wait(lambda: not _holders(azurite, "tag:svc-r"), 10)
        finally:
            again[1].stop()
    finally:
        sim.stop()
