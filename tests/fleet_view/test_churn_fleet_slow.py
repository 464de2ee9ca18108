"""The churning fleet's properties (test_churn_fleet.py) on 1,000 VMs over 30 days: the fleet-scale
lane, run with ``pytest -m fleet_scale`` (deselected otherwise). Heartbeats older than 4 days come hourly
(``FleetSpec.fine_days``, as the benchmarks do), so the properties are checked over the last 2
days, where every query's range holds the real 5-minute heartbeats. The alert rules are
evaluated at the transition points of the incidents of two of the 20 cells (a few hundred
evaluations per rule); every alert seen on the way, of any cell, must be an incident's."""

from __future__ import annotations

import json
import time
from datetime import timedelta

import pytest
from helpers import fleetchurn as fc
from helpers import fleetprops as fp

from se_forwarder.report import Engine
from se_forwarder_testbed.fleet import Fleet, FleetSpec, stream

pytestmark = [pytest.mark.fleet_scale, pytest.mark.timeout(3600)]

SPEC = FleetSpec(vms=1000, days=30, churn=True, seed=16, fine_days=4)


#: what the checks read of a heartbeat (the engine holds the whole rows): about 2 million
#: heartbeats kept whole in Python would take 10 GB more
SLIM = ("RecordId", "VmId", "VmName", "VmResourceId", "ResourceGroup", "TimeGenerated",
        "_IngestionTime", "Reason", "AgentVersion")


@pytest.fixture(scope="module")
def churn(tmp_path_factory):
    t0 = time.perf_counter()
    truths: list = []
    records: list[dict] = []
    spill = tmp_path_factory.mktemp("fleet") / "heartbeats.jsonl"
    with spill.open("w", encoding="utf-8") as f:
        for table, row in stream(SPEC, truths):
            if table == "records":
                records.append(row)
            else:
                f.write(json.dumps(row, separators=(",", ":")) + "\n")
    slim: list[dict] = []

    def beats():
        with spill.open(encoding="utf-8") as f:
            for line in f:
                row = json.loads(line)
                slim.append({k: row[k] for k in SLIM})
                yield row

    now = fc.dt(truths[0].end)
    engine = Engine(records, beats(), now=now)
    spill.unlink()
    fleet = Fleet(records, slim, truths[0])
    print(f"\n1,000-VM churning fleet: {len(records)} records, {len(slim)} heartbeats, "
          f"generated and loaded in {time.perf_counter() - t0:.0f} s")
    return fp.Case(fleet, engine, now, since=now - timedelta(days=2), cells=2)


def test_the_fleet_churns(churn):
    fp.check_the_fleet_churns(churn)


def test_events_are_open_exactly_while_the_truth_says(churn):
    fp.check_open_events(churn, fp.moments_for_views(churn, every=timedelta(hours=8)))


def test_now_tiles_equal_the_truth(churn):
    fp.check_now_numbers(churn, fp.moments_for_views(churn, every=timedelta(hours=12)))


@pytest.mark.parametrize("key", fp.RULES)
def test_one_alert_per_incident(churn, key):
    fp.check_rule(churn, key)
