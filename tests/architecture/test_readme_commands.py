"""The README's command table names only flags the commands accept (docs drift silently)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from se_forwarder import cli

README = Path(__file__).resolve().parents[2] / "README.md"


def _rows() -> list[tuple[list[str], list[str]]]:
    """(the command and its subcommand if any, the flags the row names)."""
    rows = []
    for line in README.read_text("utf-8").splitlines():
        m = re.match(
            r"\| `se-forwarder (?P<cmd>[a-z-]+)(?P<sub> [a-z][a-z-]*)?(?P<rest>[^`]*)` \|", line
        )
        if m:
            words = [m["cmd"]] + ([m["sub"].strip()] if m["sub"] else [])
            rows.append((words, re.findall(r"--[a-z][a-z-]*", m["rest"])))
    return rows


def test_every_flag_in_the_readme_command_table_exists(capsys):
    rows = _rows()
    assert {words[0] for words, _ in rows} >= {
        "run",
        "check-config",
        "status",
        "replay",
        "simulate",
        "demo",
        "report",
        "standin",
    }
    assert ["standin", "webhook"] in [words for words, _ in rows]
    for words, flags in rows:
        with pytest.raises(SystemExit):
            cli.main([*words, "--help"])
        known = set(re.findall(r"--[a-z][a-z-]*", capsys.readouterr().out))
        assert set(flags) <= known, (words, sorted(set(flags) - known))
