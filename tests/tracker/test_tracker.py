"""The tracker as a pure function (record-contract.md §2): example-based checks of what the trace
files cannot reach (Approved, purity, persistence form, RecordIds, anomalies)."""

from __future__ import annotations

import json

import pytest

from se_forwarder import tracker
from se_forwarder.imds.parse import parse_json
from se_forwarder.model import VmIdentity, record_id
from se_forwarder.outbox import Store
from se_forwarder.recording.recorder import Recorder

VM = VmIdentity(VmName="vm0")
T0 = 1_709_287_200_000  # 2024-03-01T10:00:00.000Z
S = 1000


def ev(eid="e1", status="Scheduled", nb="Fri, 01 Mar 2024 10:15:00 GMT", **kw):
    e = {
        "EventId": eid,
        "EventStatus": status,
        "EventType": kw.pop("etype", "Freeze"),
        "ResourceType": "VirtualMachine",
        "Resources": kw.pop("resources", ["vm0"]),
        "NotBefore": nb,
        "Description": "d",
        "EventSource": "Platform",
        "DurationInSeconds": 5,
    }
    e.update(kw)
    return e


def doc(inc, *events):
    return parse_json({"DocumentIncarnation": inc, "Events": list(events)})


def run(steps, state=None, vm=VM):
    """Feed (seconds, document) pairs; return (state, [records])."""
    state = state or tracker.TrackerState()
    out = []
    for sec, d in steps:
        obs = tracker.observe(state, T0 + sec * S, d, vm)
        state = obs.state
        out += obs.records
    return state, out


def phases(records):
    return [(r.Phase, r.EventId) for r in records]


# -- purity ---------------------------------------------------------------------------------


def test_observe_is_pure_and_repeatable():
    state, _ = run([(0, doc(1, ev()))])
    before = json.dumps(tracker.state_to_json(state), sort_keys=True)
    d = doc(2, ev(status="Started", nb=""))
    a = tracker.observe(state, T0 + 5 * S, d, VM)
    b = tracker.observe(state, T0 + 5 * S, d, VM)
    assert json.dumps(tracker.state_to_json(state), sort_keys=True) == before  # input untouched
    assert a.records == b.records and a.state == b.state
    assert phases(a.records) == [("Started", "e1")]


def test_identical_document_is_nothing_but_moves_the_poll_time():
    state, _ = run([(0, doc(1, ev()))])
    obs = tracker.observe(state, T0 + 7 * S, doc(1, ev()), VM)
    assert obs.records == [] and not obs.changed
    assert obs.state.last_ok_ms == T0 + 7 * S
    assert obs.state.events == state.events


# -- Outcome --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "gap_ms,restart,outcome",
    [
        (1, False, "Cancelled"),
        (60_000, False, "Cancelled"),
        (60_001, False, "Unknown"),
        (1, True, "Unknown"),
    ],
)
def test_removed_outcome_for_a_never_started_event(gap_ms, restart, outcome):
    state, _ = run([(0, doc(1, ev()))])
    if restart:
        state = tracker.restarted(state)
    obs = tracker.observe(state, T0 + gap_ms, doc(2), VM)
    (r,) = obs.records
    assert (r.Phase, r.Outcome, r.EventStatus) == ("Removed", outcome, "Scheduled")
    assert r.UncertaintySeconds == gap_ms / 1000
    assert r.SinceStartedSeconds is None and r.StartedAt is None


@pytest.mark.parametrize("restart", [False, True])
def test_removed_after_started_is_completed_whatever_the_gap(restart):
    state, _ = run([(0, doc(1, ev())), (10, doc(2, ev(status="Started", nb="")))])
    if restart:
        state = tracker.restarted(state)
    (r,) = tracker.observe(state, T0 + 4000 * S, doc(3), VM).records
    assert (r.Outcome, r.SinceStartedSeconds, r.EventStatus) == ("Completed", 3990.0, "Started")


