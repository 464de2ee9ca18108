"""`se-forwarder status`: health verdicts from status.json, text and JSON output, exit codes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from se_forwarder import health

NOW = 1_800_000_000.0


def iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def healthy_doc(now: float = NOW, **over) -> dict:
    doc = {
        "version": "0.1.0",
        "pid": os.getpid(),
        "started_at": iso(now - 600),
        "written_at": iso(now - 2),
        "last_poll_at": iso(now - 1),
        "last_poll_ok": True,
        "last_poll_error": None,
        "last_poll_latency_ms": 3,
        "polls": 598,
        "poll_errors": 1,
        "last_incarnation": 3,
        "open_events": [
            {
                "EventId": "C7061BAC-AFDC-4513-B24B-AA5F13A16123",
                "EventType": "Freeze",
                "EventStatus": "Scheduled",
                "NotBefore": "Mon, 11 Apr 2022 22:26:58 GMT",
                "AffectsThisVm": True,
            }
        ],
        "delivered": 12,
        "failed_deliveries": 0,
        "dropped": 0,
        "dead_lettered": 0,
        "sinks": {
            "log_analytics": {
                "spool_depth": 0,
                "last_delivery_at": iso(now - 5),
                "last_error": None,
            }
        },
        "stopped": False,
    }
    doc.update(over)
    return doc


def judge(doc, **kw):
    kw.setdefault("process_alive", lambda pid: True)
    process_alive = kw.pop("process_alive", None)
    snap, problems = health.read(doc) if doc is not None else (None, [])
    return health.evaluate(
        snap,
        now=NOW,
        limits=health.Limits(**kw),
        read_problems=problems,
        process_alive=process_alive,
    ).as_dict()


# -- parse_time --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value,expected",
    [
        ("2027-01-15T08:00:00.000Z", datetime(2027, 1, 15, 8, tzinfo=UTC).timestamp()),
        ("2027-01-15T09:00:00+01:00", datetime(2027, 1, 15, 8, tzinfo=UTC).timestamp()),
        ("2027-01-15T08:00:00", datetime(2027, 1, 15, 8, tzinfo=UTC).timestamp()),
        (1_800_000_000_123, 1_800_000_000.123),
        (1_800_000_000, 1_800_000_000.0),
        (None, None),
        ("", None),
    ],
)
def test_parse_time_formats(value, expected):
    got = health.parse_time(value)
    assert got == pytest.approx(expected) if expected is not None else got is None


@pytest.mark.parametrize("bad", ["yesterday", True, [1], float("nan")])
def test_parse_time_rejects_garbage(bad):
    with pytest.raises(ValueError):
        health.parse_time(bad)


# -- verdicts ----------------------------------------------------------------------------------


def test_healthy():
    v = judge(healthy_doc())
    assert v["healthy"] is True and v["state"] == "healthy"
    assert v["problems"] == [] and v["warnings"] == []
    assert v["ages"]["last_poll_at"] == pytest.approx(1.0)


def test_missing_file_is_unhealthy():
    v = judge(None)
    assert not v["healthy"] and v["state"] == "missing"


def test_clean_stop_is_unhealthy():
    v = judge(healthy_doc(stopped=True))
    assert not v["healthy"] and v["state"] == "stopped"


def test_dead_pid_is_unhealthy():
    v = judge(healthy_doc(), process_alive=lambda pid: False)
    assert not v["healthy"] and v["state"] == "dead"


def test_unknown_liveness_does_not_fail():
    v = judge(healthy_doc(), process_alive=lambda pid: None)
    assert v["healthy"]


def test_stale_status_file():
    v = judge(healthy_doc(written_at=iso(NOW - 31)))
    assert not v["healthy"]
    assert any("not refreshed" in p for p in v["problems"])
    # the threshold is configurable
    assert judge(healthy_doc(written_at=iso(NOW - 31)), stale_after=60)["healthy"]


def test_polling_stalled():
    v = judge(healthy_doc(last_poll_at=iso(NOW - 45)))
    assert not v["healthy"] and any("stalled" in p for p in v["problems"])
    assert judge(healthy_doc(last_poll_at=iso(NOW - 45)), max_poll_age=50)["healthy"]


def test_slow_poll_interval_widens_the_stall_limit():
    doc = healthy_doc(last_poll_at=iso(NOW - 45), poll_interval=10.0)
    assert judge(doc)["healthy"]
    assert not judge(healthy_doc(last_poll_at=iso(NOW - 51), poll_interval=10.0))["healthy"]


def test_starting_within_grace_is_not_healthy_but_distinct():
    doc = healthy_doc(
        started_at=iso(NOW - 20), last_poll_at=None, last_poll_ok=None, polls=0, poll_errors=0
    )
    v = judge(doc)
    assert not v["healthy"] and v["state"] == "starting"
    late = judge(healthy_doc(started_at=iso(NOW - 400), last_poll_at=None, last_poll_ok=None))
    assert late["state"] == "unhealthy"


def test_brief_poll_failure_is_a_warning_long_failure_a_problem():
    brief = healthy_doc(last_poll_ok=False, last_poll_error="timeout", last_poll_ok_at=iso(NOW - 5))
    v = judge(brief)
    assert v["healthy"] and any("timeout" in w for w in v["warnings"])
    long = healthy_doc(last_poll_ok=False, last_poll_error="timeout", last_poll_ok_at=iso(NOW - 90))
    v = judge(long)
    assert not v["healthy"] and any("failing for 90s" in p for p in v["problems"])


def test_never_succeeded_failure_measured_from_start():
    doc = healthy_doc(
        started_at=iso(NOW - 200),
        last_poll_ok=False,
        last_poll_error="connection refused",
        polls=190,
        poll_errors=190,
    )
    v = judge(doc)
    assert not v["healthy"] and any("connection refused" in p for p in v["problems"])
    young = healthy_doc(
        started_at=iso(NOW - 10),
        last_poll_ok=False,
        last_poll_error="connection refused",
        polls=9,
        poll_errors=9,
    )
    v = judge(young)
    assert not v["healthy"] and v["state"] == "starting"  # never had a good poll
    assert any("connection refused" in p for p in v["problems"])


def test_failure_of_unknown_duration_is_unhealthy():
    doc = healthy_doc(last_poll_ok=False, last_poll_error="HTTP 500")
    assert not judge(doc)["healthy"]


def test_sink_errors_warn_and_strict_fails():
    doc = healthy_doc(dropped=4)
    doc["sinks"]["log_analytics"]["last_error"] = "403 Forbidden"
    v = judge(doc)
    assert v["healthy"]
    assert any("403" in w for w in v["warnings"]) and any("dropped" in w for w in v["warnings"])
    assert not judge(doc, strict=True)["healthy"]


def test_bad_time_value_is_a_problem():
    v = judge(healthy_doc(written_at="soon"))
    assert not v["healthy"] and any("written_at" in p for p in v["problems"])


def test_epoch_millisecond_timestamps():
    doc = healthy_doc(
        written_at=int((NOW - 1) * 1000),
        last_poll_at=int((NOW - 1) * 1000),
        started_at=int((NOW - 100) * 1000),
    )
    assert judge(doc)["healthy"]


# -- the command ---------------------------------------------------------------------------


def run_cmd(*argv: str, env=None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "se_forwarder.cli", "status", *argv],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )


def write_status(d: Path, doc: dict) -> None:
    d.mkdir(parents=True, exist_ok=True)
    (d / "status.json").write_text(json.dumps(doc))


@pytest.mark.process
def test_command_healthy_text(tmp_path):
    write_status(tmp_path, healthy_doc(now=time.time()))
    r = run_cmd("--state-dir", str(tmp_path))
    assert r.returncode == 0, r.stdout + r.stderr
    out = r.stdout
    assert out.startswith("se-forwarder: HEALTHY")
    assert "C7061BAC-AFDC-4513-B24B-AA5F13A16123  Freeze  Scheduled" in out
    assert "affects this VM" in out
    assert "log_analytics" in out and "spool 0" in out
    assert "delivered 12" in out


@pytest.mark.process
def test_command_json(tmp_path):
    doc = healthy_doc(now=time.time())
    write_status(tmp_path, doc)
    r = run_cmd("--state-dir", str(tmp_path), "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["healthy"] is True and out["state"] == "healthy"
    assert out["status"]["open_events"] == doc["open_events"]
    assert out["state_dir"] == str(tmp_path)


@pytest.mark.process
def test_command_unhealthy_exit_1(tmp_path):
    write_status(tmp_path, healthy_doc(now=time.time() - 3600))
    r = run_cmd("--state-dir", str(tmp_path), "--json")
    assert r.returncode == 1
    assert json.loads(r.stdout)["healthy"] is False
    r = run_cmd("--state-dir", str(tmp_path))
    assert r.returncode == 1 and "PROBLEM" in r.stdout


@pytest.mark.process
def test_command_dead_pid(tmp_path):
    # a pid that existed and is gone: a finished child
    p = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=False,
    )
    write_status(tmp_path, healthy_doc(now=time.time(), pid=int(p.stdout)))
    r = run_cmd("--state-dir", str(tmp_path), "--json")
    assert r.returncode == 1 and json.loads(r.stdout)["state"] == "dead"


@pytest.mark.process
def test_command_missing_and_corrupt(tmp_path):
    r = run_cmd("--state-dir", str(tmp_path / "nope"))
    assert r.returncode == 1 and "MISSING" in r.stdout
    (tmp_path / "status.json").write_text("{not json")
    r = run_cmd("--state-dir", str(tmp_path), "--json")
    assert r.returncode == 2 and json.loads(r.stdout)["state"] == "unreadable"


@pytest.mark.process
def test_command_default_state_dir_from_environment(tmp_path):
    write_status(tmp_path, healthy_doc(now=time.time()))
    env = dict(os.environ, SE_FORWARDER_STATE_DIR=str(tmp_path))
    r = run_cmd("--json", env=env)
    assert r.returncode == 0 and json.loads(r.stdout)["state_dir"] == str(tmp_path)


def test_a_full_disk_is_named_with_the_count():
    doc = healthy_doc(
        persist_error="OperationalError: database or disk is full",
        persist_failures=42,
        disk_full=True,
    )
    v = judge(doc)
    assert not v["healthy"] and v["state"] == "disk full"
    assert any("42 failed commits" in p and "disk is full" in p for p in v["problems"])
    other = judge(
        healthy_doc(
            persist_error="OperationalError: attempt to write a readonly database",
            persist_failures=3,
            disk_full=False,
        )
    )
    assert other["state"] == "cannot persist"
    assert judge(healthy_doc(persist_failures=42, persist_error=None))["healthy"]  # it passed


@pytest.mark.process
def test_command_reads_the_state_directory_from_the_config_and_its_overrides(tmp_path):
    """`status --config` and SE_FORWARDER_AGENT__STATE_DIR: the agent's own state directory."""
    custom, other = tmp_path / "custom", tmp_path / "other"
    write_status(custom, healthy_doc(now=time.time()))
    write_status(other, healthy_doc(now=time.time()))
    cfg = tmp_path / "config.toml"
    cfg.write_text(f'[agent]\nstate_dir = "{custom}"\n')
    base = {k: v for k, v in os.environ.items() if not k.startswith("SE_FORWARDER")}
    r = run_cmd("--json", "--config", str(cfg), env=base)
    assert r.returncode == 0 and json.loads(r.stdout)["state_dir"] == str(custom), r.stderr
    env = dict(base, SE_FORWARDER_AGENT__STATE_DIR=str(other))
    r = run_cmd("--json", "--config", str(cfg), env=env)
    assert json.loads(r.stdout)["state_dir"] == str(other)
    r = run_cmd("--json", env=dict(base, SE_FORWARDER_CONFIG=str(cfg)))
    assert json.loads(r.stdout)["state_dir"] == str(custom)


