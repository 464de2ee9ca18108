"""Property-based checks of the lifecycle records over random document sequences (events
appearing, changing, starting, disappearing; incarnations repeating and going backwards; bad
observations; random gaps; approvals; agent restarts), through the real Recorder and Store.

The expected FirstSeen/Started/Removed records, their Outcome and UncertaintySeconds come from a
small model written straight from record-contract.md §2, not from the implementation.
"""

from __future__ import annotations

import io
import json
from collections import Counter, defaultdict
from datetime import timedelta
from email.utils import format_datetime

from helpers.traces import BASE, iso, write_trace
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from se_forwarder import tracefile as trace_mod
from se_forwarder.commands import replay as replay_mod
from se_forwarder.model import VmIdentity
from se_forwarder.outbox import Store
from se_forwarder.recording.recorder import Recorder
from se_forwarder.timefmt import format_ms, parse_iso_ms, parse_not_before_ms

VM = VmIdentity(VmName="vm0")
BASE_MS = parse_iso_ms("2024-03-01T10:00:00Z")
EIDS = ["e0", "E1", "e2", "e3"]
# NotBefore as served: "" (started), RFC 1123, and one instant also in ISO 8601 (same time,
# other format: not a change)
NB_SECONDS = [0, 600, 900, 1800, 3600]
NOT_BEFORE = (
    [""]
    + [format_datetime(BASE + timedelta(seconds=s), usegmt=True) for s in NB_SECONDS]
    + ["2024-03-01T10:15:00Z"]
)
NB_MS = {
    "": None,
    **{v: BASE_MS + s * 1000 for v, s in zip(NOT_BEFORE[1:], NB_SECONDS, strict=False)},
    "2024-03-01T10:15:00Z": BASE_MS + 900_000,
}

BAD = [
    {"error": "timeout"},
    {"status": 500, "text": "Internal Server Error"},
    {"status": 200, "text": ""},
    {"status": 200, "text": '{"DocumentIncarnation": 1,'},
    {"status": 200, "body": []},
    {"status": 200, "body": {"DocumentIncarnation": 1}},
    {"status": 200, "body": {"DocumentIncarnation": 1, "Events": {"EventId": "e0"}}},
    {"status": 429, "body": {"DocumentIncarnation": 9, "Events": []}},
    {"status": 200, "body": {"DocumentIncarnation": "x", "Events": []}},
    {"status": 200, "body": {"DocumentIncarnation": True, "Events": []}},  # == 1 in Python
]

# "soon" and 5.0: a malformed event (record-contract §1: held, nothing changes for its EventId)
event_st = st.builds(
    lambda eid, status, nb, dur, res, etype: {
        "EventId": eid,
        "EventStatus": status,
        "EventType": etype,
        "ResourceType": "VirtualMachine",
        "Resources": res,
        "NotBefore": nb,
        "EventSource": "Platform",
        "DurationInSeconds": dur,
    },
    st.sampled_from(EIDS),
    st.sampled_from(["Scheduled", "Scheduled", "Started"]),
    st.sampled_from(NOT_BEFORE),
    st.sampled_from([-1, 5, -1, 5, "soon", 5.0]),
    st.sampled_from([["vm0"], ["vm1"], ["VM0", "vm2"]]),
    st.sampled_from(["Freeze", "Reboot"]),
)
doc_st = st.builds(
    lambda inc, evs: {"DocumentIncarnation": inc, "Events": evs},
    st.integers(0, 5),
    st.lists(event_st, max_size=4, unique_by=lambda e: e["EventId"]),
)
gap_st = st.one_of(
    st.integers(1, 5_000), st.just(60_000), st.just(60_001), st.integers(60_001, 900_000)
)
action_st = st.one_of(
    st.tuples(st.just("doc"), doc_st),
    st.tuples(st.just("doc"), doc_st),
    st.tuples(st.just("same"), st.none()),
    st.tuples(st.just("bad"), st.sampled_from(range(len(BAD)))),
)
steps_st = st.lists(st.tuples(gap_st, action_st), min_size=1, max_size=25)
approve_or_restart = st.tuples(st.sampled_from(["approve", "restart"]), st.sampled_from(EIDS))
steps_with_extras_st = st.lists(
    st.tuples(gap_st, st.one_of(action_st, approve_or_restart)), min_size=1, max_size=25
)

