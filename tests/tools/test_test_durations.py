"""tools/test_durations.py and the order it gives the suite: the longest modules start first."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TOOL = REPO / "tools" / "test_durations.py"


def _tool():
    spec = importlib.util.spec_from_file_location("test_durations_tool", TOOL)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_seconds_are_summed_per_module_from_junit(tmp_path: Path) -> None:
    junit = tmp_path / "run.xml"
    junit.write_text(
        '<testsuites><testsuite name="pytest">'
        '<testcase classname="tests.a.test_x" name="test_1" time="1.25"/>'
        '<testcase classname="tests.a.test_x" name="test_2" time="2.5"/>'
        '<testcase classname="tests.a.test_x.TestGroup" name="test_3" time="0.25"/>'
        '<testcase classname="tests.infra.install.test_y" name="test_1" time="7"/>'
        "</testsuite></testsuites>"
    )
    assert _tool().module_seconds(junit) == {
        "tests/infra/install/test_y.py": 7.0,
        "tests/a/test_x.py": 4.0,
    }


def test_the_recorded_modules_exist() -> None:
    """A renamed module would silently lose its place: refresh with tools/test_durations.py."""
    recorded = json.loads((REPO / "tests" / "durations.json").read_text())
    assert recorded, "tests/durations.json is empty"
    assert [m for m in recorded if not (REPO / m).is_file()] == []


@pytest.mark.slow
def test_collection_starts_with_the_longest_module_and_keeps_each_whole() -> None:
    recorded = json.loads((REPO / "tests" / "durations.json").read_text())
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--collect-only",
            "-q",
            "-p",
            "no:cacheprovider",
            "tests/tools",
            "tests/tracker",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    modules = [line.split("::")[0] for line in out.splitlines() if "::" in line]
    order = [m for n, m in enumerate(modules) if n == 0 or modules[n - 1] != m]
    assert len(order) == len(set(modules)), "a module's tests were split apart"
    weights = [recorded.get(m, 0.0) for m in order]
    assert weights == sorted(weights, reverse=True)
    assert weights[0] > weights[-1]
