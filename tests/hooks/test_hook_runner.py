"""One hook run, for real (processes, not mocks): the event in its environment and the record on
stdin, output logged line by line, exit status recorded, the whole process group killed at the
timeout, a flood of output read but not logged, secrets of the agent's environment not passed
on; the journal keeps at most once across a reopened store; Windows argv built on Linux too."""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path

import pytest

from se_forwarder import logs
from se_forwarder.hooks import Journal
from se_forwarder.hooks.environment import environment
from se_forwarder.hooks.runner import MAX_LOGGED_LINES, run
from se_forwarder.model import LifecycleRecord, VmIdentity
from se_forwarder.oshost import process
from se_forwarder.outbox import Store

VM = VmIdentity(VmName="vm-a", Computer="vm-a")


def record(**over) -> LifecycleRecord:
    base = {
        "TimeGenerated": "2026-01-01T00:00:00.000Z",
        "RecordId": "r1",
        "Phase": "FirstSeen",
        "Outcome": None,
        "EventId": "e-1",
        "EventType": "Reboot",
        "EventStatus": "Scheduled",
        "EventSource": "User",
        "ResourceType": "VirtualMachine",
        "Resources": ["vm-a", "vm-b"],
        "Description": "restart",
        "DurationInSeconds": -1,
        "NotBefore": "2026-01-01T00:15:00.000Z",
        "DocumentIncarnation": 2,
        "FirstSeenAt": "2026-01-01T00:00:00.000Z",
        "StartedAt": None,
        "NoticeSeconds": 900.0,
        "SinceFirstSeenSeconds": 0.0,
        "StartDelaySeconds": None,
        "SinceStartedSeconds": None,
        "UncertaintySeconds": 1.0,
        "AffectsThisVm": True,
        "vm": VM,
    }
    base.update(over)
    return LifecycleRecord(**base)


NOW = 1767225600000  # 2026-01-01T00:00:00Z


def script(tmp_path: Path, body: str, name: str = "hook.sh") -> list[str]:
    path = tmp_path / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return [str(path)]


def go(argv, tmp_path, rec=None, timeout=10.0, env_extra=None, environ=None):
    rec = rec or record()
    env = environment(
        rec, hook="drain", hook_phase="pre", now_ms=NOW, extra=env_extra or {}, environ=environ
    )
    return run(
        argv,
        env,
        (rec.to_json() + "\n").encode(),
        timeout,
        log=logs.get("actions"),
        fields={"EventId": rec.EventId, "hook": "drain"},
    )


def test_the_event_reaches_the_hook_and_its_output_is_logged_line_by_line(tmp_path, caplog):
    out = tmp_path / "seen"
    argv = script(
        tmp_path,
        f"env | grep ^SE_ | sort > {out}.env\ncat > {out}.stdin\n"
        'echo "draining $SE_EVENT_ID"\necho second line >&2\n',
    )
    with caplog.at_level(logging.INFO, logger="se_forwarder"):
        r = go(argv, tmp_path, env_extra={"MY_SETTING": "x"})
    assert (r.state, r.exit_code, r.lines) == ("ok", 0, 2)
    env = dict(line.split("=", 1) for line in Path(f"{out}.env").read_text().splitlines())
    assert env["SE_EVENT_ID"] == "e-1" and env["SE_EVENT_TYPE"] == "Reboot"
    assert env["SE_EVENT_STATUS"] == "Scheduled" and env["SE_EVENT_SOURCE"] == "User"
    assert env["SE_NOT_BEFORE"] == "2026-01-01T00:15:00.000Z"
    assert env["SE_SECONDS_UNTIL_NOT_BEFORE"] == "900"
    assert env["SE_DURATION_SECONDS"] == "-1" and env["SE_RESOURCES"] == "vm-a,vm-b"
    assert env["SE_HOOK_PHASE"] == "pre" and env["SE_RECORD_PHASE"] == "FirstSeen"
    assert env["SE_VM_NAME"] == "vm-a" and env["SE_OUTCOME"] == ""
    stdin = json.loads(Path(f"{out}.stdin").read_text())
    assert stdin == json.loads(record().to_json())
    lines = [r.fields["line"] for r in caplog.records if r.getMessage() == "hook output"]
    assert lines == ["draining e-1", "second line"]


