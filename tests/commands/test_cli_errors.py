"""Every command, given malformed arguments, answers with one readable line and exit 2: never a
traceback (the README's promise)."""

from __future__ import annotations

import subprocess
import sys

import pytest

CLI = [sys.executable, "-m", "se_forwarder.cli"]


def cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*CLI, *args], capture_output=True, text=True, timeout=timeout, check=False
    )


@pytest.fixture
def paths(tmp_path):
    (tmp_path / "a-file").write_text("not a directory\n")
    (tmp_path / "bad.jsonl").write_text('{"at": "soon"}\n')
    (tmp_path / "good.jsonl").write_text(
        '{"at": "2024-01-01T00:00:00Z", "status": 200, "body": {"DocumentIncarnation": 1, '
        '"Events": []}}\n'
    )
    (tmp_path / "bad.toml").write_text("[agent\n")
    (tmp_path / "a-dir").mkdir()
    return tmp_path


CASES = [
    ["demo", "--speed", "0"],
    ["demo", "--speed", "-5"],
    ["demo", "--speed", "fast"],
    ["demo", "--dir", "{p}/a-file"],
    ["demo", "--scenario", "no-such-scenario"],
    ["replay", "{p}/good.jsonl", "--state-dir", "{p}/a-file"],
    ["replay", "{p}/missing.jsonl"],
    ["replay", "{p}/bad.jsonl"],
    ["simulate", "--port", "99999"],
    ["simulate", "--speed", "0"],
    ["simulate", "--rate-limit", "-1"],
    ["simulate", "--first-call-delay", "-2"],
    ["simulate", "--scenario", "no-such-scenario"],
    ["simulate", "--trace", "{p}/missing.jsonl"],
    ["standin", "logs-ingestion", "--port", "99999"],
    ["standin", "logs-ingestion", "--tls-dir", "{p}/a-file"],
    ["status", "--state-dir", "{p}/a-file"],
    ["status", "--state-dir", "{p}/a-dir", "--stale-after", "-1"],
    ["status", "--state-dir", "{p}/a-dir", "--max-poll-age", "0"],
    ["status", "--state-dir", "{p}/a-dir", "--startup-grace", "-5"],
    ["run", "--config", "{p}/missing.toml"],
    ["run", "--config", "{p}/bad.toml"],
    ["run", "--log-format", "xml"],
    ["check-config", "--config", "{p}/missing.toml"],
    ["check-config", "--config", "{p}/a-dir"],
    ["no-such-command"],
    [],
]


@pytest.mark.parametrize("args", CASES, ids=[" ".join(c) or "(none)" for c in CASES])
def test_malformed_arguments_give_one_line_and_exit_2(paths, args):
    r = cli(*[a.format(p=paths) for a in args])
    assert "Traceback" not in r.stderr and "Traceback" not in r.stdout, r.stderr
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert r.stderr.strip(), "say what is wrong"


def test_a_reader_that_leaves_early_is_not_a_traceback(tmp_path):
    """`status --json | head -c 1`: the reader is gone before the output is written."""
    (tmp_path / "status.json").write_text('{"version": "0.1.0", "pid": 1}')
    proc = subprocess.Popen(
        [*CLI, "status", "--json", "--state-dir", str(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    proc.stdout.close()  # before the command has even started writing
    err = proc.stderr.read()
    proc.wait(60)
    assert "Traceback" not in err and "BrokenPipe" not in err, err


def test_the_exit_status_is_the_error_class_s(monkeypatch, capsys):
    """An error a command lets through exits with its class's ``exit_code`` (2: bad input, 1: a
    failure at run time), whatever class it is: no list of classes in the CLI to keep up to date."""
    import argparse

    from se_forwarder import cli, errors

    class Refused(errors.SeForwarderError):  # a new kind of bad input
        exit_code = 2

    class Broke(errors.SeForwarderError):
        pass

    for error, code in (
        (Refused("bad key"), 2),
        (Broke("disk gone"), 1),
        (errors.TraceError("t:1: bad"), 2),
        (errors.StateError("locked"), 1),
    ):

        def run(args: argparse.Namespace, error: Exception = error) -> int:
            raise error

        probe = argparse.Namespace(configure=lambda parser: None, run=run)
        monkeypatch.setitem(cli.COMMANDS, "probe", ("probe", "a probe"))
        monkeypatch.setattr(cli, "_load", lambda module, probe=probe: probe)
        assert cli.main(["probe"]) == code
        assert capsys.readouterr().err.strip() == f"se-forwarder probe: {error}"


def test_every_error_class_says_its_exit_status():
    from se_forwarder import errors

    classes = [
        c
        for c in vars(errors).values()
        if isinstance(c, type) and issubclass(c, errors.SeForwarderError)
    ]
    assert {c.__name__: c.exit_code for c in classes if c.exit_code == 2} == {
        "ConfigError": 2,
        "TraceError": 2,
        "ReportError": 2,
        "ScenarioError": 2,
    }
    assert all(c.exit_code in (1, 2) for c in classes)
