"""The local sinks: the file sink (JSON Lines, size rotation, durable) and the stdout sink,
and the agent's text log format."""

from __future__ import annotations

import io
import json
import logging

from helpers.sink_answers import nothing_delivered

from se_forwarder import logs
from se_forwarder.errors import Verdict
from se_forwarder.sinks.base import OutboxRow
from se_forwarder.sinks.file.sink import FileSink
from se_forwarder.sinks.stdout.sink import StdoutSink


def items(n: int, start: int = 0, table: str = "records", pad: int = 100) -> list[OutboxRow]:
    return [
        OutboxRow.raw(table, "vm", json.dumps({"RecordId": f"r{i}", "pad": "x" * pad}), seq=i)
        for i in range(start, start + n)
    ]


def read_lines(path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def test_file_sink_writes_json_lines_and_rotates_without_passing_the_limit(tmp_path):
    path = tmp_path / "records.jsonl"
    sink = FileSink(path, max_file_bytes=1024, backups=2)
    for k in range(4):
        sink.send(items(12, start=k * 12))  # ~1.4 KB a batch: larger than a whole file
    files = [path, path.with_name("records.jsonl.1"), path.with_name("records.jsonl.2")]
    assert all(f.exists() for f in files) and not path.with_name("records.jsonl.3").exists()
    assert all(f.stat().st_size <= 1024 for f in files)
    # Oldest to newest across the rotated files: the newest records, in order, none torn.
    ids = [r["RecordId"] for f in reversed(files) for r in read_lines(f)]
    assert ids == [f"r{i}" for i in range(48 - len(ids), 48)]


def test_file_sink_heartbeats_go_to_their_own_file_or_nowhere(tmp_path):
    sink = FileSink(tmp_path / "r.jsonl", heartbeat_path=tmp_path / "hb.jsonl")
    assert sink.tables == {"records", "heartbeats"}
    sink.send(items(2) + items(1, start=2, table="heartbeats"))
    assert [r["RecordId"] for r in read_lines(tmp_path / "r.jsonl")] == ["r0", "r1"]
    assert [r["RecordId"] for r in read_lines(tmp_path / "hb.jsonl")] == ["r2"]
    assert FileSink(tmp_path / "only.jsonl").tables == {"records"}


def test_file_sink_write_failure_is_retryable_and_loses_nothing(tmp_path):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the directory should be")
    with FileSink(blocker / "records.jsonl") as sink:
        err = nothing_delivered(sink.send(items(1)))
    assert err.value.verdict is Verdict.RETRY and "cannot write" in str(err.value)


def test_stdout_sink_writes_records_only_unless_asked():
    out = io.StringIO()
    sink = StdoutSink(stream=out)
    assert sink.tables == {"records"}
    result = sink.send(items(3))
    assert (result.delivered, result.requests, result.failure) == (3, 1, None)
    assert result.bytes_sent == len(out.getvalue().encode())
    assert [json.loads(x)["RecordId"] for x in out.getvalue().splitlines()] == ["r0", "r1", "r2"]
    assert StdoutSink(heartbeats=True, stream=out).tables == {"records", "heartbeats"}


def test_stdout_sink_closed_stream_is_retryable():
    out = io.StringIO()
    out.close()
    err = nothing_delivered(StdoutSink(stream=out).send(items(1)))
    assert err.value.verdict is Verdict.RETRY


def test_log_formats():
    out = io.StringIO()
    log = logs.setup("json", "info", stream=out)
    logs.event(
        log, logging.WARNING, "bad observation", reason="HTTP 500", at="2024-01-01T00:00:00.000Z"
    )
    line = json.loads(out.getvalue())
    assert (
        line["level"] == "warning"
        and line["msg"] == "bad observation"
        and line["reason"] == "HTTP 500"
    )
    out = io.StringIO()
    log = logs.setup("text", "info", stream=out)
    logs.event(log, logging.INFO, "record", Phase="FirstSeen", Outcome=None)
    text = out.getvalue()
    assert (
        "INFO" in text and "record" in text and "Phase=FirstSeen" in text and "Outcome" not in text
    )
    logs.event(log, logging.DEBUG, "hidden")
    assert "hidden" not in out.getvalue()
