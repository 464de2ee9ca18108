"""A database damaged in the middle loses no record in silence (issue 18: the tracker state was
recovered but the outbox rows were not readable, so ten FirstSeen records that had not been
delivered were never sent again; the only sign was a critical log line). What the tracker state
says was emitted is sent again with the same RecordIds; what cannot be rebuilt is counted as lost
where ``status`` and the heartbeats show it. The agent runs in this process on the FakeClock."""

from __future__ import annotations

import json
import sqlite3

from se_forwarder import tracker
from se_forwarder.imds.parse import parse_json
from se_forwarder.model import VmIdentity
from se_forwarder.outbox.recovery import open_or_recover
from se_forwarder.recording.rebuild import rebuild

VM = "vm-damaged"


def events(clock, n: int = 10) -> list[dict]:
    return [
        {
            "EventId": f"D-{i:02d}",
            "EventType": "Freeze",
            "Resources": [VM],
            "NotBefore": clock.wall_seconds() + 900,
        }
        for i in range(n)
    ]


def damage_the_outbox(state) -> None:
    """Zero every page of the outbox table: the database opens, its other tables read, the
    outbox does not (``database disk image is malformed``), and no row is left on a page."""
    db = sqlite3.connect(state / "state.db")
    page_size = db.execute("PRAGMA page_size").fetchone()[0]
    outbox = [p for (p,) in db.execute("SELECT pageno FROM dbstat WHERE name = 'outbox'")]
    db.close()
    with (state / "state.db").open("r+b") as f:
        for page in outbox:
            f.seek((page - 1) * page_size)
            f.write(b"\0" * page_size)


def rows(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_records_a_damaged_outbox_lost_are_sent_again_and_the_rest_counted(
    simulator, agent_run, clock, tmp_path
):
    sim = simulator(vm_name=VM, rate_limit=None, clock=clock)
    state = tmp_path / "state"
    first = agent_run(sim.url, name="first", state_dir=state)  # no sink: nothing delivered
    sim.set_events(events(clock))
    assert first.wait_for(lambda a: len(a.records()) == 10, 10)
    ids = sorted(r["RecordId"] for r in first.records())
    assert first.stop() == 0  # 12 rows spooled: ten FirstSeen, the start and stop heartbeats
    damage_the_outbox(state)

    out, beats = tmp_path / "records.jsonl", tmp_path / "heartbeats.jsonl"
    second = agent_run(
        sim.url,
        name="second",
        state_dir=state,
        extra=f'[sinks.file]\npath = "{out}"\nheartbeat_path = "{beats}"\n',
    )
    [note] = [m["msg"] for m in second.lines if m["level"] == "critical"]
    assert "rebuilt 10 record(s)" in note and "2 record(s) lost" in note
    assert second.wait_for(lambda a: len(rows(out)) == 10, 20)
    got = rows(out)
    assert sorted(r["RecordId"] for r in got) == ids  # the same records, not new ones
    assert {r["Phase"] for r in got} == {"FirstSeen"}
    assert all(r["VmName"] == VM and r["AffectsThisVm"] is True for r in got)
    assert second.status_json()["lost"] == 2  # the two heartbeats: nothing could rebuild them
    assert "2 record(s) lost in a damaged state database" in second.verdict().warnings
    assert second.stop() == 0
    assert max(b["LostRecords"] for b in rows(beats)) == 2


def test_rows_read_back_are_not_rebuilt_and_a_known_count_bounds_the_loss():
    vm = VmIdentity(VmName=VM)
    doc = parse_json(
        {
            "DocumentIncarnation": 1,
            "Events": [
                {
                    "EventId": f"E-{i}",
                    "EventType": "Freeze",
                    "EventStatus": "Scheduled",
                    "Resources": [VM],
                    "NotBefore": "",
                }
                for i in range(3)
            ],
        }
    )
    obs = tracker.observe(tracker.TrackerState(), 1_772_359_200_000, doc, vm)
    meta = {"tracker": tracker.state_to_json(obs.state), "held|000000000004": {}}
    have = {obs.records[0].RecordId}  # read back from the damaged outbox
    got = rebuild(meta, have, unreadable=5)
    ids = [r["RecordId"] for r in got.entries.values()]
    assert ids == [r.RecordId for r in obs.records[1:]]  # the same RecordIds, not the one read
    assert list(got.entries) == ["held|000000000005", "held|000000000006"]  # after those held
    assert got.lost == 3  # five rows unreadable, two made up for
    assert rebuild(meta, have, unreadable=None).lost == 0  # unknown: nothing claimed
    assert rebuild(meta, have, unreadable=0).entries == {}  # nothing missing: nothing sent again


def test_a_database_that_is_not_one_says_the_loss_is_unknown(tmp_path):
    state = tmp_path / "state"
    state.mkdir()
    (state / "state.db").write_bytes(b"this is not a database" * 100)
    store, note = open_or_recover(state, rebuild=rebuild)
    try:
        assert "how many rows were lost is unknown" in note and store.counter("lost") == 0
    finally:
        store.close()


def damage_the_tracker_state(state) -> None:
    """The meta table's page (tracker state, counters, hook journal): the database opens and
    its outbox reads; the first read of the tracker state does not."""
    db = sqlite3.connect(state / "state.db")
    page_size = db.execute("PRAGMA page_size").fetchone()[0]
    [root] = db.execute("SELECT rootpage FROM sqlite_master WHERE name = 'meta'").fetchone()
    db.close()
    with (state / "state.db").open("r+b") as f:
        f.seek((root - 1) * page_size)
        f.write(b"\xff" * page_size)


def test_a_damaged_page_the_opening_does_not_read_leaves_the_agent_running(
    simulator, agent_run, clock, tmp_path
):
    """Issue 33: it stopped the agent at start (exit 1, "cannot open the state directory"),
    which systemd restarted into the same failure, and its undelivered records went nowhere."""
    sim = simulator(vm_name=VM, rate_limit=None, clock=clock)
    state = tmp_path / "state"
    first = agent_run(sim.url, name="first", state_dir=state)
    sim.set_events(events(clock, 3))
    assert first.wait_for(lambda a: len(a.records()) == 3, 10)
    ids = sorted(r["RecordId"] for r in first.records())
    assert first.stop() == 0
    damage_the_tracker_state(state)

    out = tmp_path / "records.jsonl"
    second = agent_run(
        sim.url, name="second", state_dir=state, extra=f'[sinks.file]\npath = "{out}"\n'
    )
    [note] = [m["msg"] for m in second.lines if m["level"] == "critical"]
    assert "moved aside" in note and "recovered" in note
    assert second.wait_for(lambda a: len([r for r in rows(out) if "EventId" in r]) >= 3, 20)
    assert sorted({r["RecordId"] for r in rows(out) if r.get("Phase") == "FirstSeen"}) == ids
    polls = second.status_json()["polls"]
    clock.advance(6)
    assert second.wait_for(lambda a: a.status_json()["polls"] > polls, 10)  # it runs on
    assert second.stop() == 0
    assert list(state.glob("state.db.corrupt-*"))
