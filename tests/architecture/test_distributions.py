"""Two distributions from this repository: ``se-forwarder`` (the agent, the collector, the report)
and ``se-forwarder-testbed`` (testbed/: the simulator, the stand-ins, the demo). Each wheel built
by pip from a clean copy holds its own package only; the test bed, installed into a fresh venv
beside the agent's wheel, adds its commands to ``se-forwarder`` through its entry points, and
without it the agent has none of them."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import urllib.request
import zipfile
from pathlib import Path

import pytest
from helpers import REPO
from helpers.installer import build_wheel, run
from helpers.once import once

pytestmark = [pytest.mark.e2e, pytest.mark.external, pytest.mark.slow, pytest.mark.process]

TESTBED_COMMANDS = {"simulate", "demo", "standin"}


def _testbed_wheel(work: Path) -> Path:
    """The test bed's wheel, built from a clean copy of testbed/ (the tree is not written to)."""
    proj = work / "testbed"
    shutil.copytree(
        REPO / "testbed",
        proj,
        ignore=shutil.ignore_patterns("*.egg-info", "__pycache__", "build", "dist"),
    )
    run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "-q",
            "-w",
            str(work / "dist"),
            str(proj),
        ]
    )
    (wheel,) = (work / "dist").glob("se_forwarder_testbed-*.whl")
    return wheel


@pytest.fixture(scope="module")
def wheels(tmp_path_factory) -> dict[str, Path]:
    """The agent's wheel is the one the installer tests install (tests/infra/conftest.py), built
    once per run whichever module asks first."""
    return {
        "agent": once(tmp_path_factory, "wheel", build_wheel),
        "testbed": once(tmp_path_factory, "testbed-wheel", _testbed_wheel),
    }


def _names(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as z:
        return z.namelist()


def _read(wheel: Path, suffix: str) -> str:
    with zipfile.ZipFile(wheel) as z:
        (name,) = [n for n in z.namelist() if n.endswith(suffix)]
        return z.read(name).decode()


def test_the_agents_wheel_holds_the_agent_and_no_test_bed(wheels):
    names = _names(wheels["agent"])
    tops = {n.split("/")[0] for n in names}
    assert tops == {"se_forwarder", "se_forwarder-0.1.0.dist-info"}
    assert not [n for n in names if "testbed" in n or n.endswith("agentrun.py")]
    # the report's data came along with its sub-packages
    assert "se_forwarder/report/workbooks/maintenanceresources.json" in names
    assert "se_forwarder/report/render/templates/page.html.j2" in names
    assert "se_forwarder/contract.json" in names
    entry_points = _read(wheels["agent"], ".dist-info/entry_points.txt")
    assert "se_forwarder.commands" not in entry_points


def test_the_test_beds_wheel_holds_the_test_bed_and_registers_its_commands(wheels):
    names = _names(wheels["testbed"])
    tops = {n.split("/")[0] for n in names}
    assert tops == {"se_forwarder_testbed", "se_forwarder_testbed-0.1.0.dist-info"}
    assert "se_forwarder_testbed/demo/fleets/fleet.toml" in names
    assert [n for n in names if n.startswith("se_forwarder_testbed/simulator/scenarios/")]
    assert not [n for n in names if n.endswith("agentrun.py")]  # the tests' own harness
    entry_points = _read(wheels["testbed"], ".dist-info/entry_points.txt")
    section = entry_points.split("[se_forwarder.commands]")[1].split("[")[0]
    assert {line.split("=")[0].strip() for line in section.splitlines() if line.strip()} == (
        TESTBED_COMMANDS
    )
    requires = [
        line.split(":", 1)[1].strip()
        for line in _read(wheels["testbed"], ".dist-info/METADATA").splitlines()
        if line.startswith("Requires-Dist:") and "extra ==" not in line
    ]
    assert {r.split("=")[0].split(">")[0] for r in requires} == {
        "se-forwarder",
        "cryptography",
        "python-qpid-proton",
    }


def _commands(venv: Path) -> str:
    return run([str(venv / "bin" / "se-forwarder"), "--help"]).stdout


def test_the_test_bed_installed_beside_the_agent_adds_its_commands(wheels, tmp_path):
    """A fresh venv: the agent's wheel alone knows none of the test bed's commands; with the test
    bed's wheel installed (its dependencies from the index), ``simulate`` serves IMDS. The venv
    has no pip of its own: this interpreter's pip installs into it (``pip --python``), which
    spares seeding one (ensurepip: seconds of CPU) that nothing here uses."""
    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", "--without-pip", str(venv)])
    pip = [
        sys.executable,
        "-m",
        "pip",
        "--python",
        str(venv / "bin" / "python"),
        "install",
        "-q",
        "--disable-pip-version-check",
    ]
    run([*pip, str(wheels["agent"])])
    assert not TESTBED_COMMANDS & set(_commands(venv).split())
    alone = subprocess.run(
        [str(venv / "bin" / "se-forwarder"), "simulate"],
        check=False,
        capture_output=True,
        text=True,
    )
    assert alone.returncode == 2 and "invalid choice: 'simulate'" in alone.stderr
    run([*pip, str(wheels["testbed"])])
    assert set(_commands(venv).split()) >= TESTBED_COMMANDS
    sim = subprocess.Popen(
        [str(venv / "bin" / "se-forwarder"), "simulate", "--scenario", "cancelled"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
    )
    try:
        url = sim.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:"), url or sim.stderr.read()
        request = urllib.request.Request(
            f"{url}/metadata/scheduledevents?api-version=2020-07-01", headers={"Metadata": "true"}
        )
        direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback, no proxy
        with direct.open(request, timeout=10) as answer:
            assert "Events" in json.loads(answer.read())
    finally:
        sim.terminate()
        assert sim.wait(timeout=30) == 0