def test_a_hook_sees_only_a_few_agent_variables_and_its_own(tmp_path):
    out = tmp_path / "env"
    argv = script(tmp_path, f"env > {out}\n")
    environ = {
        "PATH": os.environ["PATH"],
        "HOME": "/home/agent",
        "SE_FORWARDER_SINKS__WEBHOOK__URL_ENV": "HOOK_URL",
        "HOOK_URL": "https://hooks.example/secret",
        "AZURE_CLIENT_SECRET": "s3cret",
    }
    assert go(argv, tmp_path, env_extra={"MY_SETTING": "x"}, environ=environ).ok
    text = out.read_text()
    assert "secret" not in text.lower() and "HOOK_URL" not in text
    assert "HOME=/home/agent" in text and "MY_SETTING=x" in text


def test_a_non_zero_exit_is_a_failure_with_its_status(tmp_path):
    r = go(script(tmp_path, "echo nope\nexit 3\n"), tmp_path)
    assert (r.state, r.exit_code, r.ok) == ("failed", 3, False)


def test_a_hook_that_hangs_is_killed_with_everything_it_started(tmp_path):
    pids = tmp_path / "pids"
    # The hook starts a child that ignores SIGTERM, then hangs itself.
    argv = script(tmp_path, f"(trap '' TERM; sleep 300) &\necho $! > {pids}\nsleep 300\n")
    t0 = time.monotonic()
    r = go(argv, tmp_path, timeout=1.0)
    assert r.state == "timeout" and not r.ok
    assert time.monotonic() - t0 < 10
    child = int(pids.read_text())
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and _alive(child):
        time.sleep(0.05)
    assert not _alive(child), "the hook's child outlived the timeout"


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def test_a_flood_of_output_is_read_to_the_end_but_logged_only_in_part(tmp_path, caplog):
    argv = script(
        tmp_path,
        "i=0\nwhile [ $i -lt 20000 ]; do echo line $i; i=$((i+1)); done\n"
        "head -c 100000 /dev/zero | tr '\\0' x\n",
    )
    with caplog.at_level(logging.INFO, logger="se_forwarder"):
        r = go(argv, tmp_path)
    assert r.ok and r.lines > 20000
    logged = [x for x in caplog.records if x.getMessage() == "hook output"]
    assert len(logged) == MAX_LOGGED_LINES
    done = [x for x in caplog.records if x.getMessage() == "hook succeeded"]
    assert done[0].fields["dropped_lines"] == r.lines - MAX_LOGGED_LINES


def test_a_hook_that_cannot_start_is_an_error(tmp_path):
    r = go([str(tmp_path / "gone")], tmp_path)
    assert (r.state, r.exit_code) == ("error", None)


def test_a_hook_that_does_not_read_a_large_record_still_runs(tmp_path):
    big = record(Description="x" * 300_000)
    assert go(script(tmp_path, "exit 0\n"), tmp_path, rec=big).ok


def test_the_journal_claims_once_and_remembers_across_a_reopened_store(tmp_path):
    store = Store(tmp_path / "state")
    j = Journal(store)
    assert j.claim("e-1", "pre", "drain", NOW)
    assert not j.claim("e-1", "pre", "drain", NOW + 1)
    assert j.claim("e-1", "post", "drain", NOW) and j.claim("e-2", "pre", "drain", NOW)
    j.finish("e-1", "pre", "drain", "ok", NOW + 5, 0)
    store.close()
    j = Journal(Store(tmp_path / "state"))
    assert j.get("e-1", "pre", "drain").state == "ok"
    assert j.get("e-2", "pre", "drain").state == "started"
    assert not j.claim("e-1", "pre", "drain", NOW + 9)
    assert j.prune({"e-2"}, NOW + 9 * 86_400_000) == 2  # e-1's two entries: closed and old
    assert j.get("e-1", "pre", "drain") is None and j.get("e-2", "pre", "drain") is not None


