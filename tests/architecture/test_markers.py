"""Markers say what a test needs, so ``-m "not process"``, ``-m "not tls"`` or ``-m "not
external"`` leave out exactly the tests that would start processes, the TLS stand-ins or a
program from outside the venv, and ``tests/bench`` stays a lane of its own (deselected unless
``-m`` names it, as ``.ci/run`` does). Read from the source, in milliseconds: a test needs a
marker when its body, a fixture or helper of its module it uses (transitively), or a fixture of
tests/conftest.py by name, shows the sign below (code, or a fixture it takes); the marker may sit
on the test or on the module's ``pytestmark``."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from helpers import TESTS

SIGNS = {
    "process": re.compile(
        r"AgentProcess\(|se_forwarder_cmd|"
        r"\"se_forwarder\.cli\"|\"se_forwarder_testbed\.simulator\.command\""
    ),
    "tls": re.compile(
        r"\bAzureWorld\b|\bCollectorWorld\b|EventHubsStandIn|LogsIngestionStandIn|"
        r"standins\.tls"
    ),
    "external": re.compile(
        r"chromium\(|\"systemd-analyze\"|\"cloud-init\"|build_wheel\(|build_bundle\(|"
        # the Kusto language service (node): its two entry points, not every kql.* helper
        r"\bkql\.(?:analyze|ensure_tool)\(|results_or_fail\("
    ),
}
# fixtures (tests/conftest.py, tests/infra/conftest.py, tests/infra/install/conftest.py) by the
# marker of what they start or build
FIXTURES = {
    "agent_process": "process",
    "wheel": "external",
    "bundle": "external",
    "wheelhouse": "external",
    "lock": "external",
    "azure_lock": "external",
    "inst": "external",
}


def marks(nodes: list[ast.expr]) -> set[str]:
    """The ``pytest.mark.NAME`` names in decorators or a ``pytestmark`` value."""
    return {
        n.attr
        for d in nodes
        for n in ast.walk(d)
        if isinstance(n, ast.Attribute)
        and isinstance(n.value, ast.Attribute)
        and n.value.attr == "mark"
    }


def parametrized(fn: ast.FunctionDef) -> set[str]:
    """The arguments ``@pytest.mark.parametrize`` gives (they shadow fixtures of that name)."""
    return {
        name.strip()
        for d in fn.decorator_list
        if isinstance(d, ast.Call)
        and getattr(d.func, "attr", "") == "parametrize"
        and isinstance(d.args[0], ast.Constant)
        for name in str(d.args[0].value).split(",")
    }


def needed(path: Path) -> tuple[dict[str, ast.FunctionDef], dict[str, set[str]], set[str]]:
    """The tests of ``path``, the markers each needs, and the module's own ``pytestmark``."""
    src = path.read_text("utf-8")
    lines = src.splitlines()
    tree = ast.parse(src)
    funcs = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    module = set().union(
        *(
            marks([n.value])
            for n in tree.body
            if isinstance(n, ast.Assign)
            and any(getattr(t, "id", "") == "pytestmark" for t in n.targets)
        )
    )
    needs: dict[str, set[str]] = {}

    def need(name: str, seen: frozenset[str] = frozenset()) -> set[str]:
        if name not in needs:
            fn = funcs[name]
            text = "\n".join(lines[fn.lineno - 1 : fn.end_lineno])
            args = {a.arg for a in fn.args.args} - parametrized(fn)
            got = {m for m, sign in SIGNS.items() if sign.search(text)}
            got |= {FIXTURES[a] for a in args & FIXTURES.keys()}
            used = {n.id for n in ast.walk(fn) if isinstance(n, ast.Name)} | args
            for other in sorted(used & funcs.keys() - seen - {name}):
                got |= need(other, seen | {name})
            needs[name] = got
        return needs[name]

    tests = {name: fn for name, fn in funcs.items() if name.startswith("test_")}
    return tests, {name: need(name) for name in tests}, module


def unmarked(path: Path) -> list[tuple[str, str]]:
    """(test, marker) for every test of ``path`` that needs a marker it does not carry."""
    tests, needs, module = needed(path)
    return [
        (name, m)
        for name, fn in tests.items()
        for m in sorted(needs[name] - module - marks(fn.decorator_list))
    ]


def needlessly_external(path: Path) -> list[str]:
    """Every test of ``path`` marked ``external`` on itself that shows no sign of needing a program
    from outside the venv: ``-m "not external"`` would leave it out for nothing."""
    tests, needs, _ = needed(path)
    return [
        name
        for name, fn in tests.items()
        if "external" in marks(fn.decorator_list) and "external" not in needs[name]
    ]


def test_every_test_carries_the_markers_of_what_it_needs() -> None:
    missing = [
        f"{p.relative_to(TESTS)}::{name} needs @pytest.mark.{m}"
        for p in sorted(TESTS.rglob("test_*.py"))
        if p != Path(__file__)
        for name, m in unmarked(p)
    ]
    assert not missing, "\n".join(missing)


def test_no_test_is_marked_external_without_needing_a_program_from_outside() -> None:
    needless = [
        f"{p.relative_to(TESTS)}::{name}"
        for p in sorted(TESTS.rglob("test_*.py"))
        if p != Path(__file__)
        for name in needlessly_external(p)
    ]
    assert not needless, "\n".join(needless)


def test_the_benches_are_a_lane_of_their_own() -> None:
    for path in sorted((TESTS / "bench").rglob("test_*.py")):
        tree = ast.parse(path.read_text("utf-8"))
        assert "bench" in set().union(
            *(marks([n.value]) for n in tree.body if isinstance(n, ast.Assign))
        ), path


def test_a_test_without_its_marker_is_named(tmp_path: Path) -> None:
    """The check itself: a test that starts the agent as a process through a helper, unmarked."""
    path = tmp_path / "test_x.py"
    path.write_text(
        "import pytest\n\ndef start(agent_process):\n    return agent_process\n\n"
        "def test_a(agent_process):\n    start(agent_process)\n\n"
        "@pytest.mark.process\ndef test_b(agent_process):\n    pass\n\n"
        "def test_c():\n    pass\n",
        "utf-8",
    )
    assert unmarked(path) == [("test_a", "process")]


def test_a_test_marked_external_for_nothing_is_named(tmp_path: Path) -> None:
    """The check itself: a regex over a query string (a parameter named ``kql``) is no program."""
    path = tmp_path / "test_y.py"
    path.write_text(
        "import pytest\n\ndef words(kql):\n    return kql.split()\n\n"
        "@pytest.mark.external\ndef test_a():\n    assert words('a b') == ['a', 'b']\n\n"
        "@pytest.mark.external\ndef test_b():\n    kql.analyze([])\n",
        "utf-8",
    )
    assert needlessly_external(path) == ["test_a"]
