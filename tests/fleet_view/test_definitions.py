"""One home for the fleet view's definitions (dashboards/definitions/): every query that uses one
holds the definition's current text (tools/build_definitions.py writes it there), and no query
spells a definition out by itself, so the workbooks, the library and the alerts cannot disagree
about what alive, silent, gone, open or a hardware failure is."""

from __future__ import annotations

import importlib.util
import re

import pytest
from helpers.infra.paths import DASHBOARDS, REPO

_spec = importlib.util.spec_from_file_location(
    "build_definitions", REPO / "tools" / "build_definitions.py"
)
build = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(build)

DEFS = build.definitions()
FILES = build.query_files()

#: what only a definition may say (each is the heart of one definition)
OWN_WORDS = {
    "vm-state": [
        r"GoneAt\s*>=\s*TimeGenerated\s*-\s*30m",
        r'Reason\s*==\s*"stop"\s+and\s+(now\(\)\s*-\s*TimeGenerated\s*<|TimeGenerated\s*>\s*ago\()\s*1h',
    ],
    "event-state": [r"mv-expand\s+\w+\s*=\s*OpenEventList", r'Phase\s*!=\s*"Removed"'],
    "hardware-failures": [r"UncertaintySeconds\s*<=\s*10"],
}


def test_the_queries_hold_the_current_definitions():
    stale = [str(f.relative_to(DASHBOARDS)) for f, _ in build.stale()]
    assert stale == [], "run `python tools/build_definitions.py` (stale: " + ", ".join(stale) + ")"


#: definitions of the alert rules alone, and why: what one rule pages that another must not page
#: again is a question of the alerts, not of any view
ALERTS_ONLY = {
    "fleet-paged": "the VMs impactful-events-fleet pages for, left out by the unwatched rule",
    "alert-cap": "Azure's limit of alerts per evaluation: only alert rules have one",
}


def test_every_definition_is_used_by_workbooks_library_and_alerts():
    users: dict[str, set[str]] = {name: set() for name in DEFS}
    for f in FILES:
        rel = f.relative_to(DASHBOARDS / "queries").parts
        kind = "workbook" if rel[0] == "workbook" else "alert" if rel[0] == "alerts" else "library"
        for name in build.uses(f.read_text("utf-8")):
            users[name].add(kind)
    assert users == {
        name: {"alert"} if name in ALERTS_ONLY else {"workbook", "library", "alert"}
        for name in DEFS
    }


@pytest.mark.parametrize("name", sorted(OWN_WORDS))
def test_no_query_spells_a_definition_out_by_itself(name):
    for f in FILES:
        outside = build.render(f.read_text("utf-8"), dict.fromkeys(DEFS, ""))
        code = "\n".join(line.split("//")[0] for line in outside.splitlines())
        for pattern in OWN_WORDS[name]:
            assert not re.search(pattern, code), (
                f"{f.relative_to(DASHBOARDS)} spells out {name}: {pattern}"
            )
    for pattern in OWN_WORDS[name]:  # the patterns do find the definition itself
        assert re.search(pattern, DEFS[name]), pattern


def test_a_changed_definition_makes_its_users_stale(tmp_path):
    changed = {**DEFS, "vm-state": DEFS["vm-state"].replace("ago(15m)", "ago(20m)")}
    stale = {f.name for f, _ in build.stale(defs=changed)}
    assert {"agent-silent.kql", "fleet.kql", "now-tiles.kql", "agents-coverage.kql"} <= stale