PROPS = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


def timeline(steps):
    """Resolve "same" and times: [(at_ms, kind, payload)], kind in doc/bad/approve/restart."""
    out, at, last_doc = [], BASE_MS, None
    for gap, step in steps:
        kind, arg = step
        at += gap
        if kind == "same":
            if last_doc is None:
                continue
            kind, arg = "doc", last_doc
        if kind == "doc":
            last_doc = arg
        out.append((at, kind, arg))
    return out


def to_trace(tl):
    lines = []
    for at, kind, arg in tl:
        stamp = iso((at - BASE_MS) / 1000)
        if kind == "doc":
            lines.append({"at": stamp, "status": 200, "body": arg})
        elif kind == "bad":
            lines.append({"at": stamp, **BAD[arg]})
        elif kind == "restart":
            lines += [{"at": stamp, "agent": "stop"}, {"at": stamp, "agent": "start"}]
    return lines


def replay_trace(lines, tmp, name):
    path = write_trace(tmp / f"{name}.jsonl", lines)
    out = io.StringIO()
    state = tmp / f"{name}.state"
    replay_mod.replay(trace_mod.read(path), str(state), "vm0", out)
    return out.getvalue()


def drive(tl, state_dir):
    """The agent loop in miniature, with approvals: the same Recorder/Store calls as replay."""
    out = []

    def open_():
        return Recorder(Store(state_dir, durable=False), VM, on_records=out.extend)

    rec = open_()
    for at, kind, arg in tl:
        if kind == "doc":
            rec.answer(at, 200, arg, parsed=True)
        elif kind == "bad":
            bad = BAD[arg]
            if "error" in bad:
                rec.bad(at, bad["error"])
            elif "text" in bad:
                rec.answer(at, bad["status"], bad["text"])
            else:
                rec.answer(at, bad["status"], bad["body"], parsed=True)
        elif kind == "approve":
            rec.approved(at, [arg])
        else:
            rec.checkpoint()
            rec.store.close()
            rec = open_()
    rec.store.close()
    return [r.as_dict() for r in out]


def well_formed(e: dict) -> bool:
    return type(e["DurationInSeconds"]) is int


def split(doc: dict) -> tuple[list[dict], set[str]]:
    """A document's well-formed events (in order) and the EventIds it served malformed."""
    return (
        [e for e in doc["Events"] if well_formed(e)],
        {e["EventId"] for e in doc["Events"] if not well_formed(e)},
    )


def model(tl):
    """FirstSeen/Started/Removed/Approved per the contract, from the successful polls alone."""
    polls = []  # (at, {eid: event}, restarted_since_previous_poll, ordered, held)
    restarted = False
    for at, kind, arg in tl:
        if kind == "restart":
            restarted = True
        elif kind == "doc":
            good, held = split(arg)
            polls.append((at, {e["EventId"]: e for e in good}, restarted, good, held))
            restarted = False
    expected = []  # (at, Phase, EventId, Outcome, UncertaintySeconds)
    state = {}  # eid -> "open" / "started" / "gone"
    for i, (at, events, restarted, ordered, held) in enumerate(polls):
        unc = None if i == 0 else (at - polls[i - 1][0]) / 1000
        for e in ordered:
            eid = e["EventId"]
            if eid not in state:
                expected.append((at, "FirstSeen", eid, None, unc))
                state[eid] = "open"
            if state[eid] == "open" and e["EventStatus"] == "Started":
                expected.append((at, "Started", eid, None, unc))
                state[eid] = "started"
        for eid, st_ in list(state.items()):
            if st_ in ("open", "started") and eid not in events and eid not in held:
                if st_ == "started":
                    outcome = "Completed"
                elif not restarted and at - polls[i - 1][0] <= 60_000:
                    outcome = "Cancelled"
                else:
                    outcome = "Unknown"
                expected.append((at, "Removed", eid, outcome, unc))
                state[eid] = "gone"
    return expected


