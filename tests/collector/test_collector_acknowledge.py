"""The collector's approvals from outside the VM (``[collector.preview_acknowledge]``): the real
``Collector`` in this process on a FakeClock, its Resource Graph channel (events, inventory)
through azure-mgmt-resourcegraph, its acknowledgements through azure-mgmt-core's
``ARMPipelineClient`` against the acknowledge stand-in (which shares the events' state with the
Resource Graph stand-in and checks token, api-version and role), the agents' heartbeats through
azure-monitor-query against the Log Analytics query stand-in. Approved when the policy says
so, never otherwise; each of Azure's refusals recorded as it means."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers.azure import AzureWorld, _toml
from helpers.collector import SUB, scheduled, vm_parent

from se_forwarder.collector.config import CollectorFileConfig
from se_forwarder.collector.service import Collector
from se_forwarder.collector.status import evaluate, read_snapshot
from se_forwarder.config import load
from se_forwarder.timefmt import format_ms
from se_forwarder_testbed.fakeclock import FakeClock
from se_forwarder_testbed.standins.log_query import LogQueryStandIn
from se_forwarder_testbed.standins.maintenance import MaintenanceStandIn
from se_forwarder_testbed.standins.resource_graph import ResourceGraphStandIn
from se_forwarder_testbed.standins.tls import generate

pytestmark = [pytest.mark.e2e, pytest.mark.tls]

WORKSPACE = "11111111-2222-3333-4444-555555555555"
PLATFORM = "Custom-ScheduledEventsPlatform"
REBOOTS = {"event_types": ["Reboot"], "services": ["batch"]}


def rfc1123(ms: int) -> str:
    import email.utils

    return email.utils.formatdate(ms / 1000, usegmt=True)


def rule_toml(rule: dict[str, Any]) -> str:
    body = "".join(
        f"{k} = {{{', '.join(f'{n} = {json.dumps(x)}' for n, x in v.items())}}}\n"
        if isinstance(v, dict)
        else f"{k} = {json.dumps(v)}\n"
        for k, v in rule.items()
    )
    return f"\n[[collector.preview_acknowledge.rules]]\n{body}"


class Bed:
    """The stand-ins and the events, VMs and heartbeats they serve."""

    def __init__(self, world: AzureWorld, tmp: Path, clock: FakeClock) -> None:
        self.world, self.tmp, self.clock = world, tmp, clock
        self.arg = ResourceGraphStandIn(generate(tmp / "tls-arg"), world.authority, quota=1000)
        self.ack = MaintenanceStandIn(
            generate(tmp / "tls-ack"), world.authority, self.arg, clock=clock
        )
        self.heartbeats: list[dict[str, Any]] = []
        self.logs = LogQueryStandIn(
            generate(tmp / "tls-logs"),
            world.authority,
            WORKSPACE,
            lambda: self.heartbeats,
            clock=clock,
        )
        self.arg.tables = {"maintenanceresources": [], "resources": []}
        self.ack.grant("system-assigned", f"/subscriptions/{SUB}")

    def __enter__(self) -> Bed:
        for s in (self.arg, self.ack, self.logs):
            s.start()
        return self

    def __exit__(self, *exc: object) -> None:
        for s in (self.logs, self.ack, self.arg):
            s.stop()

    def vm(self, name: str, *, service: str = "batch", rg: str = "rg-app") -> None:
        self.arg.tables["resources"].append(
            {
                "id": vm_parent(name, rg),
                "name": name,
                "type": "microsoft.compute/virtualmachines",
                "subscriptionId": SUB,
                "tags": {"service": service},
                "properties": {"vmId": f"vm-id-{name}"},
            }
        )

    def agent_on(self, name: str, rg: str = "rg-app") -> None:
        self.heartbeats.append(
            {
                "TimeGenerated": format_ms(self.clock.wall_ms()),
                "SubscriptionId": SUB,
                "ResourceGroup": rg,
                "VmName": name,
            }
        )

    def event(
        self, event_id: str, vm: str, *, in_s: float = 900, kind: str = "Reboot", rg: str = "rg-app"
    ) -> None:
        nb = rfc1123(self.clock.wall_ms() + int(in_s * 1000))
        info = scheduled(
            event_id,
            "Scheduled",
            "2026-01-01T00:00:00Z",
            parent=vm_parent(vm, rg),
            event_type=kind,
            not_before=nb,
        )["data"]["resourceInfo"]
        self.arg.tables["maintenanceresources"].append(
            {**info, "type": "microsoft.maintenance/scheduledevents"}
        )

    def status(self, event_id: str) -> str:
        for row in self.arg.tables["maintenanceresources"]:
            if row["name"] == event_id:
                return str(row["properties"]["EventStatus"])
        raise KeyError(event_id)

    def start(self, event_id: str) -> None:
        for row in self.arg.tables["maintenanceresources"]:
            if row["name"] == event_id:
                row["properties"].update(EventStatus="Started", NotBefore="")


class Run:
    """``collect --resource-graph`` with approvals, on a thread, in fake time."""

    def __init__(self, bed: Bed, state: Path, approve: dict[str, Any] | None) -> None:
        collector: dict[str, Any] = {
            "resource_graph_endpoint": bed.arg.endpoint,
            "resource_graph_ca_file": str(bed.arg.tls.ca_cert),
            "resource_graph_interval": 30,
            "inventory_interval": 30,
        }
        rules = list((approve or {}).get("rules", []))
        if approve is not None:
            approve = {k: v for k, v in approve.items() if k != "rules"}
            collector["preview_acknowledge"] = {
                "endpoint": bed.ack.endpoint,
                "ca_file": str(bed.ack.tls.ca_cert),
                "agents_workspace_id": WORKSPACE,
                "logs_endpoint": bed.logs.endpoint,
                "logs_ca_file": str(bed.logs.tls.ca_cert),
                "interval": 5,
                **approve,
            }
        cfg = {
            "agent": {"state_dir": str(state), "stop_flush_seconds": 5.0},
            "sinks": {"log_analytics": bed.world.la_section()},
            "collector": collector,
        }
        path = state.parent / f"{state.name}.toml"
        path.write_text(_toml(cfg) + "".join(map(rule_toml, rules)))
        config = load(path, env={}, model=CollectorFileConfig)
        assert config.collector is not None
        self.bed, self.state, self.clock = bed, state, bed.clock
        self.collector = Collector(config, config.collector, clock=bed.clock)
        self.thread = threading.Thread(target=self.collector.run_graph, daemon=True)
        self.clock.track(self.thread)
        self.thread.start()

    def rounds(self, seconds: float) -> None:
        """Let ``seconds`` of fake time pass (passes every 30 s, decisions every 5 s)."""
        for _ in range(int(seconds / 5)):
            self.clock.advance(5.0)

    def snapshot(self) -> Any:
        return read_snapshot(json.loads((self.state / "status.json").read_text()))[0]

    def approvals(self) -> list[dict[str, Any]]:
        return [r for r in self.bed.world.la.records(PLATFORM) if r["RecordType"] == "Approval"]

    def stop(self) -> None:
        self.collector.stop.set()
        assert self.clock.run_until(lambda: not self.thread.is_alive(), 120)


@pytest.fixture
def bed(tmp_path) -> Iterator[Bed]:
    with AzureWorld(tmp_path, eventhubs=False) as world, Bed(world, tmp_path, FakeClock()) as b:
        yield b


def settle(run: Run) -> None:
    """Time for the first pass, the inventory and a round or two of decisions."""
    run.clock.run_until((run.state / "status.json").exists, 60)
    run.rounds(40)
    run.clock.run_until(lambda: False, 2)  # let the sinks deliver


def test_an_agentless_vm_is_approved_when_the_policy_says_so(bed, tmp_path):
    bed.vm("batch-1")
    bed.event("E-1", "batch-1")
    run = Run(bed, tmp_path / "c", {"enabled": True, "rules": [REBOOTS]})
    settle(run)
    assert bed.ack.acknowledged == ["E-1"] and bed.status("E-1") == "Started"
    (row,) = run.approvals()
    assert row["ApprovedBy"] == "Collector" and row["EventId"] == "E-1"
    assert row["Channel"] == "acknowledge" and row["VmName"] == "batch-1"
    assert row["EventStatus"] is None  # a decision, never taken for a status of the event
    assert row["Acted"] == "rule 1: approved by the collector"
    assert "api-version=" not in bed.ack.requests[0]["path"]  # the path, without its query
    snap = run.snapshot()
    assert (snap.approvals, snap.ack_sent, snap.ack_approved) == (True, 1, 1)
    run.stop()


def test_the_default_configuration_approves_nothing(bed, tmp_path):
    bed.vm("batch-1")
    bed.event("E-1", "batch-1", in_s=60)
    run = Run(bed, tmp_path / "c", None)  # no [collector.preview_acknowledge]
    settle(run)
    run.stop()
    # enabled, but no rule; and a rule that matches no event: nothing either
    for approve in ({"enabled": True}, {"enabled": True, "rules": [{"event_types": ["Freeze"]}]}):
        run = Run(bed, tmp_path / f"c{len(approve)}", approve)
        settle(run)
        run.stop()
    assert bed.ack.requests == [] and bed.status("E-1") == "Scheduled"


def test_a_vm_with_an_agent_is_never_approved_by_the_collector(bed, tmp_path):
    for name in ("batch-1", "batch-2"):
        bed.vm(name)
    bed.agent_on("Batch-1")  # its heartbeats say an agent runs there (any case)
    bed.event("E-AGENT", "batch-1")
    bed.event("E-NONE", "batch-2")
    run = Run(bed, tmp_path / "c", {"enabled": True, "rules": [REBOOTS], "max_in_impact": 5})
    settle(run)
    assert bed.ack.acknowledged == ["E-NONE"] and bed.status("E-AGENT") == "Scheduled"
    assert run.snapshot().ack_agent_events == 1
    acted = {r["EventId"]: r for r in run.approvals()}
    assert acted["E-AGENT"]["ApprovedBy"] is None
    assert acted["E-AGENT"]["Acted"] == (
        f"rule 1: not approved: an agent runs on {SUB}/rg-app/batch-1: the agent approves"
    )
    # and nothing at all while the heartbeats cannot be read
    bed.logs.fail_with = 503
    bed.event("E-LATER", "batch-2")
    run.rounds(60)
    assert bed.ack.acknowledged == ["E-NONE"]
    run.clock.advance(6)
    snap = run.snapshot()
    assert snap.agents_unknown >= 1 and snap.agents_error
    assert any("heartbeats" in w for w in evaluate(snap, now=run.clock.wall_seconds()).warnings)
    run.stop()


def test_at_most_max_in_impact_per_service_and_only_ahead_seconds_early(bed, tmp_path):
    for name in ("batch-1", "batch-2", "batch-3"):
        bed.vm(name)
        bed.event(f"E-{name}", name, in_s=900)
    rule = {**REBOOTS, "ahead_seconds": 600}
    run = Run(bed, tmp_path / "c", {"enabled": True, "rules": [rule], "max_in_impact": 2})
    settle(run)
    assert bed.ack.requests == []  # 900 s ahead: more than 600 s before NotBefore
    run.rounds(320)
    assert len(bed.ack.acknowledged) == 2  # two of batch's three at once
    run.rounds(60)
    assert len(bed.ack.acknowledged) == 2
    for row in bed.arg.tables["maintenanceresources"]:  # the first two end
        if row["name"] in bed.ack.acknowledged:
            row["properties"]["EventStatus"] = "Completed"
    run.rounds(60)
    assert len(bed.ack.acknowledged) == 3
    assert run.snapshot().ack_held == 1
    run.stop()


def test_unknown_event_started_event_missing_role_and_throttling(bed, tmp_path, caplog):
    """404: not retried, counted; 409: "started before approval"; 403: one log line naming
    the role, counted, a warning in status; 429 and 503: retried after their Retry-After."""
    for name in ("batch-1", "batch-2", "batch-3", "batch-4"):
        bed.vm(name)
    bed.vm("other-1", rg="rg-other")
    bed.event("E-GONE", "batch-1")
    bed.event("E-STARTED", "batch-2")
    bed.event("E-THROTTLED", "batch-3")
    bed.event("E-FORBIDDEN", "other-1", rg="rg-other")
    bed.ack.contributors.clear()
    bed.ack.grant("system-assigned", f"/subscriptions/{SUB}/resourceGroups/rg-app")
    bed.ack.faults = {"E-THROTTLED": [(429, 7.0), (503, 3.0)]}
    run = Run(
        bed,
        tmp_path / "c",
        {"enabled": True, "rules": [{"event_types": ["Reboot"]}], "max_in_impact": 10},
    )
    run.clock.run_until(lambda: len(bed.arg.requests) >= 4, 1)  # the first pass, read whole
    # between Resource Graph's read and the acknowledgement: one vanishes, one starts
    bed.arg.tables["maintenanceresources"] = [
        r for r in bed.arg.tables["maintenanceresources"] if r["name"] != "E-GONE"
    ]
    bed.start("E-STARTED")
    settle(run)
    run.clock.run_until(lambda: len(run.approvals()) >= 4, 10)
    acted = {r["EventId"]: r for r in run.approvals()}
    assert acted["E-GONE"]["Acted"].endswith("Azure does not know this event (404 NotFound)")
    assert acted["E-STARTED"]["Acted"] == "rule 1: started before approval (409 Conflict)"
    assert "Scheduled Event Contributor (403 AuthorizationFailed)" in acted["E-FORBIDDEN"]["Acted"]
    assert acted["E-THROTTLED"]["ApprovedBy"] == "Collector"
    assert all(acted[e]["ApprovedBy"] is None for e in ("E-GONE", "E-FORBIDDEN", "E-STARTED"))
    snap = run.snapshot()
    assert (snap.ack_unknown_events, snap.ack_forbidden, snap.ack_retries) == (1, 1, 2)
    assert (snap.ack_started_before, snap.ack_approved) == (1, 1)
    # each was asked once, but the throttled one three times (429, 503, 200)
    asked = [r["path"].rsplit("/", 2)[-2] for r in bed.ack.requests]
    assert sorted(set(asked)) == sorted(acted) and len(asked) == len(acted) + 2
    # after each Retry-After (7 s, then 3 s; at most 10 % more), the others not held up meanwhile
    times = [r["at_ms"] for r in bed.ack.requests if "E-THROTTLED" in r["path"]]
    assert 7000 <= times[1] - times[0] <= 7700 and 3000 <= times[2] - times[1] <= 3300
    assert all(r["at_ms"] < times[1] for r in bed.ack.requests if "E-THROTTLED" not in r["path"])
    forbidden = [r for r in caplog.records if "Scheduled Event Contributor" in r.getMessage()]
    assert len(forbidden) == 1
    verdict = evaluate(snap, now=run.clock.wall_seconds())
    assert any("Scheduled Event Contributor" in w for w in verdict.warnings)
    run.stop()


def test_an_event_is_never_acknowledged_twice_across_restarts(bed, tmp_path):
    """The claim (``ack:<EventId>`` in the state database) is committed before the request: a
    restarted collector never asks again, and one killed during the request (its claim without
    an outcome) records that the outcome is unknown, once."""
    from se_forwarder.outbox import Store

    for name in ("batch-1", "batch-2"):
        bed.vm(name)
    bed.event("E-1", "batch-1")
    state = tmp_path / "c"
    run = Run(bed, state, {"enabled": True, "rules": [REBOOTS], "max_in_impact": 5})
    settle(run)
    run.stop()
    assert bed.ack.acknowledged == ["E-1"]
    for row in bed.arg.tables["maintenanceresources"]:  # still Scheduled, as far as anyone says
        row["properties"].update(
            EventStatus="Scheduled", NotBefore=rfc1123(run.clock.wall_ms() + 900_000)
        )
    bed.event("E-2", "batch-2")
    store = Store(state)
    rid = vm_parent("batch-2").lower()
    assert store.claim(
        "ack:E-2", {"at": run.clock.wall_ms(), "type": "Reboot", "vms": [[rid, "batch-2", None]]}
    )
    store.close()
    again = Run(bed, state, {"enabled": True, "rules": [REBOOTS], "max_in_impact": 5})
    settle(again)
    again.clock.run_until(lambda: len(again.approvals()) >= 2, 10)
    again.stop()
    assert bed.ack.acknowledged == ["E-1"] and len(bed.ack.requests) == 1
    acted = {r["EventId"]: r for r in again.approvals()}
    assert len(again.approvals()) == 2
    assert (
        acted["E-2"]["Acted"].startswith("outcome unknown") and acted["E-2"]["ApprovedBy"] is None
    )
