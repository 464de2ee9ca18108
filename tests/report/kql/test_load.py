"""The report's loader (se_forwarder.report.kql.load): source files read by DuckDB itself, each
value checked by the engine's own casts against the contract's types. Every hostile line of issue 18
is skipped and counted with its reason, never fatal; a hostile value that is valid is kept as
written (cut when it is longer than the agent sends). Engine-level: no workbook, no page."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import pytest

from se_forwarder.report import Engine
from se_forwarder.report.kql import load

NOW = "2026-03-01T12:00:00Z"
RECORD = {
    "TimeGenerated": "2026-03-01T11:00:00.000Z",
    "RecordId": "r-ok",
    "Phase": "FirstSeen",
    "EventId": "E1",
    "EventType": "Reboot",
    "Resources": ["vm-a"],
    "DurationInSeconds": -1,
    "DocumentIncarnation": 3,
    "NoticeSeconds": 900.0,
    "AffectsThisVm": True,
    "VmName": "vm-a",
    "Zone": "1",
    "FaultDomain": 0,
    "_IngestionTime": "2026-03-01T11:00:30.000Z",
}
BEAT = {
    "TimeGenerated": "2026-03-01T11:55:00.000Z",
    "RecordId": "h-ok",
    "Reason": "periodic",
    "VmName": "vm-a",
    "Polls": 3300,
    "UptimeSeconds": 3300.5,
    "OpenEventList": [],
}

PLATFORM = {
    "TimeGenerated": "2026-03-01T11:10:00.000Z",
    "RecordId": "p-ok",
    "RecordType": "ScheduledEvent",
    "Channel": "event-grid",
    "EventId": "E1",
    "EventStatus": "Scheduled",
    "DurationInSeconds": 300,
    "Resources": ["vm-a"],
}

#: issue 18's hostile lines (and their kin): each must be skipped with this reason
HOSTILE = {
    "ingestion time not a time": (
        {**RECORD, "_IngestionTime": "yesterday"},
        "_IngestionTime: not a time",
    ),
    "basic ISO 8601 (Python reads it, DuckDB does not)": (
        {**RECORD, "TimeGenerated": "20260301T100000"},
        "TimeGenerated: not a time",
    ),
    "ISO week date": ({**RECORD, "TimeGenerated": "2026-W09-1"}, "TimeGenerated: not a time"),
    "year 10000": (
        {**RECORD, "TimeGenerated": "10000-01-01T00:00:00Z"},
        "TimeGenerated: not a time",
    ),
    "FaultDomain 10^30": ({**RECORD, "FaultDomain": 10**30}, "FaultDomain: not a 32-bit"),
    "FaultDomain 2^31": ({**RECORD, "FaultDomain": 2**31}, "FaultDomain: not a 32-bit"),
    "FaultDomain 1.5": ({**RECORD, "FaultDomain": 1.5}, "FaultDomain: not a 32-bit"),
    "Polls 2^63": ({**BEAT, "Polls": 2**63}, "Polls: not a 64-bit"),
    "DurationInSeconds as text": (
        {**RECORD, "DurationInSeconds": "long"},
        "DurationInSeconds: not a 32-bit",
    ),
    "AffectsThisVm not a boolean": (
        {**RECORD, "AffectsThisVm": "maybe"},
        "AffectsThisVm: not true or false",
    ),
    "no TimeGenerated": (
        {k: v for k, v in RECORD.items() if k != "TimeGenerated"},
        "TimeGenerated: missing",
    ),
    "Resources of 200 kB": ({**RECORD, "Resources": ["x" * 1000] * 200}, "Resources: not JSON"),
}


def _kept(rows: dict[str, int]) -> dict[str, int]:
    return {k: n for k, n in rows.items() if n}


def _engine(tmp_path: Path, lines: list[str], name: str = "records.jsonl") -> Engine:
    path = tmp_path / name
    path.write_text("".join(line + "\n" for line in lines), "utf-8")
    return Engine(files=[path], now=NOW)


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_a_hostile_line_is_skipped_with_its_reason_and_the_rest_is_kept(case, tmp_path):
    row, reason = HOSTILE[case]
    with _engine(tmp_path, [json.dumps(RECORD), json.dumps(row), json.dumps(BEAT)]) as e:
        (loaded,) = e.loads
        assert _kept(loaded.rows) == {"records": 1, "heartbeats": 1}
        assert loaded.skipped_total == 1
        (why,) = loaded.skipped
        assert why.startswith(reason), why
        assert e.run("ScheduledEvents_CL | project RecordId") == [{"RecordId": "r-ok"}]


def test_lines_of_no_table_are_counted_and_blank_lines_are_not(tmp_path):
    lines = [
        json.dumps(RECORD),
        "not json",
        "[1, 2]",
        '"text"',
        "",
        "   ",
        json.dumps({"x": 1}),
        '{"TimeGenerated": "2026-03-01T11:00:00Z", "Phase": "Started", bad json}',
    ]
    with _engine(tmp_path, lines) as e:
        assert e.loads[0].rows["records"] == 1
        assert e.loads[0].skipped == {load.NO_TABLE: 5}


def test_the_stand_ins_stream_lines_go_to_the_table_their_stream_names(tmp_path):
    lines = [
        json.dumps({"stream": "Custom-ScheduledEvents", "record": RECORD}),
        json.dumps({"stream": "Custom-ScheduledEventsAgent", "record": BEAT}),
        json.dumps({"stream": "Custom-Nope", "record": RECORD}),
        json.dumps({"stream": "Custom-ScheduledEvents", "record": "not an object"}),
        json.dumps(
            {"stream": "Custom-ScheduledEvents", "record": {**RECORD, "FaultDomain": 10**30}}
        ),
        json.dumps({"stream": "Custom-ScheduledEventsPlatform", "record": PLATFORM}),
        json.dumps(RECORD),
    ]  # a bare row among stream lines belongs to no stream
    with _engine(tmp_path, lines, "log-analytics.jsonl") as e:
        assert e.counts == {
            "ScheduledEvents_CL": 1,
            "ScheduledEventsAgent_CL": 1,
            "ScheduledEventsPlatform_CL": 1,
        }
        assert sorted(e.loads[0].skipped.values()) == [1, 1, 2]


def test_bare_rows_go_to_the_table_their_marker_column_names(tmp_path):
    with _engine(tmp_path, [json.dumps(r) for r in (RECORD, BEAT, PLATFORM)]) as e:
        assert _kept(e.loads[0].rows) == {"records": 1, "heartbeats": 1, "platform": 1}
        assert e.run("ScheduledEventsPlatform_CL | project Channel, DurationInSeconds") == [
            {"Channel": "event-grid", "DurationInSeconds": 300}
        ]


def test_a_time_with_an_offset_is_the_moment_it_names():
    """DuckDB's TIMESTAMP cast drops an offset (11:00+01:00 would read as 11:00 UTC)."""
    with Engine([{**RECORD, "TimeGenerated": "2026-03-01T11:00:00+01:00"}], [], now=NOW) as e:
        assert e.run("ScheduledEvents_CL | project TimeGenerated") == [
            {"TimeGenerated": datetime(2026, 3, 1, 10, 0)}
        ]