def approvals(tl):
    """Approved: once per EventId, only while it is open (seen and not yet removed)."""
    out, approved, open_ = [], set(), set()
    gone = set()
    for at, kind, arg in tl:
        if kind == "doc":
            good, held = split(arg)
            present = {e["EventId"] for e in good}
            for eid in list(open_):
                if eid not in present | held:
                    open_.discard(eid)
                    gone.add(eid)
            open_ |= present - gone
        elif kind == "approve" and arg in open_ and arg not in approved:
            approved.add(arg)
            out.append((at, "Approved", arg))
    return out


def ms(text):
    return None if text is None else parse_iso_ms(text)


def ms_nb(e):
    """An event's NotBefore as the records write it (ISO, or null)."""
    nb = _nb(e)
    return None if nb is None else format_ms(nb)


CONTENT = (
    "EventStatus",
    "NotBefore",
    "DurationInSeconds",
    "Resources",
    "EventType",
    "Description",
    "EventSource",
)


def seen_in_documents(tl):
    """EventId -> [(at, event as served)] over the successful polls: what the agent last saw."""
    seen = defaultdict(list)
    for at, kind, arg in tl:
        if kind == "doc":
            for e in split(arg)[0]:
                seen[e["EventId"]].append((at, e))
    return seen


def _nb(e):
    try:
        return parse_not_before_ms(e["NotBefore"]) if e.get("NotBefore") else None
    except ValueError:
        return None


def check_invariants(records, tl):
    seen = seen_in_documents(tl)
    by_event = defaultdict(list)
    for r in records:
        by_event[r["EventId"]].append(r)
    ids = [r["RecordId"] for r in records]
    assert len(ids) == len(set(ids)), "RecordIds must be unique"
    updated_keys = Counter(
        (r["EventId"], r["DocumentIncarnation"]) for r in records if r["Phase"] == "Updated"
    )
    assert all(n == 1 for n in updated_keys.values()), updated_keys
    for eid, recs in by_event.items():
        count = Counter(r["Phase"] for r in recs)
        for phase in ("FirstSeen", "Started", "Removed", "Approved"):
            assert count[phase] <= 1, (eid, phase)
        assert recs[0]["Phase"] == "FirstSeen", (eid, [r["Phase"] for r in recs])
        if count["Removed"]:
            assert recs[-1]["Phase"] == "Removed"
        first = recs[0]
        started = next((r for r in recs if r["Phase"] == "Started"), None)
        for r in recs:
            tg = ms(r["TimeGenerated"])
            assert r["FirstSeenAt"] == first["TimeGenerated"]
            assert r["SinceFirstSeenSeconds"] == (tg - ms(r["FirstSeenAt"])) / 1000
            assert tg >= ms(first["TimeGenerated"])
            nb = ms(r["NotBefore"])
            if r["Phase"] in ("FirstSeen", "Updated"):
                assert r["NoticeSeconds"] == (None if nb is None else (nb - tg) / 1000)
            else:
                assert r["NoticeSeconds"] is None
            # What the agent saw of this event before this poll, and at it (every document counts,
            # also one whose incarnation was already considered).
            before = [e for at, e in seen[eid] if at < tg]
            upto = before + [e for at, e in seen[eid] if at == tg]
            if r["Phase"] == "Started":
                nbs = [_nb(e) for e in upto if _nb(e) is not None]
                last_nb = nbs[-1] if nbs else None
                assert r["StartedAt"] == r["TimeGenerated"]
                assert r["StartDelaySeconds"] == (
                    None if last_nb is None else (tg - last_nb) / 1000
                )
            else:
                assert r["StartDelaySeconds"] is None
            after_start = started is not None and (
                r is started or recs.index(r) > recs.index(started)
            )
            assert r["StartedAt"] == (started["TimeGenerated"] if after_start else None)
            if r["Phase"] == "Removed":
                assert r["SinceStartedSeconds"] == (
                    None if started is None else (tg - ms(started["TimeGenerated"])) / 1000
                )
                assert (
                    r["Outcome"] == "Completed"
                    if started
                    else r["Outcome"] in ("Cancelled", "Unknown")
                )
                assert r["EventStatus"] == before[-1]["EventStatus"]  # the last status seen
            else:
                assert r["SinceStartedSeconds"] is None and r["Outcome"] is None
            if r["Phase"] == "Updated":  # a real change of content (or status), nothing else
                last = before[-1]
                assert any(
                    r[k] != (ms_nb(last) if k == "NotBefore" else last.get(k)) for k in CONTENT
                ), (last, r)
            if r["Phase"] == "Approved":
                assert r["UncertaintySeconds"] == 0.0
            assert r["AffectsThisVm"] == any(x.lstrip("_").lower() == "vm0" for x in r["Resources"])


