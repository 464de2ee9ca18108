"""The agent delivering to Azure: the agent in this process on the FakeClock, the IMDS simulator
(scheduled events, instance document, managed-identity tokens) and the Logs Ingestion / Event
Hubs stand-ins; the agent talks to them through the real Azure SDKs over TLS, trusting the
stand-ins' CA. Faults are injected in the stand-ins; retries, Retry-After, linger and heartbeats
run on fake time (a request the SDK makes still takes its real time, and fake time waits for
it). kill -9 during a batch, and what the agent imports: test_e2e_delivery.py."""

from __future__ import annotations

import json
import threading
from collections import Counter
from pathlib import Path

import pytest
from helpers.agentrun import AgentRun
from helpers.azure import (
    HEARTBEATS,
    HUB,
    RECORDS,
    AzureWorld,
    eh_ids,
    expected,
    has_all,
    la_ids,
    new_ids,
    vm_key,
)

from se_forwarder.model import record_id

pytestmark = [pytest.mark.e2e, pytest.mark.tls]


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    with AzureWorld(tmp_path_factory.mktemp("agent-delivery"), rate_limit=None) as w:
        yield w


@pytest.fixture
def agents(w, clock):
    started: list[AgentRun] = []

    def start(config: Path) -> AgentRun:
        a = AgentRun(config, clock)
        started.append(a)
        return a

    yield start
    for a in started:
        if a.alive:
            a.stop()


def until(agent: AgentRun, check, seconds: float, what: str):
    """Run the clock until ``check()`` is truthy (at most ``seconds`` fake seconds)."""
    assert agent.wait_for(lambda _a: check(), seconds), f"timed out waiting for {what}"
    return check()


# -- Log Analytics ----------------------------------------------------------------------------


def test_log_analytics_through_every_fault(w, agents, tmp_path):
    """Records and heartbeats reach Log Analytics through 429 (with and without Retry-After),
    500, 503, 413, dropped connections and slow answers; nothing is lost, order is kept."""
    cfg = w.agent_config(tmp_path / "state", sinks={"log_analytics": w.la_section()})
    agent = agents(cfg)
    until(agent, lambda: w.la.records(HEARTBEATS), 5, "the start heartbeat")
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
        until(
            agent,
            lambda ids=tuple(all_ids): has_all(la_ids(w), expected(w, ids)),
            120,
            f"records after {name}",
        )
    statuses = Counter(h.status for h in w.la.history())
    assert statuses[429] == 3 and statuses[500] == 1 and statuses[503] == 2
    assert statuses[413] == 1 and statuses[0] == 1  # dropped

    w.sim.set_events([])  # every event removed: Removed records
    want = expected(w, all_ids, ("FirstSeen", "Removed"))
    until(agent, lambda: has_all(la_ids(w), want), 60, "Removed records")
    got = la_ids(w)
    dups = [k for k, n in Counter(got).items() if n > 1]
    # only the slow answer's batch may repeat (its confirmation was lost), with the same RecordId
    assert len(dups) <= 6 and set(got) == want
    # in order per VM: every FirstSeen arrives before any Removed (first occurrences)
    first = {k: got.index(k) for k in set(got)}
    assert max(first[record_id(vm_key(w), e, "FirstSeen")] for e in all_ids) < min(
        first[record_id(vm_key(w), e, "Removed")] for e in all_ids
    )
    assert agent.logged("delivery failed; will retry")
    assert agent.stop() == 0
    assert any(h["Reason"] == "stop" for h in w.la.records(HEARTBEATS))  # drained at stop


