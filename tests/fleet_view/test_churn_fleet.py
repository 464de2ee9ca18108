"""The fleet view on a churning fleet (se_forwarder_testbed.fleet.churn), held to the generator's
truth (tests/helpers/fleetchurn.py), never to the queries:

* no event is open after it ended on the VMs it affected, and every event a reporting VM lists
  is open; the "now" tiles of both workbooks equal the truth (items in flight at that moment, a
  change less than 11 minutes old, are held to the view's own rows);
* every alert rule, evaluated at its Bicep frequency, window and query range at the truth's
  transition points (and the evaluations around them), raises exactly one alert per incident
  (dashboards/README.md defines each rule's incident), within one evaluation period of the
  moment it becomes true, resolves when it ends, and raises nothing else.

A 52-VM, 3-day fleet here (conftest.CHURN, shared with test_services.py); the same properties on
1,000 VMs over 30 days in the fleet-scale lane (``-m fleet_scale``, test_churn_fleet_slow.py)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from helpers import fleetchurn as fc
from helpers import fleetprops as fp

from se_forwarder.report import Engine


@pytest.fixture(scope="module")
def churn(churn_fleet):
    fleet = churn_fleet
    now = fc.dt(fleet.truth.end)
    return fp.Case(fleet, Engine(fleet.records, fleet.heartbeats, now=now), now)


def test_the_fleet_churns(churn):
    """The situations of issue 16 are all in the data."""
    fp.check_the_fleet_churns(churn)


def test_events_are_open_exactly_while_the_truth_says(churn):
    fp.check_open_events(churn, fp.moments_for_views(churn, every=timedelta(hours=6)))


def test_now_tiles_equal_the_truth(churn):
    fp.check_now_numbers(churn, fp.moments_for_views(churn, every=timedelta(hours=12)))


@pytest.mark.parametrize("key", fp.RULES)
def test_one_alert_per_incident(churn, key):
    fp.check_rule(churn, key)