def test_a_poll_after_restart_makes_the_run_the_same_again():
    state, _ = run([(0, doc(1, ev()))])
    state = tracker.restarted(state)
    state = tracker.observe(state, T0 + 500 * S, doc(1, ev()), VM).state  # identical, after start
    (r,) = tracker.observe(state, T0 + 510 * S, doc(2), VM).records
    assert r.Outcome == "Cancelled" and r.UncertaintySeconds == 10.0


# -- Started / Updated ------------------------------------------------------------------------


def test_started_is_not_lost_when_the_service_reuses_an_incarnation():
    # The service should bump the incarnation, but a reused one (or a counter gone backwards)
    # must not hide the first sight of Started: it is once per EventId, not per incarnation.
    _, recs = run([(0, doc(2, ev())), (1, doc(2, ev(status="Started", nb=""))), (2, doc(3))])
    assert [(r.Phase, r.Outcome) for r in recs] == [
        ("FirstSeen", None),
        ("Started", None),
        ("Removed", "Completed"),
    ]
    assert recs[1].StartDelaySeconds == 1.0 - 900.0


def test_content_change_under_the_same_incarnation_is_not_an_update():
    _, recs = run([(0, doc(2, ev())), (1, doc(2, ev(nb="Fri, 01 Mar 2024 10:30:00 GMT")))])
    assert phases(recs) == [("FirstSeen", "e1")]


def test_update_while_started():
    _, recs = run(
        [
            (0, doc(1, ev(status="Started", nb=""))),
            (5, doc(2, ev(status="Started", nb="", Description="now longer"))),
        ]
    )
    assert [r.Phase for r in recs] == ["FirstSeen", "Started", "Updated"]
    u = recs[2]
    assert (u.EventStatus, u.Description, u.NoticeSeconds, u.StartedAt) == (
        "Started",
        "now longer",
        None,
        "2024-03-01T10:00:00.000Z",
    )


@pytest.mark.parametrize(
    "change",
    [
        {"nb": "Fri, 01 Mar 2024 10:20:00 GMT"},
        {"DurationInSeconds": 9},
        {"resources": ["vm0", "vm1"]},
        {"etype": "Reboot"},
        {"Description": "other"},
        {"EventSource": "User"},
    ],
)
def test_each_content_field_counts_as_a_reschedule(change):
    _, recs = run([(0, doc(1, ev())), (1, doc(2, ev(**change)))])
    assert [r.Phase for r in recs] == ["FirstSeen", "Updated"]
    assert recs[1].DocumentIncarnation == 2


def test_resource_type_alone_is_not_an_update():
    _, recs = run([(0, doc(1, ev())), (1, doc(2, ev(ResourceType="Other")))])
    assert [r.Phase for r in recs] == ["FirstSeen"]


def test_unparseable_not_before_is_kept_raw_and_its_change_is_an_update():
    _, recs = run([(0, doc(1, ev(nb="next tuesday"))), (1, doc(2, ev(nb="next wednesday")))])
    assert [r.Phase for r in recs] == ["FirstSeen", "Updated"]
    assert all(r.NotBefore is None and r.NoticeSeconds is None for r in recs)


def test_first_seen_and_started_of_a_hardware_failure_share_the_poll():
    _, (f, s) = run([(3, doc(1, ev(status="Started", nb="")))])
    assert (f.Phase, s.Phase) == ("FirstSeen", "Started")
    assert f.TimeGenerated == s.TimeGenerated == f.FirstSeenAt == s.FirstSeenAt == s.StartedAt
    assert f.StartedAt is None  # FirstSeen comes first in the phase order: "null before that"
    assert s.StartDelaySeconds is None and f.UncertaintySeconds is None


def test_reappearing_event_after_removed_is_ignored():
    state, recs = run([(0, doc(1, ev())), (1, doc(2))])
    obs = tracker.observe(state, T0 + 2 * S, doc(3, ev(status="Started", nb="")), VM)
    assert obs.records == [] and obs.ignored == ("e1",)
    obs2 = tracker.observe(obs.state, T0 + 3 * S, doc(4), VM)
    assert obs2.records == []  # no second Removed
    assert phases(recs) == [("FirstSeen", "e1"), ("Removed", "e1")]