def test_long_outage_reaches_the_spool_bound_then_recovers_in_order(w, agents, tmp_path, clock):
    cfg = w.agent_config(
        tmp_path / "state",
        sinks={"log_analytics": w.la_section()},
        spool_max_bytes=24_000,
        heartbeat_interval=1.5,
    )
    agent = agents(cfg)
    until(agent, lambda: w.la.records(HEARTBEATS), 5, "the start heartbeat")
    w.la.fail_next(None, 503, retry_after=1)  # the outage: every request refused
    events = new_ids(60)  # ~65 KB of records: well over the 24 KB bound
    for i in range(0, 60, 10):
        w.publish_events(events[: i + 10])
        clock.advance(0.3)
    line = agent.wait_log("spool bound reached", timeout=20)
    # removed from the spool; lost: counted now; sending: in the worker's hands (lost only if the
    # service does not confirm them)
    assert line["level"] == "error" and line["removed"] == line["dropped"] + line["sending"] > 0
    assert all(
        h.status == 503 for h in w.la.history() if h.stream == RECORDS
    )  # nothing got through
    w.la.clear_faults()  # the service is back

    produced = [record_id(vm_key(w), e, "FirstSeen") for e in events]
    until(agent, lambda: la_ids(w) and la_ids(w)[-1] == produced[-1], 60, "the backlog drained")
    got = la_ids(w)
    dropped = sum(e["dropped"] for e in agent.logged("spool bound reached")) + sum(
        e["records"] for e in agent.logged("records dropped by the spool bound while being sent")
    )
    order = [produced.index(g) for g in got]
    assert order == sorted(set(order))  # in the order produced, none twice
    missing = [i for i in range(60) if i not in set(order)]
    # nothing lost beyond what was counted and logged (records and heartbeats); what was lost is
    # the oldest part of the spool (the batch the worker was retrying went out: not counted)
    assert 0 < len(missing) <= dropped
    assert all(i in set(order) for i in range(max(missing) + 1, 60))
    # The drop count reaches Log Analytics in a heartbeat (every drop, by a record or by a
    # heartbeat commit, is also logged).
    hb = until(
        agent,
        lambda: [h for h in w.la.records(HEARTBEATS) if h["DroppedRecords"] >= dropped],
        10,
        "the drop count in a heartbeat",
    )
    assert hb[-1]["DroppedRecords"] >= len(missing)


def test_a_value_over_the_field_limit_is_cut_counted_and_delivered(w, agents, tmp_path, clock):
    """A 70 KB Description (Logs Ingestion keeps at most 64 KB per value): cut at the edge, said
    in the log and in the heartbeat, and the record delivered with the rest: nothing blocked."""
    cfg = w.agent_config(tmp_path / "state", sinks={"log_analytics": w.la_section()})
    agent = agents(cfg)
    big, small = new_ids(1), new_ids(3)
    w.sim.set_events(
        [
            {
                "EventId": big[0],
                "EventType": "Freeze",
                "Resources": ["sim-vm"],
                "NotBefore": clock.wall_seconds() + 600,
                "Description": "d" * (70 * 1024),
            }
        ]
    )
    agent.wait_log("values over the size limit were truncated", timeout=5)
    w.publish_events(small)
    until(agent, lambda: has_all(la_ids(w), expected(w, small)), 20, "later records")
    [first] = [
        r for r in w.la.records(RECORDS) if r["EventId"] == big[0] and r["Phase"] == "FirstSeen"
    ]
    assert "truncated" in first["Description"] and len(first["Description"]) < 64 * 1024
    assert not (tmp_path / "state" / "dead-letter.jsonl").exists()
    assert agent.stop() == 0
    beats = w.la.records(HEARTBEATS)
    assert max(h["TruncatedValues"] for h in beats) >= 1


def test_wrong_credentials_say_which_role_is_missing_and_recover(w, agents, tmp_path):
    """No Monitoring Metrics Publisher: an error line naming it, nothing lost; granted:
    delivered."""
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
    # retried on the slow schedule (at most a minute apart): delivered within two
    until(agent, lambda: has_all(la_ids(w), expected(w, events)), 120, "delivery after the grant")


