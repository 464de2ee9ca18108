"""How a parallel run (``-n N --dist loadfile``) hands the suite to its workers.

``loadfile`` keeps a module on one worker, so its module-scoped builds and servers are made once;
the price is that a long module is a critical path of its own, and a long module started last
leaves the other workers idle at the end. Three rules cut that, from measured module times (pytest
``--durations``; the fleet view's alert tests evaluate their rules at hundreds of moments):

* ``FIRST``: the longest modules are handed out first, longest first (then the rest, as
  collected), so no worker starts one of them when the others are nearly done;
* ``SPREAD``: modules whose tests share only session-scoped data (the fleet view's generated
  fleets and engines, built on each worker that needs them) are handed out test by test;
* ``ALONE``: long tests that use none of their module's module-scoped fixtures are handed out
  apart from their module (the single-VM demo plays a minute of real time beside the fleet
  demo's).
"""

from __future__ import annotations

import pytest
from xdist.scheduler import LoadFileScheduling

SPREAD = (
    "tests/fleet_view/test_churn_fleet.py",
    "tests/fleet_view/test_services.py",
    "tests/fleet_view/test_alerts.py",
    "tests/fleet_view/test_alerts_agents.py",
)

ALONE = (
    "tests/testbed/test_demo.py::test_a_single_vm_scenario_keeps_one_clock_for_timeline_and_warnings",
)

FIRST = (
    *SPREAD[:2],
    "tests/fleet_view/test_platform_collected.py",
    "tests/testbed/test_demo.py",
    "tests/report/test_report_platform.py",
    "tests/report/test_report.py",
    "tests/report/test_report_hostile.py",
    *SPREAD[2:],
    "tests/infra/install/test_install_bundle.py",
    "tests/fleet_view/test_churn_defects.py",
    "tests/infra/install/test_install_rollback.py",
    "tests/collector/test_collect_e2e.py",
    "tests/infra/install/test_install_azure.py",
    "tests/testbed/test_standin_eventhubs_receive.py",
)


#: pytest-timeout's limit for the ``SPREAD`` tests (pyproject's 300 s catches a hang). Their alert
#: checks are CPU-bound (a KQL query at hundreds of moments) and now run beside each other: on the
#: shared 2-core machine at load 10-15 two of them passed 300 s in a fresh-clone CI run.
SPREAD_TIMEOUT = 900


def order(items: list[pytest.Item]) -> None:
    """The ``FIRST`` modules' tests first, in that order; the rest as collected. A ``SPREAD``
    test without a timeout of its own gets ``SPREAD_TIMEOUT``."""
    rank = {path: n for n, path in enumerate(FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(FIRST)))
    for item in items:
        if item.nodeid.split("::", 1)[0] in SPREAD and not item.get_closest_marker("timeout"):
            item.add_marker(pytest.mark.timeout(SPREAD_TIMEOUT))


class Scheduling(LoadFileScheduling):
    """``loadfile`` with the ``SPREAD`` modules test by test and the ``ALONE`` tests apart, in
    the order collected. xdist's own ``loadfile`` is this class's base with ``_split_scope``
    grouping by file: the override is the one place the suite leans on a method xdist does not
    document (its public ``loadgroup`` stops grouping with pytest 9.2, pytest-xdist#1386); if it
    went away the run would fall back to plain ``loadfile``, slower but the same tests."""

    def __init__(self, config: pytest.Config, log: object = None) -> None:
        super().__init__(config, log)
        config.option.loadscopereorder = False  # collection order: ``order`` put the longest first

    def _split_scope(self, nodeid: str) -> str:
        module = nodeid.split("::", 1)[0]
        return nodeid if module in SPREAD or nodeid in ALONE else module
