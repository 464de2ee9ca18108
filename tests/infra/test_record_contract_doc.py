"""docs/record-contract.md, the project's own contract, against contract.json (exactly) and
against ../shared/spec/record-contract.md, its baseline (every line of the baseline still there,
unchanged and in order: no column, meaning or rule removed or rewritten)."""

from __future__ import annotations

import re

import pytest
from helpers import REPO
from helpers.infra.paths import CONTRACT_MD, contract

DOC = REPO / "docs" / "record-contract.md"


def section(md: str, number: int) -> str:
    return md.split(f"\n## {number}.", 1)[1].split("\n## ", 1)[0]


def column_rows(text: str) -> list[tuple[str, str, str]]:
    """(column, type, meaning) of the first `| column | type | meaning |` table in ``text``."""
    rows: list[tuple[str, str, str]] = []
    in_table = False
    for line in text.splitlines():
        if line.startswith("| column | type |"):
            in_table = True
            continue
        if not in_table or set(line.strip()) <= {"|", "-", " "}:
            if in_table and rows and not line.startswith("|"):
                break
            continue
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip().strip("|").split("|", 2)]
        for name in re.findall(r"`([A-Za-z]+)`", cells[0]):
            rows.append((name, cells[1], cells[2]))
    return rows


def missing_baseline_lines(baseline: str, doc: str) -> list[str]:
    """Lines of ``baseline`` not found in ``doc`` in the same order (blank lines aside)."""
    lines = doc.splitlines()
    at, missing = 0, []
    for line in baseline.splitlines():
        if not line.strip():
            continue
        try:
            at = lines.index(line, at) + 1
        except ValueError:
            missing.append(line)
    return missing


@pytest.fixture(scope="module")
def doc() -> str:
    return DOC.read_text("utf-8")


def _contract_rows(key: str) -> list[tuple[str, str, str]]:
    return [(c["name"], c["type"], c["description"]) for c in contract()["tables"][key]["columns"]]


def test_platform_table_matches_contract_json_exactly(doc):
    assert column_rows(section(doc, 6)) == _contract_rows("platform")
    spec = contract()["tables"]["platform"]
    heading = doc.split("\n## 6.", 1)[1].splitlines()[0]
    assert f"`{spec['table']}`" in heading and f"`{spec['stream']}`" in heading


def test_records_table_matches_contract_json_names_and_types(doc):
    assert [(n, t) for n, t, _ in column_rows(section(doc, 2))] == [
        (n, t) for n, t, _ in _contract_rows("records")
    ]


def test_every_baseline_line_is_still_in_the_project_contract(doc):
    assert CONTRACT_MD.is_file(), f"{CONTRACT_MD} not found (shared specs beside the repository)"
    assert missing_baseline_lines(CONTRACT_MD.read_text("utf-8"), doc) == []


def test_a_changed_or_removed_baseline_column_is_refused(doc):
    baseline = CONTRACT_MD.read_text("utf-8")
    retyped = doc.replace("| `DurationInSeconds` | int |", "| `DurationInSeconds` | long |")
    removed = "\n".join(line for line in doc.splitlines() if not line.startswith("| `EventSource`"))
    reworded = doc.replace(
        "deterministic idempotency key: the same (VM", "an idempotency key: the same (VM"
    )
    for bad in (retyped, removed, reworded):
        assert bad != doc
        assert missing_baseline_lines(baseline, bad) != []


def test_a_platform_column_out_of_step_with_contract_json_is_refused(doc):
    bad = doc.replace(
        "| `EventStatus` | string | Scheduled, Started, Completed or Canceled",
        "| `EventStatus` | dynamic | Scheduled, Started, Completed or Canceled",
    )
    assert bad != doc and column_rows(section(bad, 6)) != _contract_rows("platform")
