"""No privileged path follows a link (issue 33). The state directory belongs to the sandboxed
service, and every hook it runs can write it; root runs commands there (``status
--ack-dead-letters``) and may run the agent itself. Each test plants a link where a file is
created, truncated or appended to, and shows that root (the tests run as root) does not write
through it: the victim, a root-owned 0600 file elsewhere, is unchanged."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from se_forwarder.delivery.dead_letters import DeadLetters, acknowledge
from se_forwarder.errors import StateError
from se_forwarder.health.status_file import StatusFile
from se_forwarder.metrics.config import MetricsConfig
from se_forwarder.metrics.exporter import Exporter
from se_forwarder.oshost import files
from se_forwarder.oshost.lock import StateLock
from se_forwarder.outbox import OutboxRow, Store
from se_forwarder.outbox.recovery import open_or_recover
from se_forwarder.recording.rebuild import rebuild
from se_forwarder.sinks.file.sink import FileSink

pytestmark = pytest.mark.skipif(os.name != "posix", reason="symbolic links planted by a user")

PRECIOUS = b"root's own file\n"
SERVICE_UID = 64321  # the service's (dynamic) user: not root


@pytest.fixture
def victim(tmp_path) -> Path:
    path = tmp_path / "elsewhere" / "victim"
    path.parent.mkdir()
    path.write_bytes(PRECIOUS)
    path.chmod(0o600)
    return path


@pytest.fixture
def state(tmp_path) -> Path:
    """A state directory as the service owns it."""
    path = tmp_path / "state"
    path.mkdir(mode=0o700)
    os.chown(path, SERVICE_UID, SERVICE_UID)
    return path


def untouched(victim: Path) -> bool:
    return victim.read_bytes() == PRECIOUS and victim.stat().st_mode & 0o777 == 0o600


def row(n: int) -> OutboxRow:
    return OutboxRow.raw("records", "vm", json.dumps({"RecordId": f"r{n}"}))


def status_cmd(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "se_forwarder.cli", "status", *argv],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.process
def test_ack_dead_letters_as_root_never_writes_through_a_planted_temporary_name(state, victim):
    (state / "dead-letter.jsonl").write_text('{"record":{"RecordId":"r1"}}\n')
    (state / "dead-letter.ack.tmp").symlink_to(victim)  # the name it used to truncate
    r = status_cmd("--state-dir", str(state), "--ack-dead-letters")
    assert "acknowledged 1 dead-lettered record(s)" in r.stdout, r.stdout + r.stderr
    assert untouched(victim)
    assert json.loads((state / "dead-letter.ack").read_text())["total"] == 1


def test_ack_replaces_a_link_at_its_own_name_rather_than_following_it(state, victim):
    (state / "dead-letter.jsonl").write_text('{"record":{"RecordId":"r1"}}\n')
    (state / "dead-letter.ack").symlink_to(victim)
    assert acknowledge(state / "dead-letter.jsonl").records == 1
    assert untouched(victim)
    assert not (state / "dead-letter.ack").is_symlink()


def test_the_lock_file_is_not_truncated_through_a_link(state, victim):
    (state / "agent.lock").symlink_to(victim)
    with pytest.raises(StateError, match="symbolic link"):
        StateLock(state).acquire()
    assert untouched(victim)
    with pytest.raises(StateError, match="symbolic link"):
        open_or_recover(state, rebuild=rebuild)  # what `run` and `collect` open: one line, exit 1
    assert untouched(victim)


def test_the_lock_file_is_not_written_through_a_hard_link(state, victim):
    os.link(victim, state / "agent.lock")  # with fs.protected_hardlinks off, or root's own
    with pytest.raises(StateError, match="hard link"):
        StateLock(state).acquire()
    assert untouched(victim)


def test_dead_letters_are_not_appended_through_a_link(state, victim):
    (state / "dead-letter.jsonl").symlink_to(victim)
    with pytest.raises(OSError, match="symbolic link"):
        DeadLetters(state / "dead-letter.jsonl").write("webhook", "gone", [row(1)])
    assert untouched(victim)


@pytest.mark.parametrize("name", ["records.jsonl", "heartbeats.jsonl"])
def test_the_file_sink_does_not_append_through_a_link(tmp_path, victim, name):
    out = tmp_path / "out"
    out.mkdir()
    (out / name).symlink_to(victim)
    sink = FileSink(out / "records.jsonl", heartbeat_path=out / "heartbeats.jsonl")
    table = "records" if name == "records.jsonl" else "heartbeats"
    batch = [OutboxRow(table, "vm", '{"RecordId":"r1"}', 17, seq=1)]
    result = sink.send(batch)  # kept in the outbox, the failure said
    assert result.delivered == 0 and "symbolic link" in str(result.failure)
    assert untouched(victim)


def test_the_metrics_textfile_is_not_written_through_a_linked_parent_directory(tmp_path):
    protected = tmp_path / "etc"  # root's, 0755: passes the old check of the last directory
    protected.mkdir(mode=0o755)
    theirs = tmp_path / "theirs"  # a user's own directory, holding a link to root's
    theirs.mkdir(mode=0o755)
    (theirs / "textfile").symlink_to(protected)
    os.lchown(theirs / "textfile", SERVICE_UID, SERVICE_UID)
    os.chown(theirs, SERVICE_UID, SERVICE_UID)
    exporter = Exporter(
        MetricsConfig(textfile=theirs / "textfile" / "se.prom"), snapshot=lambda: None
    )
    with pytest.raises(PermissionError, match="owned by uid 64321"):
        exporter.write_textfile()
    assert list(protected.iterdir()) == []


def test_every_ancestor_and_link_of_a_private_directory_is_checked(tmp_path):
    root_dir = tmp_path / "a"
    (root_dir / "b").mkdir(parents=True, mode=0o755)
    files.private_dir(root_dir / "b")  # root's all the way: fine
    (tmp_path / "link").symlink_to(root_dir)  # root's link to root's directory: fine
    files.private_dir(tmp_path / "link" / "b")
    root_dir.chmod(0o777)  # an ancestor anyone can write: the directory below can be swapped
    with pytest.raises(PermissionError, match="writable by its group or by others"):
        files.private_dir(tmp_path / "link" / "b")
    root_dir.chmod(0o1777)  # sticky, like /tmp: its entries are their owners' alone
    files.private_dir(tmp_path / "link" / "b")
    with pytest.raises(PermissionError):  # the directory itself: nobody else, sticky or not
        files.private_dir(root_dir)


def test_status_json_is_not_written_through_a_link(state, victim, tmp_path):
    (state / "status.json").symlink_to(victim)
    runtime = tmp_path / "run"
    runtime.mkdir()
    (runtime / "status.json").symlink_to(victim)
    status = StatusFile(state, runtime)
    doc = {"version": "x", "pid": 1}

    class Snap:
        def to_json(self):
            return doc

    status.write(Snap)
    status.write(Snap)
    status.close()
    assert untouched(victim)
    assert json.loads((state / "status.json").read_text())["pid"] == 1


@pytest.mark.parametrize("suffix", ["", "-wal", "-shm", "-journal"])
def test_the_state_database_is_not_opened_through_a_link(state, victim, suffix):
    (state / f"state.db{suffix}").symlink_to(victim)
    with pytest.raises(StateError, match="symbolic link"):
        open_or_recover(state, rebuild=rebuild)
    assert untouched(victim)


def test_a_state_directory_others_may_write_is_refused_with_one_line(state):
    state.chmod(0o777)
    with pytest.raises(StateError, match=r"writable by others \(mode 0777\)") as caught:
        Store(state)
    assert "\n" not in str(caught.value)
    assert not (state / "state.db").exists() and not (state / "agent.lock").exists()


@pytest.mark.process
def test_run_refuses_a_state_directory_others_may_write_with_one_line(state, tmp_path):
    state.chmod(0o777)
    cfg = tmp_path / "config.toml"
    cfg.write_text(f'[agent]\nstate_dir = "{state}"\n[imds]\nendpoint = "http://127.0.0.1:9"\n')
    started = time.monotonic()
    r = subprocess.run(
        [sys.executable, "-m", "se_forwarder.cli", "run", "--config", str(cfg)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert r.returncode == 1 and time.monotonic() - started < 30
    [line] = [json.loads(x) for x in r.stderr.splitlines() if "writable by others" in x]
    assert line["level"] == "critical"
