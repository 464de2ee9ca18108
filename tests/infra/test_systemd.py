"""The hardened systemd units (the agent's, and the collector's sandboxed alike):
`systemd-analyze verify` clean, security exposure <= 2.5, the directives the service relies on,
and IMDS still reachable through its IP filter.

Needs `systemd-analyze` (Debian package `systemd`). The tests fail, not skip, without it.
"""

from __future__ import annotations

import ipaddress
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import REPO

pytestmark = pytest.mark.e2e

UNIT = REPO / "infra" / "systemd" / "se-forwarder.service"
COLLECTOR_UNIT = REPO / "infra" / "systemd" / "se-forwarder-collector.service"
UNITS = [UNIT, COLLECTOR_UNIT]
# What the collector's unit may set apart from the agent's; everything else is the same.
COLLECTOR_OWN = {
    ("Unit", "Description"),
    ("Service", "ExecStart"),
    ("Service", "StateDirectory"),
    ("Service", "RuntimeDirectory"),
    ("Service", "WorkingDirectory"),
}
INSTALL_SH = REPO / "infra" / "scripts" / "install.sh"
MAX_EXPOSURE = 2.5


def systemd_analyze() -> str:
    exe = shutil.which("systemd-analyze")
    assert exe, "systemd-analyze not found: apt-get install systemd"
    return exe


def parse_unit(text: str) -> dict[str, dict[str, list[str]]]:
    """section -> key -> values (repeated keys accumulate), continuation lines joined."""
    out: dict[str, dict[str, list[str]]] = {}
    section = None
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i].strip()
        i += 1
        if not line or line.startswith(("#", ";")):
            continue
        while line.endswith("\\") and i < len(lines):
            line = line[:-1] + " " + lines[i].strip()
            i += 1
        if line.startswith("["):
            section = line.strip("[]")
            out.setdefault(section, {})
            continue
        key, _, value = line.partition("=")
        assert section, f"directive outside a section: {line}"
        out[section].setdefault(key.strip(), []).append(value.strip())
    return out


@pytest.fixture(scope="module", params=UNITS, ids=lambda p: p.name)
def unit(request) -> dict[str, dict[str, list[str]]]:
    return parse_unit(request.param.read_text())


def unit_copy(tmp_path: Path, text: str | None = None, source: Path = UNIT) -> Path:
    """The unit with ExecStart pointing at an executable that exists on this machine."""
    exe = Path(sys.executable).parent / "se-forwarder"
    assert exe.exists(), f"{exe} missing: pip install -e . in the venv"
    text = source.read_text() if text is None else text
    assert "/opt/se-forwarder/current/bin/se-forwarder" in text
    path = tmp_path / source.name
    path.write_text(text.replace("/opt/se-forwarder/current/bin/se-forwarder", str(exe)))
    return path