@PROPS
@given(steps_with_extras_st)
def test_records_follow_the_contract(tmp_path_factory, steps):
    tl = timeline(steps)
    records = drive(tl, tmp_path_factory.mktemp("p"))
    check_invariants(records, tl)
    core = [
        (ms(r["TimeGenerated"]), r["Phase"], r["EventId"], r["Outcome"], r["UncertaintySeconds"])
        for r in records
        if r["Phase"] in ("FirstSeen", "Started", "Removed")
    ]
    assert core == model(tl)
    assert [
        (ms(r["TimeGenerated"]), r["Phase"], r["EventId"])
        for r in records
        if r["Phase"] == "Approved"
    ] == approvals(tl)
    # one poll's records: present events in document order (FirstSeen, Updated, Started for one
    # event in that order), then the removals
    docs = {at: [e["EventId"] for e in arg["Events"]] for at, kind, arg in tl if kind == "doc"}
    by_poll = defaultdict(list)
    for r in records:
        if r["Phase"] != "Approved":
            by_poll[ms(r["TimeGenerated"])].append(r)
    rank = {"FirstSeen": 0, "Updated": 1, "Started": 2}
    for at, recs in by_poll.items():
        present = [r for r in recs if r["Phase"] != "Removed"]
        assert recs[: len(present)] == present
        keys = [(docs[at].index(r["EventId"]), rank[r["Phase"]]) for r in present]
        assert keys == sorted(keys) and len(set(keys)) == len(keys)


@PROPS
@given(steps_st, st.data())
def test_restarts_anywhere_change_no_record_id(tmp_path_factory, steps, data):
    tmp = tmp_path_factory.mktemp("r")
    tl = timeline(steps)
    base = replay_trace(to_trace(tl), tmp, "base")
    assert replay_trace(to_trace(tl), tmp, "again") == base  # deterministic, fresh state each time
    points = data.draw(st.sets(st.integers(0, len(tl)), max_size=4), label="restart before")
    restarted_tl = []
    for i, item in enumerate([*tl, None]):
        if i in points:
            at = tl[i - 1][0] if i else BASE_MS
            restarted_tl.append((at, "restart", None))
        if item is not None:
            restarted_tl.append(item)
    other = replay_trace(to_trace(restarted_tl), tmp, "restarted")
    a = [json.loads(x) for x in base.splitlines()]
    b = [json.loads(x) for x in other.splitlines()]
    assert {r["RecordId"] for r in a} == {r["RecordId"] for r in b}
    assert len({r["RecordId"] for r in b}) == len(b)
    # the very same records, except a removal that now spans a restart may be Unknown
    for x, y in zip(a, b, strict=False):
        if x["Outcome"] != y["Outcome"]:
            assert (x["Outcome"], y["Outcome"]) == ("Cancelled", "Unknown")
            assert dict(x, Outcome=None) == dict(y, Outcome=None)
        else:
            assert x == y
    assert len(a) == len(b)
    check_invariants(b, restarted_tl)
    assert [
        (ms(r["TimeGenerated"]), r["Phase"], r["EventId"], r["Outcome"])
        for r in b
        if r["Phase"] != "Updated"
    ] == [m[:4] for m in model(restarted_tl)]
