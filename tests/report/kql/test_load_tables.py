"""The loader stores only the columns of the tables a file holds (a file sink's file holds one),
read from a sample of its first lines; a line of another table further on loads the file again
with every table's columns, so no row is ever lost to the sample. Engine-level."""

from __future__ import annotations

import json
from pathlib import Path

from se_forwarder.report import Engine
from se_forwarder.report.kql.tables import sample

NOW = "2026-03-01T12:00:00Z"
BEAT = {
    "TimeGenerated": "2026-03-01T11:55:00.000Z",
    "Reason": "periodic",
    "VmId": "vm-a",
    "Polls": 3300,
}
RECORD = {
    "TimeGenerated": "2026-03-01T11:00:00.000Z",
    "RecordId": "r-1",
    "Phase": "FirstSeen",
    "EventId": "E1",
    "EventType": "Reboot",
    "VmId": "vm-a",
    "DurationInSeconds": -1,
}


def _write(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), "utf-8")
    return path


def _columns(engine: Engine, table: str) -> set[str]:
    return {
        r[0]
        for r in engine.con.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_name = ?", [table]
        ).fetchall()
    }


def test_a_file_of_heartbeats_stores_the_heartbeat_columns_only(tmp_path: Path) -> None:
    beats = [{**BEAT, "RecordId": f"h-{i}"} for i in range(50)]
    with Engine(files=[_write(tmp_path / "heartbeats.jsonl", beats)], now=NOW) as e:
        (ld,) = e.loads
        assert ld.stored == ("heartbeats",)
        assert "Polls" in _columns(e, ld.table) and "Phase" not in _columns(e, ld.table)
        assert e.counts == {
            "ScheduledEvents_CL": 0,
            "ScheduledEventsAgent_CL": 50,
            "ScheduledEventsPlatform_CL": 0,
        }
        assert e.run("ScheduledEventsAgent_CL | summarize n = sum(Polls)") == [{"n": 50 * 3300}]
        assert e.run("ScheduledEvents_CL | count") == [{"Count": 0}]


def test_a_record_after_the_sample_loads_the_file_again_with_every_column(tmp_path: Path) -> None:
    beats = [{**BEAT, "RecordId": f"h-{i}"} for i in range(1200)]
    path = _write(tmp_path / "mixed.jsonl", [*beats, RECORD, {"nope": 1}])
    assert sample(path) == (False, {"heartbeats"})  # the first 1,000 lines: heartbeats only
    with Engine(files=[path], now=NOW) as e:
        (ld,) = e.loads
        assert set(ld.stored) == {"records", "heartbeats", "platform"}
        assert ld.rows == {"records": 1, "heartbeats": 1200, "platform": 0}
        assert ld.skipped_total == 1
        assert e.run("ScheduledEvents_CL | project EventId, DurationInSeconds") == [
            {"EventId": "E1", "DurationInSeconds": -1}
        ]


def test_the_stand_in_file_is_sampled_by_stream(tmp_path: Path) -> None:
    lines = [
        {"stream": "Custom-ScheduledEventsAgent", "record": {**BEAT, "RecordId": "h"}},
        {"stream": "Custom-ScheduledEvents", "record": RECORD},
    ]
    path = _write(tmp_path / "log-analytics.jsonl", lines)
    assert sample(path) == (True, {"records", "heartbeats"})
    with Engine(files=[path], now=NOW) as e:
        assert e.counts["ScheduledEventsAgent_CL"] == 1 and e.counts["ScheduledEvents_CL"] == 1


def test_a_stream_that_is_not_text_is_a_skipped_line_not_a_failed_report(tmp_path: Path) -> None:
    lines = [
        {"stream": ["Custom-ScheduledEventsAgent"], "record": {}},
        {"stream": "Custom-ScheduledEventsAgent", "record": {**BEAT, "RecordId": "h"}},
    ]
    path = _write(tmp_path / "log-analytics.jsonl", lines)
    assert sample(path) == (True, {"heartbeats"})
    with Engine(files=[path], now=NOW) as e:
        assert e.counts["ScheduledEventsAgent_CL"] == 1 and e.loads[0].skipped_total == 1