def verify(path: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [systemd_analyze(), "verify", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=path.parent,
        check=False,
    )


def exposure(path: Path) -> tuple[float, str]:
    r = subprocess.run(
        [systemd_analyze(), "security", "--offline=true", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=path.parent,
        check=False,
    )
    m = re.search(r"Overall exposure level for \S+: (\d+(?:\.\d+)?)", r.stdout)
    assert m, f"no exposure figure in output:\n{r.stdout}\n{r.stderr}"
    return float(m.group(1)), r.stdout


@pytest.mark.external
@pytest.mark.parametrize("source", UNITS, ids=lambda p: p.name)
def test_verify_prints_nothing(tmp_path, source):
    r = verify(unit_copy(tmp_path, source=source))
    assert r.returncode == 0 and r.stdout == "" and r.stderr == "", r.stdout + r.stderr


@pytest.mark.external
def test_verify_would_catch_a_broken_unit(tmp_path):
    # control: the check above is not vacuous on this systemd version
    bad = UNIT.read_text().replace("ProtectSystem=strict", "ProtectSystem=strict\nProtectSytem=yes")
    r = verify(unit_copy(tmp_path, bad))
    assert "ProtectSytem" in r.stdout + r.stderr


@pytest.mark.external
@pytest.mark.parametrize("source", UNITS, ids=lambda p: p.name)
def test_security_exposure_at_most_2_5(tmp_path, source):
    score, report = exposure(unit_copy(tmp_path, source=source))
    print(f"systemd-analyze security exposure of {source.name}: {score}")
    assert score <= MAX_EXPOSURE, report


@pytest.mark.external
def test_security_score_reacts_to_hardening(tmp_path):
    # control: a unit with the same ExecStart and no sandboxing scores far worse
    bare = (
        "[Unit]\nDescription=x\n[Service]\n"
        "ExecStart=/opt/se-forwarder/current/bin/se-forwarder run\n"
    )
    score, _ = exposure(unit_copy(tmp_path, bare))
    assert score > 8.0


def test_required_directives(unit):
    svc, u = unit["Service"], unit["Unit"]
    assert svc["DynamicUser"] == ["yes"] or svc.get("User", [""])[0] not in ("", "root")
    assert svc["StateDirectory"][0] in ("se-forwarder", "se-forwarder-collector")
    assert (
        svc["RuntimeDirectory"] == svc["StateDirectory"]
    )  # status.json's copy (RUNTIME_DIRECTORY)
    assert svc["WorkingDirectory"] == [f"/var/lib/{svc['StateDirectory'][0]}"]
    assert svc["ProtectSystem"] == ["strict"]
    assert svc["NoNewPrivileges"] == ["yes"]
    assert svc["PrivateTmp"] == ["yes"]
    assert svc["CapabilityBoundingSet"] == [""]
    filters = svc["SystemCallFilter"]
    assert "@system-service" in filters and any(f.startswith("~") for f in filters)
    families = svc["RestrictAddressFamilies"][0].split()
    assert {"AF_INET", "AF_INET6"} <= set(families) and "AF_PACKET" not in families
    assert svc["Restart"] == ["always"]
    assert svc["RestartSec"][0].rstrip("s").isdigit() and int(svc["RestartSec"][0].rstrip("s")) >= 1
    assert u["StartLimitIntervalSec"] == ["0"], "must keep restarting, never give up"
    assert "network-online.target" in u["After"][0] and "network-online.target" in u["Wants"][0]
    assert svc["KillSignal"] == ["SIGTERM"]
    stop = int(svc["TimeoutStopSec"][0].rstrip("s"))
    assert 10 <= stop <= 90
    assert unit["Install"]["WantedBy"] == ["multi-user.target"]


def test_execstart_matches_installer_layout(unit):
    exec_start = unit["Service"]["ExecStart"][0].split()
    assert exec_start[0] == "/opt/se-forwarder/current/bin/se-forwarder"
    assert exec_start[1:] in (
        ["run", "--config", "/etc/se-forwarder/config.toml"],
        ["collect", "--config", "/etc/se-forwarder/collector.toml"],
    )


def test_the_collector_unit_is_sandboxed_as_the_agents():
    """Every directive of the agent's unit, the same, but for what names the collector: a
    hardening added to one and not the other fails here."""
    agent, collector = parse_unit(UNIT.read_text()), parse_unit(COLLECTOR_UNIT.read_text())

    def directives(u):
        return {
            (sec, k): v
            for sec, kv in u.items()
            for k, v in kv.items()
            if (sec, k) not in COLLECTOR_OWN
        }

    assert directives(collector) == directives(agent)
    exec_start = (
        "/opt/se-forwarder/current/bin/se-forwarder collect --config "
        "/etc/se-forwarder/collector.toml"
    )
    assert collector["Service"]["ExecStart"] == [exec_start]
    assert collector["Service"]["StateDirectory"] == ["se-forwarder-collector"]
    doc = (REPO / "docs" / "collector.md").read_text()
    assert 'state_dir = "/var/lib/se-forwarder-collector"' in doc  # where the unit lets it write


@pytest.mark.parametrize(
    "source,role", [(UNIT, []), (COLLECTOR_UNIT, ["--collector"])], ids=["agent", "collector"]
)
def test_installer_carries_this_exact_unit(source, role):
    """install.sh writes the unit of the role it installs (``--collector``: the collector's),
    each identical to the file here, whatever the order of the options."""
    for argv in (["--print-unit", *role], [*role, "--print-unit"]):
        r = subprocess.run(
            ["bash", str(INSTALL_SH), *argv],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        assert r.returncode == 0, r.stderr
        assert r.stdout == source.read_text()


# -- IPAddressAllow=/IPAddressDeny= semantics (systemd.resource-control(5)) --------------------

_SYMBOLIC = {
    "any": ["0.0.0.0/0", "::/0"],
    "localhost": ["127.0.0.0/8", "::1/128"],
    "link-local": ["169.254.0.0/16", "fe80::/64"],
    "multicast": ["224.0.0.0/4", "ff00::/8"],
}


def _nets(values: list[str]) -> list:
    nets = []
    for value in values:
        for item in value.split():
            for n in _SYMBOLIC.get(item, [item]):
                nets.append(ipaddress.ip_network(n, strict=False))
    return nets


def ip_permitted(unit, addr: str) -> bool:
    """Allowed if in the allow list; else denied if in the deny list; else allowed."""
    svc = unit["Service"]
    ip = ipaddress.ip_address(addr)
    allow, deny = _nets(svc.get("IPAddressAllow", [])), _nets(svc.get("IPAddressDeny", []))
    if any(ip.version == n.version and ip in n for n in allow):
        return True
    return not any(ip.version == n.version and ip in n for n in deny)


def test_ip_filter_semantics_self_check():
    toy = {"Service": {"IPAddressDeny": ["any"], "IPAddressAllow": ["10.0.0.0/8"]}}
    assert ip_permitted(toy, "10.1.2.3") and not ip_permitted(toy, "8.8.8.8")


@pytest.mark.parametrize(
    "addr",
    [
        "169.254.169.254",  # IMDS
        "168.63.129.16",  # Azure DNS / wire server
        "20.42.65.92",  # a public Azure address (Logs Ingestion, Event Hubs, Entra ID)
        "127.0.0.53",  # systemd-resolved stub resolver
        "10.0.0.4",  # private endpoints in the VNET
        "2603:1030::1",  # Azure IPv6
    ],
)
def test_needed_addresses_reachable(unit, addr):
    assert ip_permitted(unit, addr), f"{addr} blocked by the unit's IP filter"
