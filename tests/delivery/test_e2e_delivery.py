"""End to end: ``se-forwarder run --config`` as a subprocess, the IMDS simulator (scheduled events,
instance document, managed-identity tokens) and the Logs Ingestion / Event Hubs stand-ins in this
process; the agent talks to them through the real Azure SDKs over TLS, trusting the stand-ins' CA
(``ca_file``). Faults are injected in the stand-ins; assertions poll for conditions with timeouts.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest
from helpers.azure import AGENT, HEARTBEATS, HUB, RECORDS, AgentProcess, AzureWorld, wait_until

from se_forwarder.model import record_id

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    with AzureWorld(tmp_path_factory.mktemp("e2e"), rate_limit=None) as w:
        yield w


@pytest.fixture
def w(world):
    """A clean world per test: no events served, nothing stored, no faults."""
    world.sim.set_events([])
    world.clean()
    yield world
    world.clean()


@pytest.fixture
def agents(w, tmp_path):
    started: list[AgentProcess] = []

    def start(config: Path, **env: str) -> AgentProcess:
        a = AgentProcess(config, w.agent_env(**env), tmp_path / f"agent{len(started)}.log").start()
        started.append(a)
        return a

    yield start
    for a in started:
        if a.proc is not None and a.proc.poll() is None:
            a.stop()


def vm_key(w: AzureWorld) -> str:
    return w.sim.scenario.vm.vm_id


def new_ids(n: int) -> list[str]:
    return [str(uuid.uuid4()) for _ in range(n)]


def expected(w: AzureWorld, event_ids: list[str], phases=("FirstSeen",)) -> set[str]:
    return {record_id(vm_key(w), e, p) for e in event_ids for p in phases}


def la_ids(w: AzureWorld) -> list[str]:
    return [r["RecordId"] for r in w.la.records(RECORDS)]


def eh_bodies(w: AzureWorld) -> list[dict]:
    return [json.loads(e.body) for e in w.eh.events]


def eh_ids(w: AzureWorld) -> list[str]:
    return [b["RecordId"] for b in eh_bodies(w) if "Phase" in b]


def has_all(got, want: set[str]) -> bool:
    return want <= set(got)


# -- Log Analytics ----------------------------------------------------------------------------


def test_log_analytics_through_every_fault(w, agents, tmp_path):
    """Records and heartbeats reach Log Analytics through 429 (with and without Retry-After),
    500, 503, 413, dropped connections and slow answers; nothing is lost, order is kept."""
    cfg = w.agent_config(tmp_path / "state", sinks={"log_analytics": w.la_section()})
    agent = agents(cfg)
    wait_until(lambda: w.la.records(HEARTBEATS), 20, what="the start heartbeat")
    assert w.la.records(HEARTBEATS)[0]["Reason"] == "start"

    all_ids: list[str] = []
    faults = [
        ("429 with Retry-After", lambda: w.la.throttle_next(1, retry_after=1)),
        ("429 without Retry-After", lambda: w.la.throttle_next(2, retry_after=None)),
        ("500", lambda: w.la.fail_next(1, 500)),
        ("503", lambda: w.la.fail_next(2, 503)),
        ("413", lambda: w.la.fail_next(1, 413)),
        ("dropped connection", lambda: w.la.drop_next(1)),
        ("slow answer past the timeout", lambda: w.la.delay_next(1, seconds=4.0)),
    ]
    for name, inject in faults:
        inject()
        ids = new_ids(6)
        all_ids += ids
        w.publish_events(all_ids)
        wait_until(lambda ids=tuple(all_ids): has_all(la_ids(w), expected(w, list(ids))), 30,
                   what=f"records after {name}")
    statuses = Counter(h.status for h in w.la.history())
    assert statuses[429] == 3 and statuses[500] == 1 and statuses[503] == 2
    assert statuses[413] == 1 and statuses[0] == 1  # dropped

    w.sim.set_events([])  # every event removed: Removed records
    want = expected(w, all_ids, ("FirstSeen", "Removed"))
    wait_until(lambda: has_all(la_ids(w), want), 30, what="Removed records")
    got = la_ids(w)
    dups = [k for k, n in Counter(got).items() if n > 1]
    # only the slow answer's batch may repeat (its confirmation was lost), with the same RecordId
    assert len(dups) <= 6 and set(got) == want
    # in order per VM: every FirstSeen arrives before any Removed (first occurrences)
    first = {k: got.index(k) for k in set(got)}
    assert max(first[record_id(vm_key(w), e, "FirstSeen")] for e in all_ids) < \
        min(first[record_id(vm_key(w), e, "Removed")] for e in all_ids)
    assert agent.logged("delivery failed; will retry")
    assert agent.stop() == 0
    wait_until(lambda: any(h["Reason"] == "stop" for h in w.la.records(HEARTBEATS)), 5,
               what="the stop heartbeat")


def test_kill_9_during_a_batch_then_restart_loses_nothing(w, agents, tmp_path):
    cfg = w.agent_config(tmp_path / "state", sinks={"log_analytics": w.la_section()})
    events = new_ids(40)
    w.publish_events(events)
    w.la.delay_next(None, seconds=3.0)  # every request stored, then answered 3 s later
    agent = agents(cfg)
    wait_until(lambda: [h for h in w.la.history() if h.stream == RECORDS], 20,
               what="a records request in flight")
    agent.kill9()
    in_flight = [h for h in w.la.history() if h.stream == RECORDS]
    before = la_ids(w)
    assert len(in_flight) == 1 and len(before) == in_flight[0].records  # stored, unconfirmed
    w.la.clear_faults()

    agents(cfg)  # restart on the same state directory
    want = expected(w, events)
    wait_until(lambda: has_all(la_ids(w), want), 30, what="every record after the restart")
    w.sim.set_events([])
    want |= expected(w, events, ("Removed",))
    wait_until(lambda: has_all(la_ids(w), want), 30, what="Removed records")
    got = la_ids(w)
    assert set(got) == want
    dups = {k for k, n in Counter(got).items() if n > 1}
    assert dups and dups <= set(before)  # duplicates only of the batch in flight at the kill


def test_long_outage_reaches_the_spool_bound_then_recovers_in_order(w, agents, tmp_path):
    cfg = w.agent_config(tmp_path / "state", sinks={"log_analytics": w.la_section()},
                         spool_max_bytes=24_000, heartbeat_interval=1.5)
    agent = agents(cfg)
    wait_until(lambda: w.la.records(HEARTBEATS), 20, what="the start heartbeat")
    w.la.fail_next(None, 503, retry_after=1)  # the outage: every request refused
    events = new_ids(60)  # ~65 KB of records: well over the 24 KB bound
    for i in range(0, 60, 10):
        w.publish_events(events[:i + 10])
        time.sleep(0.3)
    line = agent.wait_log("spool bound reached", timeout=20)
    assert line["level"] == "error" and line["dropped"] > 0
    assert all(h.status == 503 for h in w.la.history() if h.stream == RECORDS)  # nothing got through
    w.la.clear_faults()  # the service is back

    produced = [record_id(vm_key(w), e, "FirstSeen") for e in events]
    wait_until(lambda: la_ids(w) and la_ids(w)[-1] == produced[-1], 30, what="the backlog drained")
    got = la_ids(w)
    dropped = sum(e["dropped"] for e in agent.logged("spool bound reached"))
    order = [produced.index(g) for g in got]
    assert order == sorted(set(order))  # in the order produced, none twice
    missing = [i for i in range(60) if i not in set(order)]
    # nothing lost beyond what was counted and logged; what was lost is the oldest part of the
    # spool (the batch the worker was already retrying may still go out: it is in memory)
    assert 0 < len(missing) <= dropped
    assert all(i in set(order) for i in range(max(missing) + 1, 60))
    # The drop count reaches Log Analytics in a heartbeat (every drop, by a record or by a
    # heartbeat commit, is also logged).
    hb = wait_until(lambda: [h for h in w.la.records(HEARTBEATS) if h["DroppedRecords"] >= dropped], 10,
                    what="the drop count in a heartbeat")
    assert hb[-1]["DroppedRecords"] >= len(missing)


def test_a_value_over_the_field_limit_is_cut_counted_and_delivered(w, agents, tmp_path):
    """A 70 KB Description (Logs Ingestion keeps at most 64 KB per value): cut at the edge, said
    in the log and in the heartbeat, and the record delivered with the rest: nothing blocked."""
    cfg = w.agent_config(tmp_path / "state", sinks={"log_analytics": w.la_section()})
    agent = agents(cfg)
    wait_until(lambda: w.la.records(HEARTBEATS), 20, what="the start heartbeat")
    big, small = new_ids(1), new_ids(3)
    w.sim.set_events([{"EventId": big[0], "EventType": "Freeze", "Resources": ["sim-vm"],
                       "NotBefore": time.time() + 600, "Description": "d" * (70 * 1024)}])
    agent.wait_log("values over the size limit were truncated", timeout=20)
    w.publish_events(small)
    wait_until(lambda: has_all(la_ids(w), expected(w, small)), 20, what="later records")
    [first] = [r for r in w.la.records(RECORDS) if r["EventId"] == big[0] and
               r["Phase"] == "FirstSeen"]
    assert "truncated" in first["Description"] and len(first["Description"]) < 64 * 1024
    assert not (tmp_path / "state" / "dead-letter.jsonl").exists()
    agent.stop()
    beats = w.la.records(HEARTBEATS)
    assert max(h["TruncatedValues"] for h in beats) >= 1


def test_wrong_credentials_say_which_role_is_missing_and_recover(w, agents, tmp_path):
    """No Monitoring Metrics Publisher: an error line naming it, nothing lost; granted: delivered."""
    w.la.set_allowed_subjects({"someone-else"})
    cfg = w.agent_config(tmp_path / "state", sinks={"log_analytics": w.la_section()})
    events = new_ids(3)
    w.publish_events(events)
    agent = agents(cfg)
    line = agent.wait_log("Log Analytics refused the identity", timeout=20)
    assert line["role"] == "Monitoring Metrics Publisher" and line["level"] == "error"
    assert line["dcr_immutable_id"] == w.la.dcr_id
    assert la_ids(w) == []
    w.la.set_allowed_subjects(None)  # the role assignment arrives
    wait_until(lambda: has_all(la_ids(w), expected(w, events)), 40, what="delivery after the grant")


def test_an_unknown_managed_identity_is_reported(w, agents, tmp_path):
    cfg = w.agent_config(tmp_path / "state", sinks={"log_analytics": w.la_section()},
                         identity={"kind": "managed", "client_id": "00000000-dead-beef-0000-000000000000"})
    agent = agents(cfg)
    line = agent.wait_log("Log Analytics: no access token", timeout=20)
    assert "00000000-dead-beef-0000-000000000000" in line["error"]
    assert w.la.history() == []


# -- Event Hubs -------------------------------------------------------------------------------


def test_event_hubs_through_rejections_drops_and_slowness(w, agents, tmp_path):
    cfg = w.agent_config(tmp_path / "state", sinks={"event_hubs": w.eh_section()})
    agents(cfg)
    wait_until(lambda: w.eh.events, 20, what="the start heartbeat")
    hb = w.eh.events[0]
    assert hb.properties == {"Table": "ScheduledEventsAgent"} and json.loads(hb.body)["Reason"] == "start"
    all_ids: list[str] = []
    faults = [
        ("server-busy", lambda: w.eh.reject_next(4)),
        ("dropped transfers", lambda: w.eh.drop_next(3)),
        ("slow acceptance", lambda: w.eh.set_accept_delay(4.0)),
    ]
    for name, inject in faults:
        inject()
        ids = new_ids(5)
        all_ids += ids
        w.publish_events(all_ids)
        if name == "slow acceptance":
            time.sleep(4.5)
            w.eh.clear_faults()
        wait_until(lambda ids=tuple(all_ids): has_all(eh_ids(w), expected(w, list(ids))), 40,
                   what=f"events after {name}")
    assert w.eh.stats["rejected"] >= 4 and w.eh.stats["dropped_connections"] >= 3
    for e in w.eh.events:
        assert e.partition_key == vm_key(w) and e.content_type == "application/json"
    recs = [e for e in w.eh.events if e.properties.get("Table") == "ScheduledEvents"]
    assert all(e.properties["Phase"] == "FirstSeen" and e.properties["EventType"] == "Freeze" for e in recs)
    assert len({e.partition_id for e in w.eh.events}) == 1


def test_event_hubs_missing_data_sender_role_is_named(w, agents, tmp_path):
    w.eh.allowed_subjects = frozenset({"someone-else"})
    cfg = w.agent_config(tmp_path / "state", sinks={"event_hubs": w.eh_section()})
    agent = agents(cfg)
    line = agent.wait_log("Event Hubs refused the identity", timeout=20)
    assert line["role"] == "Azure Event Hubs Data Sender" and line["hub"] == HUB
    assert w.eh.events == []


def test_both_sinks_one_down_the_other_keeps_delivering(w, agents, tmp_path):
    cfg = w.agent_config(tmp_path / "state", sinks={"log_analytics": w.la_section(),
                                                    "event_hubs": w.eh_section()})
    agents(cfg)
    wait_until(lambda: w.la.records(HEARTBEATS) and w.eh.events, 20, what="start heartbeats in both")
    w.eh.reject_next(100_000)  # Event Hubs down
    events = new_ids(8)
    w.publish_events(events)
    wait_until(lambda: has_all(la_ids(w), expected(w, events)), 15, what="Log Analytics delivering")
    status = wait_until(lambda: (s := _status(tmp_path / "state")) and s["sinks"]["event_hubs"]["last_error"]
                        and s["sinks"]["event_hubs"]["spool_depth"] > 0 and s, 15,
                        what="the EH backlog and error in status.json")
    assert "server-busy" in status["sinks"]["event_hubs"]["last_error"]
    assert status["sinks"]["log_analytics"]["last_error"] is None
    assert eh_ids(w) == []
    more = new_ids(4)
    w.publish_events(events + more)  # LA keeps going while EH is still down
    wait_until(lambda: has_all(la_ids(w), expected(w, events + more)), 15, what="LA still delivering")
    w.eh.clear_faults()  # Event Hubs is back: it catches up, in order
    want = [record_id(vm_key(w), e, "FirstSeen") for e in events + more]
    wait_until(lambda: has_all(eh_ids(w), set(want)), 40, what="Event Hubs caught up")
    got = [i for i in eh_ids(w)]
    assert [i for i in dict.fromkeys(got)] == want


def _status(state_dir: Path) -> dict | None:
    try:
        return json.loads((state_dir / "status.json").read_text())
    except (OSError, ValueError):
        return None


# -- no Azure SDK without an Azure sink ---------------------------------------------------------


def _imports_of_agent(w: AzureWorld, tmp_path: Path, sinks: dict) -> set[str]:
    """Run the agent under ``python -X importtime`` for a few polls; the modules it imported."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    cfg = w.agent_config(tmp_path / "state", sinks=sinks)
    proc = subprocess.Popen([sys.executable, "-X", "importtime", AGENT, "run", "--config", str(cfg)],
                            env=w.agent_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True)
    try:
        wait_until(lambda: (tmp_path / "state" / "status.json").exists(), 20, what="the agent running")
        time.sleep(0.5)  # a few polls and deliveries
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err[-2000:]
    return {line.rsplit("|", 1)[1].strip() for line in err.splitlines() if line.startswith("import time:")
            and "|" in line}


def test_the_file_sink_alone_never_imports_the_azure_sdks(w, tmp_path):
    mods = _imports_of_agent(w, tmp_path / "file", {"file": {"path": str(tmp_path / "records.jsonl")}})
    assert "se_forwarder.agent" in mods and "se_forwarder.sinks.file" in mods
    assert not [m for m in mods if m == "azure" or m.startswith("azure.")]
    assert "se_forwarder.sinks.credential" not in mods
    # the same probe sees them when an Azure sink is configured (the check can fail)
    mods = _imports_of_agent(w, tmp_path / "la", {"log_analytics": w.la_section()})
    assert "azure.monitor.ingestion" in mods and "se_forwarder.sinks.log_analytics" in mods
    assert "se_forwarder.sinks.credential" in mods
