"""The rules raised on each VM stay within Azure's 300 alerts per evaluation (issue 28): a wave of
silent agents, of hardware failures or of delivery trouble beyond the cap keeps the most urgent
VMs' alerts and folds the rest into one alert on the workspace that counts and names them. The
event and service rules are held on the mixed fleet (test_fleet_model.py)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from helpers import alertcap
from helpers.tinyfleet import NOW, Tiny, event, vm

MIN = timedelta(minutes=1)
HOUR = timedelta(hours=1)


@pytest.fixture(scope="module")
def wave():
    """Five agents silent since 20 to 32 minutes ago; four VMs dead of a hardware failure their
    siblings reported 10 minutes ago; four agents failing deliveries."""
    t = Tiny()
    for k in range(5):
        t.beats(vm(f"quiet-{k}"), NOW - 3 * HOUR, NOW - (20 + 3 * k) * MIN, first="start")
    for k in range(4):
        dead, sibling = vm(f"dead-{k}"), vm(f"sib-{k}")
        at = NOW - 10 * MIN + k * timedelta(seconds=7)
        t.beats(dead, NOW - 2 * HOUR + 4 * MIN, NOW - 11 * MIN, first="start")
        t.beats(sibling, NOW - HOUR, NOW - 2 * MIN, first="start")
        t.poll(sibling, at - 10 * MIN, [], incarnation=1)
        t.poll(
            sibling,
            at,
            [event(f"HW-{k}", "Reboot", "Started", (dead.VmName,), None)],
            incarnation=2,
        )
    for k in range(4):
        run = NOW - 25 * MIN
        a = vm(f"failing-{k}")
        t.beat(a, run, "start", uptime=0.5)
        t.beat(a, run + 6 * MIN, uptime=360.5, failed=2 + k, spool=10 * k)
        t.beat(a, run + 11 * MIN, uptime=660.5, failed=5 + k, spool=10 * k)
    return t.engine()


@pytest.mark.parametrize(
    ("key", "vms"), [("agent-silent", 5), ("started-without-notice", 4), ("delivery-trouble", 4)]
)
def test_per_vm_alerts_fold_beyond_the_cap_into_one_on_the_workspace(wave, key, vms):
    assert alertcap.check(wave, key, NOW) == vms
