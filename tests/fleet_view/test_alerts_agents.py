"""The agent-health alert rules (agent-silent, delivery-trouble) evaluated on the fleet at
several moments, as test_alerts.py does for the events' alerts (split from it: the two halves
run on two workers)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from helpers import fleetalerts as fa
from helpers import fleetview as fv
from helpers.alert_history import fired, history
from helpers.fleetrun import rules

pytestmark = pytest.mark.e2e


def test_agent_silent(engine, fleet, now):
    # from just before the first of them (vm-0-14's clean stop at E - 6 h pages at E - 5 h)
    hist = history(
        engine, fleet, "agent-silent", now - timedelta(hours=5, minutes=10), now, fa.agent_silent
    )
    last = {k[0] for k in hist[-1]}
    vms = fleet.truth.vms
    assert last == {vms[n].resource_id for n in ("vmss-spot-0_0", "vm-0-14", "vm-0-13")}
    # a clean stop followed by silence is reported an hour later; the evicted-and-back Spot VM too
    firsts = {vms_by_rid(fleet)[k[0]] for k in fired(hist)}
    assert {"vm-0-14", "vmss-spot-0_0", "vm-0-13"} <= firsts


def vms_by_rid(fleet) -> dict[str, str]:
    return {v.resource_id: v.name for v in fleet.truth.vms.values()}


def test_delivery_trouble(engine, fleet, now):
    rule = rules()["delivery-trouble"]

    def expected(records, beats, t):
        return fa.delivery_trouble(
            fv.visible(fleet.heartbeats, t, rule.query_range), t, rule.window
        )

    hist = history(engine, fleet, "delivery-trouble", now - timedelta(hours=4), now, expected)
    names = vms_by_rid(fleet)
    ever = {names[k[0]] for h in hist for k in h}
    # the crash loop's failures and the slowed sink; vm-0-10's drops happened while none of its
    # heartbeats got through: they page when those heartbeats arrive, late, after the outage
    assert {"vm-0-13", "vmss-app-0_5", "vm-0-10"} <= ever
    assert "vmss-app-0_5" in {names[k[0]] for k in hist[-1]}  # still failing at the end