# -- RecordId -------------------------------------------------------------------------------


def test_record_ids_are_deterministic_and_keyed_by_vm_event_phase_and_update_incarnation():
    steps = [
        (0, doc(1, ev())),
        (1, doc(2, ev(DurationInSeconds=7))),
        (2, doc(3, ev(DurationInSeconds=8))),
        (3, doc(4, ev(status="Started", nb=""))),
        (4, doc(5)),
    ]
    _, a = run(steps)
    _, b = run([(s + 100, d) for s, d in steps])  # other times, same (VM, EventId, Phase[, inc])
    assert [r.RecordId for r in a] == [r.RecordId for r in b]
    assert len({r.RecordId for r in a}) == 5  # two Updated, different incarnations
    _, other = run(steps, vm=VmIdentity(VmName="vm1"))
    assert not {r.RecordId for r in a} & {r.RecordId for r in other}
    assert a[1].RecordId == record_id("vm0", "e1", "Updated", 2)
    assert record_id("vm0", "e1", "Started", 3) == record_id("vm0", "e1", "Started", 4)
    # VmId wins over the name when known (the same VM renamed keeps its ids)
    assert VmIdentity(VmName="x", VmId="id").key == VmIdentity(VmName="y", VmId="id").key


# -- Approved ---------------------------------------------------------------------------------


def test_approved_once_timed_exactly_and_only_for_open_events():
    state, _ = run([(0, doc(4, ev("e1"), ev("e2")))])
    obs = tracker.approved(state, T0 + 30 * S, ["e1", "nope"], VM)
    (r,) = obs.records
    assert (r.Phase, r.EventId, r.UncertaintySeconds, r.DocumentIncarnation) == (
        "Approved",
        "e1",
        0.0,
        4,
    )
    assert r.SinceFirstSeenSeconds == 30.0 and r.Outcome is None
    assert r.RecordId == record_id("vm0", "e1", "Approved")
    again = tracker.approved(obs.state, T0 + 31 * S, ["e1"], VM)
    assert again.records == [] and not again.changed
    # the approval survives the persistence round trip
    restored = tracker.state_from_json(json.loads(json.dumps(tracker.state_to_json(obs.state))))
    assert tracker.approved(restored, T0 + 32 * S, ["e1"], VM).records == []
    # and an event already removed cannot be approved
    gone = tracker.observe(obs.state, T0 + 40 * S, doc(5, ev("e1")), VM).state
    assert tracker.approved(gone, T0 + 41 * S, ["e2"], VM).records == []


def test_recorder_approved_is_committed_and_not_repeated_after_restart(tmp_path):
    body = {"DocumentIncarnation": 1, "Events": [ev()]}
    store = Store(tmp_path, durable=False)
    store.register_sinks(["s"])
    r = Recorder(store, VM)
    r.answer(T0, 200, body, parsed=True)
    assert [x.Phase for x in r.approved(T0 + S, ["e1"])] == ["Approved"]
    store.close()
    store = Store(tmp_path, durable=False)
    r = Recorder(store, VM)
    assert r.approved(T0 + 2 * S, ["e1"]) == []
    assert [json.loads(i.payload)["Phase"] for i in store.fetch("s", 10)] == [
        "FirstSeen",
        "Approved",
    ]
    store.close()


# -- persistence form -------------------------------------------------------------------------


def test_state_round_trips_through_json():
    state, _ = run(
        [
            (0, doc(1, ev("a"), ev("b", status="Started", nb=""))),
            (1, doc(2, ev("a", nb="garbage"))),
            (2, doc("3", ev("a", nb="garbage"))),
        ]
    )
    data = json.loads(json.dumps(tracker.state_to_json(state)))
    back = tracker.state_from_json(data)
    assert back == state
    assert tracker.state_from_json(data).restarted is False
    with pytest.raises(ValueError):
        tracker.state_from_json(dict(data, v=99))


