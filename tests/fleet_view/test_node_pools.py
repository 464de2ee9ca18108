"""Issue 31, "the fleet view shows the cluster's nodes as a service": a VM whose agent reports
NodePool and Cluster (the DaemonSet's) is in the service ``node pool: <subscription>/<cluster>/
<pool>``, as is a VM of the pool's scale set with no agent; a user's service tag wins over it, and
it wins over the scale set (dashboards/definitions/fleet-vms.kql). Held on a fleet with AKS pools
(tests/helpers/aksfleet.py: a node scaled in, a node with no agent, a Reboot done on two nodes and
one due on two, a pool of the same name in another cluster, a pool tagged after its Reboot, a plain
scale set)
against the plan, in every services view: upcoming by service, concurrency risk (library, workbook
and alert), impact accounting, and the report's Services section."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from helpers import aksfleet as ak
from helpers import fleetchurn as fc
from helpers.fleetrun import evaluate, library, rules, workbook

from se_forwarder.report import Engine

pytestmark = pytest.mark.e2e

NOW = datetime.fromtimestamp(ak.END / 1000, UTC).replace(tzinfo=None)


@pytest.fixture(scope="module")
def aks():
    return ak.build()


@pytest.fixture(scope="module")
def engine(aks):
    with Engine(aks.records, aks.heartbeats, platform=aks.platform, now=NOW) as e:
        yield e


def test_each_vm_is_in_its_pool_unless_a_tag_says_otherwise(engine, aks):
    rows = {r["VmName"]: r for r in library(engine, "fleet-vms.kql")}
    assert {n: (r["Service"], r["ServiceBy"]) for n, r in rows.items()} == {
        n: (v.service(), _by(v)) for n, v in aks.nodes.items()
    }
    pool = {n for n, r in rows.items() if r["Service"] == ak.POOL}
    assert pool == {f"{ak.POOL_SET}_{k}" for k in range(5)}  # the agentless _4 with its siblings
    assert rows[f"{ak.POOL_SET}_3"]["Lifecycle"] == "scaled in"
    assert rows[f"{ak.POOL_SET}_4"]["AgentStatus"] == "no agent"
    assert len({r["Service"] for r in rows.values() if r["ServiceBy"] == "node pool"}) == 2
    assert {rows[f"aks-system-38231-vmss_{k}"]["Service"] for k in range(2)} == {"aks-system"}


def _by(v: ak.Node) -> str:
    if v.tags(ak.END).get("service"):
        return "tag"
    return "node pool" if v.pool else "scale set"


def test_upcoming_by_service_shows_the_pool(engine, aks):
    want = ak.upcoming(aks, ak.END)
    assert {k[0] for k in want} >= {ak.POOL, "scale set: " + f"{ak.SUB}/rg-web/vmss-web"}
    assert fc.upcoming_by_service(library(engine, "services-upcoming.kql")) == want
    wb = workbook(engine, "scheduled-events/services-upcoming.kql")
    assert fc.upcoming_by_service(wb) == want


def _risk(rows):
    return {
        r["Service"]: (r["VmsAtOnce"], r["ServiceVms"], set(r["VmNames"].split(", "))) for r in rows
    }


def test_concurrency_risk_counts_the_pools_live_nodes(engine, aks):
    """2 of the pool's 4 live nodes at once (the scaled-in node is not one of them, the node
    without an agent is): 50 %, a risk, in the library, the workbook and the alert."""
    want = ak.at_risk(aks, ak.END)
    assert want == {
        ak.POOL: (2, 4, {f"{ak.POOL_SET}_0", f"{ak.POOL_SET}_1"}),
    }
    assert _risk(library(engine, "services-concurrency-risk.kql")) == want
    assert _risk(workbook(engine, "scheduled-events/services-concurrency-risk.kql")) == want
    fired = evaluate(engine, "service-concurrency-risk", NOW)
    assert rules()["service-concurrency-risk"].identities(fired) == {(None, ak.POOL)}
    assert _risk(fired) == want


def test_impact_accounting_charges_the_pool(engine, aks):
    want = ak.impact(aks)
    rows = library(engine, "services-impact-by-month.kql")
    assert workbook(engine, "scheduled-events/services-impact-by-month.kql") == rows
    got = {(r["Service"], r["Month"]): r for r in rows}
    assert set(got) == set(want) and (ak.POOL, "2026-03") in got
    # the system pool's Reboot came before its tag: charged to the pool, not to the tag
    assert (f"node pool: {ak.SUB}/{ak.PROD}/system".lower(), "2026-03") in got
    for k, w in want.items():
        r = got[k]
        assert (r["VMs"], r["Events"], r["Reboot"]) == (len(w["vms"]), 1, len(w["Reboot"])), k
        assert r["ImpactWindowMinMinutes"] <= w["minutes"] <= r["ImpactWindowMaxMinutes"], k


def test_the_reports_services_section_shows_the_pool(engine, aks):
    from se_forwarder.report import build, sources

    built = build.render_with(engine, sources.Rows(), build.dashboards_dir())
    results = built.results["scheduled-events"]
    assert fc.upcoming_by_service(results["services-upcoming"].rows) == ak.upcoming(aks, ak.END)
    assert _risk(results["services-concurrency-risk"].rows) == ak.at_risk(aks, ak.END)
    impact = {
        (r["Service"], r["Month"]): r["VMs"] for r in results["services-impact-by-month"].rows
    }
    assert impact == {k: len(w["vms"]) for k, w in ak.impact(aks).items()}
    for item in ("services-upcoming", "services-concurrency-risk", "services-impact-by-month"):
        panel = built.html.split(f'data-item="{item}"', 1)[1].split("</section>", 1)[0]
        assert ak.POOL in panel, item
