"""The README's command table names only flags the commands accept (docs drift silently)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from se_forwarder import cli

README = Path(__file__).resolve().parents[2] / "README.md"


def _rows() -> list[tuple[str, list[str]]]:
    rows = []
    for line in README.read_text("utf-8").splitlines():
        m = re.match(r"\| `se-forwarder (?P<cmd>[a-z-]+)(?P<rest>[^`]*)` \|", line)
        if m:
            rows.append((m["cmd"], re.findall(r"--[a-z][a-z-]*", m["rest"])))
    return rows


def test_every_flag_in_the_readme_command_table_exists(capsys):
    rows = _rows()
    assert {cmd for cmd, _ in rows} >= {"run", "check-config", "status", "replay", "simulate",
                                        "demo", "report"}
    for cmd, flags in rows:
        with pytest.raises(SystemExit):
            cli.main([cmd, "--help"])
        known = set(re.findall(r"--[a-z][a-z-]*", capsys.readouterr().out))
        assert set(flags) <= known, (cmd, sorted(set(flags) - known))