# -- dead letters: a non-zero status until acknowledged (issue 18) -------------------------------


def letter(n: int) -> str:
    return (
        json.dumps(
            {
                "time": "2026-01-01T00:00:00Z",
                "sink": "webhook",
                "reason": "gone",
                "table": "records",
                "seq": n,
                "record": {"RecordId": f"r-{n}"},
            }
        )
        + "\n"
    )


@pytest.mark.process
def test_dead_letters_make_status_fail_until_acknowledged(tmp_path):
    write_status(tmp_path, healthy_doc(now=time.time(), dead_lettered=0))  # a later run: 0
    letters = tmp_path / "dead-letter.jsonl"
    letters.write_text(letter(1) + letter(2))
    r = run_cmd("--state-dir", str(tmp_path))
    assert r.returncode == 1, r.stdout
    assert r.stdout.startswith("se-forwarder: DEAD LETTERS")
    assert "2 dead-lettered record(s) not acknowledged" in r.stdout
    assert "--ack-dead-letters" in r.stdout

    r = run_cmd("--state-dir", str(tmp_path), "--ack-dead-letters")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "acknowledged 2 dead-lettered record(s)" in r.stdout
    assert "HEALTHY" in r.stdout and "dead letters: 2, all acknowledged" in r.stdout
    assert (tmp_path / "dead-letter.ack").stat().st_mode & 0o077 == 0

    with letters.open("a") as f:  # the agent dead-letters one more (and half of another)
        f.write(letter(3) + letter(4)[:20])
    out = json.loads(run_cmd("--state-dir", str(tmp_path), "--json").stdout)
    assert (out["healthy"], out["state"]) == (False, "dead letters")
    assert out["dead_letters"] == {
        "file": str(letters),
        "total": 3,
        "acknowledged": 2,
        "pending": 1,
    }

    letters.unlink()  # read and removed by a person; a new one starts
    letters.write_text(letter(5))
    out = json.loads(run_cmd("--state-dir", str(tmp_path), "--json").stdout)
    assert out["dead_letters"]["pending"] == 1 and out["state"] == "dead letters"


