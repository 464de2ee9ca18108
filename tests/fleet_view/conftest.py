"""The fleet the fleet-view tests run every query on, and the engine loaded with it.

One generated fleet (52 VMs over 8 days, see se_forwarder_testbed.fleet) for the session, plus
one targeted redelivery: the siblings' records of the hardware failure arrive a second time 3
hours later (at-least-once), so the hardware-failure alert is held to not re-paging.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from helpers import fleetview as fv
from helpers.once import known_fleet, once_value

from se_forwarder.report import Engine
from se_forwarder_testbed.fleet import FleetSpec, generate

#: the churning fleet of test_churn_fleet.py and of test_services.py's alert
CHURN = FleetSpec(vms=52, days=3, churn=True, seed=16)


@pytest.fixture(scope="session")
def fleet(tmp_path_factory):
    f = known_fleet(tmp_path_factory)  # generated once per run, this worker's own copy
    hw = next(e for e in f.truth.events.values() if e.kind == "hardware-failure")
    for r in [r for r in f.records if r["EventId"] == hw.event_id and r["Phase"] == "FirstSeen"]:
        f.records.append({**r, "_IngestionTime": _later(r["_IngestionTime"], hours=3)})
    return f


@pytest.fixture(scope="session")
def churn_fleet(tmp_path_factory):
    """The churning fleet (``CHURN``), generated once per run."""
    return once_value(tmp_path_factory, "churn-fleet", lambda _: generate(CHURN))


def _later(iso: str, **kw) -> str:
    return (fv.ts(iso) + timedelta(**kw)).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


@pytest.fixture(scope="session")
def now(fleet):
    return fv.ts(_iso_ms(fleet.truth.end))


def _iso_ms(ms: int) -> str:
    from se_forwarder.timefmt import format_ms

    return format_ms(ms)


@pytest.fixture(scope="session")
def engine(fleet, now):
    return Engine(fleet.records, fleet.heartbeats, now=now)


@pytest.fixture(scope="session")
def kinds(fleet):
    """EventIds by the scenario's kind (routine-freeze, hardware-failure, burst...)."""
    out: dict[str, list[str]] = {}
    for e in fleet.truth.events.values():
        out.setdefault(e.kind, []).append(e.event_id)
    return out


@pytest.fixture(scope="session")
def vm_ids(fleet):
    """VmId by VM name (and the reverse under the key of each VmId)."""
    return {v.name: v.vm_id for v in fleet.truth.vms.values()}