def test_an_unknown_managed_identity_is_reported(w, agents, tmp_path):
    cfg = w.agent_config(
        tmp_path / "state",
        sinks={"log_analytics": w.la_section()},
        identity={"kind": "managed", "client_id": "00000000-dead-beef-0000-000000000000"},
    )
    agent = agents(cfg)
    line = agent.wait_log("Log Analytics: no access token", timeout=20)
    assert "00000000-dead-beef-0000-000000000000" in line["error"]
    assert w.la.history() == []


# -- Event Hubs -------------------------------------------------------------------------------


def test_event_hubs_through_rejections_drops_and_slowness(w, agents, tmp_path):
    cfg = w.agent_config(tmp_path / "state", sinks={"event_hubs": w.eh_section()})
    agent = agents(cfg)
    until(agent, lambda: w.eh.events, 5, "the start heartbeat")
    hb = w.eh.events[0]
    assert (
        hb.properties == {"Table": "ScheduledEventsAgent"}
        and json.loads(hb.body)["Reason"] == "start"
    )
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
        if name == "slow acceptance":  # for 4.5 real seconds: a send outlasts its 3 s timeout
            threading.Timer(4.5, w.eh.clear_faults).start()
        until(
            agent,
            lambda ids=tuple(all_ids): has_all(eh_ids(w), expected(w, ids)),
            120,
            f"events after {name}",
        )
    assert w.eh.stats["rejected"] >= 4 and w.eh.stats["dropped_connections"] >= 3
    for e in w.eh.events:
        assert e.partition_key == vm_key(w) and e.content_type == "application/json"
    recs = [e for e in w.eh.events if e.properties.get("Table") == "ScheduledEvents"]
    assert all(
        e.properties["Phase"] == "FirstSeen" and e.properties["EventType"] == "Freeze" for e in recs
    )
    assert len({e.partition_id for e in w.eh.events}) == 1


def test_event_hubs_missing_data_sender_role_is_named(w, agents, tmp_path):
    w.eh.allowed_subjects = frozenset({"someone-else"})
    cfg = w.agent_config(tmp_path / "state", sinks={"event_hubs": w.eh_section()})
    agent = agents(cfg)
    line = agent.wait_log("Event Hubs refused the identity", timeout=20)
    assert line["role"] == "Azure Event Hubs Data Sender" and line["hub"] == HUB
    assert w.eh.events == []


def test_both_sinks_one_down_the_other_keeps_delivering(w, agents, tmp_path):
    cfg = w.agent_config(
        tmp_path / "state", sinks={"log_analytics": w.la_section(), "event_hubs": w.eh_section()}
    )
    agent = agents(cfg)
    until(agent, lambda: w.la.records(HEARTBEATS) and w.eh.events, 5, "start heartbeats in both")
    w.eh.reject_next(100_000)  # Event Hubs down
    events = new_ids(8)
    w.publish_events(events)
    until(agent, lambda: has_all(la_ids(w), expected(w, events)), 15, "Log Analytics delivering")

    def eh_backlog() -> dict | None:
        s = agent.status_json()
        eh = s["sinks"]["event_hubs"]
        return s if eh["last_error"] and eh["spool_depth"] > 0 else None

    status = until(agent, eh_backlog, 15, "the EH backlog and error in status.json")
    assert "server-busy" in status["sinks"]["event_hubs"]["last_error"]
    assert status["sinks"]["log_analytics"]["last_error"] is None
    assert eh_ids(w) == []
    more = new_ids(4)
    w.publish_events(events + more)  # LA keeps going while EH is still down
    until(agent, lambda: has_all(la_ids(w), expected(w, events + more)), 15, "LA still delivering")
    w.eh.clear_faults()  # Event Hubs is back: it catches up, in order
    want = [record_id(vm_key(w), e, "FirstSeen") for e in events + more]
    until(agent, lambda: has_all(eh_ids(w), set(want)), 120, "Event Hubs caught up")
    assert list(dict.fromkeys(eh_ids(w))) == want