def test_a_value_longer_than_the_agent_sends_is_cut_and_counted(tmp_path):
    big = {**RECORD, "RecordId": "r-big", "Description": "d" * (17 * 1024 * 1024)}
    with _engine(tmp_path, [json.dumps(RECORD), json.dumps(big)]) as e:
        assert e.loads[0].cut == 1 and e.loads[0].rows["records"] == 2
        (row,) = e.run("ScheduledEvents_CL | where RecordId == 'r-big' | project Description")
        text = row["Description"]
        assert len(text) <= load.MAX_TEXT and text.endswith(f"[cut: {17 * 1024 * 1024} characters]")


def test_valid_text_is_kept_as_written(tmp_path):
    odd = {
        **RECORD,
        "RecordId": "r-odd",
        "Zone": "$^^^$",
        "VmName": "<script>x</script>",
        "Description": "a\u0000b \u2028 ünïcode",
    }
    with _engine(tmp_path, [json.dumps(odd)]) as e:
        assert e.run("ScheduledEvents_CL | project Zone, VmName, Description") == [
            {
                "Zone": "$^^^$",
                "VmName": "<script>x</script>",
                "Description": "a\u0000b \u2028 ünïcode",
            }
        ]


def test_a_large_file_loads_into_the_engines_own_folder_and_close_removes_it(tmp_path):
    lines = [json.dumps({**BEAT, "RecordId": f"h{i}", "Polls": i}) for i in range(20_000)]
    e = _engine(tmp_path, lines, "heartbeats.jsonl")
    folder = e.workdir
    assert e.counts["ScheduledEventsAgent_CL"] == 20_000
    assert e.run("ScheduledEventsAgent_CL | summarize sum(Polls)") == [
        {"sum_Polls": sum(range(20_000))}
    ]
    assert (folder / "engine.duckdb").is_file()
    e.close()
    assert not folder.exists()
    e.close()  # twice is harmless


def test_now_defaults_to_the_newest_ingestion_time(tmp_path):
    with Engine(files=[], records=[RECORD], heartbeats=[BEAT]) as e:
        assert e.now == datetime(2026, 3, 1, 11, 55)  # the heartbeat has no ingestion time


def test_a_gzip_file_is_read_as_it_is_stream_lines_too(tmp_path):
    import gzip

    path = tmp_path / "log-analytics.jsonl.gz"
    with gzip.open(path, "wt", encoding="utf-8") as f:
        f.write(json.dumps({"stream": "Custom-ScheduledEvents", "record": RECORD}) + "\n")
        f.write(json.dumps({"stream": "Custom-ScheduledEventsAgent", "record": BEAT}) + "\n")
    with Engine(files=[path], now=NOW) as e:
        assert _kept(e.counts) == {"ScheduledEvents_CL": 1, "ScheduledEventsAgent_CL": 1}


def test_a_file_duckdb_cannot_read_is_one_error_not_a_traceback(tmp_path):
    path = tmp_path / "records.jsonl.gz"  # not gzip at all
    path.write_text(json.dumps(RECORD) + "\n", "utf-8")
    with pytest.raises(load.LoadError, match=r"records.jsonl.gz: cannot be read \(.*GZIP"):
        Engine(files=[path], now=NOW)
