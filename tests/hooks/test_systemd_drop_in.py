"""The example drop-in that widens the sandbox for hooks is a valid drop-in for the shipped
unit: with every line of it enabled, the unit still verifies clean, and what it costs in
``systemd-analyze security`` exposure is printed (it widens; it must still be a unit)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import REPO

pytestmark = [pytest.mark.e2e, pytest.mark.external]

UNIT = REPO / "infra" / "systemd" / "se-forwarder.service"
DROP_IN = REPO / "infra" / "systemd" / "se-forwarder.service.d" / "hooks.conf.example"


def analyze(*args: str) -> subprocess.CompletedProcess:
    exe = shutil.which("systemd-analyze")
    assert exe, "systemd-analyze is needed (Debian package systemd)"
    return subprocess.run([exe, *args], capture_output=True, text=True, timeout=60, check=False)


def enabled_lines() -> list[str]:
    """Every commented-out directive of the example, enabled."""
    return [
        line[1:] for line in DROP_IN.read_text().splitlines() if re.match(r"#[A-Z][A-Za-z]+=", line)
    ]


def merged(tmp_path: Path, lines: list[str]) -> Path:
    """The unit with the drop-in's [Service] lines applied (later assignments win, as in a
    drop-in; list settings such as ReadWritePaths add up)."""
    text = UNIT.read_text().replace("\n[Install]", "\n" + "\n".join(lines) + "\n\n[Install]")
    exe = Path(sys.executable).parent / "se-forwarder"  # ExecStart must exist to verify
    text = text.replace("/opt/se-forwarder/current/bin/se-forwarder", str(exe))
    path = tmp_path / "se-forwarder.service"
    path.write_text(text)
    return path


def exposure(path: Path) -> float:
    out = analyze("security", "--offline=true", str(path)).stdout
    return float(re.search(r"Overall exposure level for \S+: (\d+(?:\.\d+)?)", out).group(1))


def test_the_drop_in_enabled_in_full_is_a_valid_unit(tmp_path):
    lines = enabled_lines()
    assert "ReadWritePaths=/var/lib/myapp" in lines and "MemoryDenyWriteExecute=no" in lines
    assert "LoadCredential=teams-token:/etc/se-forwarder/credentials/teams-token" in lines
    assert DROP_IN.read_text().count("\n[Service]\n") == 1
    shipped = exposure(merged(tmp_path, []))
    path = merged(tmp_path, lines)
    r = analyze("verify", str(path))
    assert r.returncode == 0 and (r.stdout + r.stderr).strip() == "", r.stdout + r.stderr
    widened = exposure(path)
    print(f"exposure: shipped {shipped}, with every widening of the example {widened}")
    assert widened > shipped  # it does widen the sandbox


def test_verify_catches_a_typo_in_a_drop_in_line(tmp_path):
    r = analyze("verify", str(merged(tmp_path, ["MemoryDenyWriteExecute=perhaps"])))
    assert "Failed to parse boolean value, ignoring: perhaps" in r.stdout + r.stderr
