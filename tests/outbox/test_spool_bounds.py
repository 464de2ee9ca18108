"""The state directory stays within ``spool.max_bytes`` (issue 18: 10,000 events with 4 KB
descriptions over six incarnations left a 497 MB state.db and a 502 MB write-ahead log against a
256 MB bound, never shrinking, and a 2 MB status.json). The database hands freed pages back, the
log is cut back, the tracker state is written once per event and bounded per document, and
status.json and the heartbeat list a bounded number of open events. The agent runs in this
process on the FakeClock; bench/spool_bounds.py runs the issue's full workload."""

from __future__ import annotations

import json

from se_forwarder import tracker
from se_forwarder.health import OpenEvent, Snapshot
from se_forwarder.imds.parse import MAX_EVENTS, parse_json
from se_forwarder.model import VmIdentity
from se_forwarder.outbox import space

VM = "vm-bound"
MB = 1024 * 1024


def events(n: int, incarnation: int, size: int = 4096) -> list[dict]:
    return [
        {
            "EventId": f"00000000-0000-0000-0000-{i:012d}",
            "EventType": "Freeze",
            "EventStatus": "Scheduled",
            "Resources": [VM],
            "DurationInSeconds": 5,
            "NotBefore": "Sun, 01 Mar 2026 11:00:00 GMT",
            "Description": f"incarnation {incarnation} event {i} " + "d" * size,
        }
        for i in range(n)
    ]


def sizes(state) -> dict[str, int]:
    return {
        name: (state / name).stat().st_size if (state / name).exists() else 0
        for name in ("state.db", "state.db-wal", "status.json")
    }


def test_the_state_directory_stays_near_the_bound_over_incarnations(simulator, agent_run, clock):
    sim = simulator(vm_name=VM, rate_limit=None, clock=clock)
    bound = 4 * MB
    agent = agent_run(sim.url, poll_interval=1.0, extra=f"\n[spool]\nmax_bytes = {bound}\n")
    worst = dict.fromkeys(("state.db", "state.db-wal", "status.json"), 0)
    for inc in range(5):  # 1,000 events of 4 KB a time: each incarnation ~4.5 MB of records
        want = sim.set_events(events(1000, inc))
        assert agent.wait_for(lambda a, w=want: a.status_json()["last_incarnation"] == w, 30)
        clock.advance(30)  # status.json rewritten, the space handed back between polls
        for name, size in sizes(agent.state_dir).items():
            worst[name] = max(worst[name], size)
    state_json = len(json.dumps(agent.agent.store.load("tracker"), separators=(",", ":")))
    assert state_json < 5 * MB  # one copy of each event (4.2 MB of events), not two
    assert agent.status_json()["dropped"] > 0  # the bound was reached
    # the rows within the bound, the tracker state and a little room: not their high-water mark
    assert worst["state.db"] <= bound * 1.25 + state_json + 2 * MB, worst
    assert worst["state.db-wal"] <= space.WAL_LIMIT_BYTES, worst
    assert worst["status.json"] <= 64 * 1024, worst
    assert agent.stop() == 0


def test_a_document_past_its_limits_is_taken_in_part_and_removes_nothing():
    doc = {"DocumentIncarnation": 3, "Events": events(MAX_EVENTS + 200, 1, size=10)}
    parsed = parse_json(doc)
    assert len(parsed.events) == MAX_EVENTS and parsed.excess == 200 and not parsed.complete
    big = {"DocumentIncarnation": 4, "Events": events(400, 1, size=30_000)}  # 12 MB of text
    parsed = parse_json(big)
    assert 100 < len(parsed.events) < 400 and parsed.excess == 400 - len(parsed.events)


def test_the_tracker_state_keeps_one_copy_of_each_event_and_reads_the_old_form():
    vm = VmIdentity(VmName=VM)
    doc = parse_json({"DocumentIncarnation": 1, "Events": events(50, 1)})
    state = tracker.observe(tracker.TrackerState(), 1_772_359_200_000, doc, vm).state
    text = json.dumps(tracker.state_to_json(state))
    assert len(text) < 1.2 * 50 * 4096  # the last document's events are references
    back = tracker.state_from_json(json.loads(text))
    assert back.last_doc == state.last_doc and back.events == state.events
    old = tracker.state_to_json(state)  # as version 1 wrote it: every view twice
    old["v"] = 1
    old["last_doc"][1] = [tracker.codec._view_to_list(v) for v in state.last_doc.events]
    assert tracker.state_from_json(old).last_doc == state.last_doc


def test_status_json_and_the_heartbeat_list_a_bounded_number_of_open_events():
    many = tuple(
        OpenEvent(
            f"E-{i:05d}",
            "Freeze",
            "Scheduled",
            "Platform",
            "2026-03-01T11:00:00.000Z",
            5,
            i % 2 == 0,
        )
        for i in range(5000)
    )
    snap = Snapshot(open_events=many)
    data = snap.to_json()
    assert len(data["open_events"]) == 20 and data["open_events_not_listed"] == 4980
    assert len(json.dumps(data)) < 16 * 1024
    hb = snap.heartbeat("periodic", VmIdentity(VmName=VM), "2026-03-01T10:00:00.000Z", "id")
    assert hb.OpenEvents == 5000 and len(hb.OpenEventList) == 20
    assert [e["EventId"] for e in hb.OpenEventList] == [f"E-{i:05d}" for i in range(20)]


def test_the_bound_counts_every_file_of_the_store(tmp_path):
    """The write-ahead log, its index and the page overhead count (it was the rows' bytes only:
    an 8 MiB bound took 13.6 MB on disk, 1.62 times, the log alone 4 MiB of it)."""
    from se_forwarder.outbox import OutboxRow, Store

    bound = 8 * MB
    store = Store(tmp_path, max_bytes=bound, durable=False)
    store.register_sinks(["la"])  # a sink that never confirms: the spool fills and stays full
    peak = 0
    for i in range(12_000):  # 1 KB records, one commit each, the compaction chore between
        payload = json.dumps({"RecordId": f"r{i}", "pad": "x" * 1000})
        store.commit("tracker", {"n": i}, [OutboxRow.raw("records", "vm", payload)])
        if i % 100 == 0:
            store.compact()
        if i % 10 == 0:
            peak = max(peak, sum(p.stat().st_size for p in tmp_path.glob("state.db*")))
    assert store.counter("dropped") > 0  # the bound was reached
    assert peak <= bound, f"{peak / bound:.2f} times the bound"
    assert store.spooled_bytes > bound * 0.5  # and most of it holds records, not room
    store.close()