def test_held_events_survive_a_restart_and_are_removed_when_gone():
    """A restart right after a document that served tracked events malformed must not take the
    next document (same incarnation, events gone) for the one already handled."""
    state, _ = run(
        [
            (0, doc(1, ev("a"), ev("b"))),
            (1, doc(3, ev("a", DurationInSeconds="soon"), ev("b", DurationInSeconds="soon"))),
        ]
    )
    assert state.last_doc.held == ("a", "b")
    data = json.loads(json.dumps(tracker.state_to_json(state)))
    back = tracker.restarted(tracker.state_from_json(data))
    assert back.last_doc == tracker.state_from_json(data).last_doc
    assert (back.last_doc.held, back.last_doc.complete) == (("a", "b"), True)
    _, out = run([(2, doc(3))], back)
    assert [(r.Phase, r.EventId, r.Outcome) for r in out] == [
        ("Removed", "a", "Unknown"),
        ("Removed", "b", "Unknown"),
    ]
    # a nameless malformed event keeps the document incomplete across the restart too
    state, _ = run([(0, doc(1, ev("a"))), (1, doc(2, ev("a"), {"EventStatus": "Scheduled"}))])
    back = tracker.state_from_json(json.loads(json.dumps(tracker.state_to_json(state))))
    assert back.last_doc.complete is False
    # states saved before held/complete were kept still read: nothing held
    data["last_doc"] = data["last_doc"][:2]
    old = tracker.state_from_json(data).last_doc
    assert (old.held, old.complete) == ((), True)


# -- the Recorder's "unchanged answer" shortcut --------------------------------------------------


@pytest.mark.parametrize("second", [None, b"", {"DocumentIncarnation": True, "Events": [ev()]}])
def test_a_bad_body_is_never_taken_for_the_last_good_one(tmp_path, second):
    good = {"DocumentIncarnation": 1, "Events": [ev()]}
    store = Store(tmp_path, durable=False)
    Recorder(store, VM).answer(T0, 200, json.dumps(good).encode())
    store.close()
    store = Store(tmp_path, durable=False)  # restarted: nothing remembered but the state
    r = Recorder(store, VM)
    r.answer(T0 + S, 200, second, parsed=isinstance(second, dict))
    assert (r.stats.poll_errors, r.state.last_ok_ms) == (1, T0)
    # a genuinely unchanged answer is cheap and moves the poll time
    r.answer(T0 + 2 * S, 200, json.dumps(good).encode())
    r.answer(T0 + 3 * S, 200, json.dumps(good).encode())
    assert (r.stats.poll_errors, r.state.last_ok_ms) == (1, T0 + 3 * S)
    store.close()


def test_a_reschedule_under_a_reused_incarnation_is_taken_in_without_an_updated():
    """Incarnations 5 -> 2 -> 5: the second (e1, 5) is not considered again (an Updated there
    would reuse that RecordId), but what it says is kept: the start delay uses the moved
    NotBefore, not a stale one."""
    state, _ = run(
        [
            (0, doc(5, ev(nb="Fri, 01 Mar 2024 10:15:00 GMT"))),
            (1, doc(2, ev(nb="Fri, 01 Mar 2024 10:15:00 GMT"))),
        ]
    )
    obs = tracker.observe(state, T0 + 2 * S, doc(5, ev(nb="Fri, 01 Mar 2024 10:30:00 GMT")), VM)
    assert obs.records == [] and obs.unrecorded == ("e1",)
    started = tracker.observe(obs.state, T0 + 31 * 60 * S, doc(6, ev(status="Started", nb="")), VM)
    [rec] = started.records
    assert rec.Phase == "Started"
    assert rec.StartDelaySeconds == 60.0  # 10:31 against the moved NotBefore 10:30, not 16 min