def test_windows_shell_and_environment_are_built_on_linux_too():
    env = {
        "ComSpec": r"C:\Windows\system32\cmd.exe",
        "Path": r"C:\bin",
        "SystemRoot": r"C:\W",
        "SECRET": "x",
    }
    assert process.shell_argv("echo hi", windows=True, environ=env) == [
        r"C:\Windows\system32\cmd.exe",
        "/d",
        "/s",
        "/c",
        "echo hi",
    ]
    assert process.base_environment(env, windows=True) == {
        "ComSpec": r"C:\Windows\system32\cmd.exe",
        "Path": r"C:\bin",
        "SystemRoot": r"C:\W",
    }
    assert process.shell_argv("echo hi", windows=False) == ["/bin/sh", "-c", "echo hi"]


@pytest.mark.parametrize(
    "program,problem",
    [
        ("", "empty"),
        ("/nonexistent/x", "no such file"),
        ("/tmp", "is a directory"),
        ("surely-not-a-program-here", "not found on PATH"),
    ],
)
def test_executable_problems_are_named(program, problem):
    assert problem in process.executable_problem(program)
    assert process.executable_problem("sh") is None


# -- hostile bytes and leftovers (issue 18) ------------------------------------------------------


def test_event_values_reach_the_environment_one_line_and_without_nul(tmp_path):
    """A NUL (a valid JSON escape in a Description) cannot be passed in an environment at all, and
    a line break would split a value for a line-based consumer (a header, a KEY=value file): both
    are replaced; the whole text as served is on stdin."""
    out = tmp_path / "desc"
    argv = script(tmp_path, f'printf "%s" "$SE_DESCRIPTION" > {out}\ncat > {out}.stdin\n')
    rec = record(
        Description="drain\u0000now\r\nor\nlater\x1b[31m",
        vm=VmIdentity(VmName="vm\u0000a", Computer="vm-a"),
    )
    r = go(argv, tmp_path, rec=rec)
    assert r.ok, r
    assert out.read_text() == "drain\ufffdnow or later\ufffd[31m"
    assert json.loads(Path(f"{out}.stdin").read_text())["Description"] == rec.Description
    env = environment(rec, hook="h", hook_phase="pre", now_ms=NOW, extra={})
    assert all("\x00" not in v and "\n" not in v and "\r" not in v for v in env.values())
    assert env["SE_VM_NAME"] == "vm\ufffda"


def test_an_environment_that_cannot_be_passed_is_an_error_not_an_exception(tmp_path):
    rec = record()
    r = run(
        script(tmp_path, "exit 0\n"),
        {"PATH": os.environ["PATH"], "BAD": "a\x00b"},
        (rec.to_json() + "\n").encode(),
        5.0,
        log=logs.get("actions"),
        fields={},
    )
    assert (r.state, r.exit_code) == ("error", None)


def test_what_a_hook_leaves_running_is_ended_when_it_exits(tmp_path, caplog):
    """A background child keeps the hook's process group (and its output pipe) alive: it is ended
    as soon as the hook itself exits, and the run is over at once, not at the timeout."""
    pids = tmp_path / "pids"
    argv = script(
        tmp_path,
        f"sleep 120 &\necho $! > {pids}\n(trap '' TERM; sleep 120) &\n"
        f"echo $! >> {pids}\necho done\nexit 0\n",
    )
    t0 = time.monotonic()
    with caplog.at_level(logging.INFO, logger="se_forwarder"):
        r = go(argv, tmp_path, timeout=60.0)
    assert r.ok and r.lines == 1
    assert time.monotonic() - t0 < 10
    children = [int(x) for x in pids.read_text().split()]
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and any(_alive(c) for c in children):
        time.sleep(0.05)
    assert not any(_alive(c) for c in children), "the hook's children outlived it"
    assert [x.getMessage() for x in caplog.records if "left" in x.getMessage()] == [
        "hook left processes running in its process group; they were ended"
    ]
