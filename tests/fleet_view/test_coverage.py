"""Every Log Analytics query of the project is executed by a test of this folder, except the few
listed here with the reason; the list may not grow, and at least 90 % of the queries run."""

from __future__ import annotations

from pathlib import Path

from helpers.infra.paths import QUERIES

HERE = Path(__file__).parent

NOT_EXECUTED = {
    "workbook/agent-health/arg-vms.kql": (
        "Azure Resource Graph (resources table), not Log Analytics: no local engine for it; "
        "tests/infra/test_workbooks.py checks its shape"
    ),
    "workbook/agent-health/arg-scale-set-vms.kql": (
        "Azure Resource Graph (computeresources table), not Log Analytics: no local engine for "
        "it; tests/infra/test_workbooks.py checks its shape"
    ),
}


def _all_queries() -> list[str]:
    return sorted(p.relative_to(QUERIES).as_posix() for p in QUERIES.rglob("*.kql"))


def _test_sources() -> str:
    return "\n".join(
        p.read_text("utf-8") for p in sorted(HERE.glob("test_*.py")) if p != Path(__file__)
    )


def _reference(query: str) -> str:
    """How a test names a query: an alert by its rule key (alerts.bicep loads
    alerts/<key>.kql), a workbook file by <workbook>/<name>.kql, others by their path."""
    if query.startswith("alerts/"):
        return query.removeprefix("alerts/").removesuffix(".kql")
    return query.removeprefix("workbook/")


def test_every_query_is_executed_or_listed_with_a_reason():
    sources = _test_sources()
    missing = [
        q for q in _all_queries() if q not in NOT_EXECUTED and f'"{_reference(q)}"' not in sources
    ]
    assert missing == [], f"queries no fleet-view test executes: {missing}"


def test_the_not_executed_list_does_not_grow_and_names_real_files():
    assert len(NOT_EXECUTED) <= 2
    assert set(NOT_EXECUTED) <= set(_all_queries())
    assert all(len(why) > 30 for why in NOT_EXECUTED.values())


def test_at_least_90_percent_of_the_queries_are_executed():
    queries = _all_queries()
    executed = len(queries) - len(NOT_EXECUTED)
    assert executed / len(queries) >= 0.9, f"{executed} of {len(queries)}"
