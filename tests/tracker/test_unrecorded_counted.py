"""What a document serves that makes no record is logged and counted once (issue 18: every path
that discards logs it and counts it where ``status`` and the heartbeat show it): an event that
reappears after its Removed, and one changed under an incarnation already considered, count in
``malformed_events`` once per (EventId, incarnation), however often the body changes meanwhile."""

from __future__ import annotations

import logging

from se_forwarder.model import VmIdentity
from se_forwarder.outbox import Store
from se_forwarder.recording.recorder import Recorder

VM = VmIdentity(VmName="vm0")
T0 = 1_709_287_200_000  # 2024-03-01T10:00:00.000Z
S = 1000

REAPPEARED = "event reappeared after it was removed; ignored"
CHANGED = (
    "event changed under an incarnation already seen; no Updated record (its RecordId is taken)"
)


def ev(eid: str, **kw: object) -> dict:
    return {
        "EventId": eid,
        "EventStatus": "Scheduled",
        "EventType": "Freeze",
        "ResourceType": "VirtualMachine",
        "Resources": ["vm0"],
        "NotBefore": "Fri, 01 Mar 2024 10:15:00 GMT",
        "Description": "d",
        "EventSource": "Platform",
        "DurationInSeconds": 5,
        **kw,
    }


def test_events_that_make_no_record_are_counted_once_per_incarnation(tmp_path, caplog):
    store = Store(tmp_path, durable=False)
    store.register_sinks(["s"])
    r = Recorder(store, VM)
    caplog.set_level(logging.WARNING, logger="se_forwarder")
    steps = [
        (1, [ev("e1"), ev("e2")]),  # FirstSeen e1, e2
        (2, [ev("e2")]),  # e1 Removed
        (3, [ev("e1"), ev("e2")]),  # e1 reappears: no record
        (3, [ev("e1"), ev("e2", Description="other")]),  # e2 changed under 3: no Updated
        (3, [ev("e1"), ev("e2", Description="third")]),  # both again under 3: said
        (4, [ev("e1"), ev("e2", Description="third")]),  # e1 again, under a new one
    ]
    made = []
    for i, (inc, events) in enumerate(steps):
        made += r.answer(
            T0 + i * S, 200, {"DocumentIncarnation": inc, "Events": events}, parsed=True
        )
    assert [(x.Phase, x.EventId) for x in made] == [
        ("FirstSeen", "e1"),
        ("FirstSeen", "e2"),
        ("Removed", "e1"),
    ]
    said = [
        (m.getMessage(), m.fields["EventId"], m.fields["DocumentIncarnation"])
        for m in caplog.records
        if m.getMessage() in (REAPPEARED, CHANGED)
    ]
    assert said == [(REAPPEARED, "e1", 3), (CHANGED, "e2", 3), (REAPPEARED, "e1", 4)]
    assert r.stats.malformed_events == 3
    store.close()