@pytest.mark.process
def test_acknowledged_dead_letters_are_no_warning_even_in_strict_mode(tmp_path):
    write_status(tmp_path, healthy_doc(now=time.time(), dead_lettered=2))  # this run made them
    (tmp_path / "dead-letter.jsonl").write_text(letter(1) + letter(2))
    assert run_cmd("--state-dir", str(tmp_path), "--strict").returncode == 1
    assert run_cmd("--state-dir", str(tmp_path), "--ack-dead-letters", "--strict").returncode == 0
    assert run_cmd("--state-dir", str(tmp_path), "--strict").returncode == 0


@pytest.mark.process
def test_dead_letters_count_the_previous_file_and_the_lines_dropped_at_the_bound(tmp_path):
    """dead-letter.jsonl moves to dead-letter.jsonl.1 at its bound (delivery/dead_letters.py):
    status counts both, an acknowledgement covers both (a moved file keeps what was read), and
    the lines a replaced previous file took with it are a warning."""
    write_status(tmp_path, healthy_doc(now=time.time(), dead_letters_dropped=5))
    letters, previous = tmp_path / "dead-letter.jsonl", tmp_path / "dead-letter.jsonl.1"
    previous.write_text(letter(1) + letter(2))
    letters.write_text(letter(3))
    r = run_cmd("--state-dir", str(tmp_path))
    assert r.returncode == 1 and "3 dead-lettered record(s) not acknowledged" in r.stdout, r.stdout
    assert "dead-letter.jsonl.1" in r.stdout
    assert "5 record(s) dropped from the dead-letter file (at its bound)" in r.stdout
    assert run_cmd("--state-dir", str(tmp_path), "--ack-dead-letters").returncode == 0
    letters.replace(previous)  # the bound again: the read file moves, a new one starts
    letters.write_text(letter(4))
    out = json.loads(run_cmd("--state-dir", str(tmp_path), "--json").stdout)
    assert (out["dead_letters"]["total"], out["dead_letters"]["pending"]) == (2, 1)


# -- what IMDS served is shown, never obeyed by the terminal (issue 33) -------------------------


@pytest.mark.process
def test_status_prints_served_text_with_its_control_characters_escaped(tmp_path):
    """An EventId holding a newline and terminal escapes split the line, cleared the screen and
    set the window's title."""
    evil = "E-1\n  PROBLEM:      forged\x1b[2J\x1b]0;owned\x07\r"
    event = {"EventId": evil, "EventType": "Reboot", "EventStatus": "Scheduled"}
    write_status(tmp_path, healthy_doc(now=time.time(), open_events=[event]))
    r = run_cmd("--state-dir", str(tmp_path))
    assert r.returncode == 0, r.stdout + r.stderr
    assert not any(c in r.stdout for c in "\x1b\x07\r")
    assert not any(line.startswith("  PROBLEM") for line in r.stdout.splitlines())  # forged
    assert "E-1\\n  PROBLEM:      forged\\x1b[2J\\x1b]0;owned\\x07\\r" in r.stdout
