"""The agent-health workbook's Log Analytics items executed on the fleet, each with its time context
and the workbook's parameters substituted as the portal does; charts at grains 5m, 1h and 1d."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace
from datetime import datetime, timedelta

import pytest
from helpers import fleetview as fv
from helpers import tinyfleet as tf
from helpers.fleetrun import grain, item_span, workbook

pytestmark = pytest.mark.e2e

GRAINS = ["5m", "1h", "1d"]
EPOCH = datetime(1970, 1, 1)


def binned(t: datetime, g: timedelta) -> datetime:
    return EPOCH + ((t - EPOCH) // g) * g


def beats_in(fleet, now, name, values=None):
    return fv.visible(fleet.heartbeats, now, item_span("agent-health", name, values))


def test_fleet_table_and_tiles_share_one_status(engine, fleet, now):
    span = item_span("agent-health", "fleet")
    records, beats = fv.visible(fleet.records, now, span), fv.visible(fleet.heartbeats, now, span)
    exp = fv.agent_status(records, beats, now)
    rid = {v.resource_id: v.vm_id for v in fleet.truth.vms.values()}
    rows = workbook(engine, "agent-health/fleet.kql")
    assert {rid[r["VmResourceId"]]: r["Status"] for r in rows} == exp
    tiles = {r["Metric"]: r["Value"] for r in workbook(engine, "agent-health/tiles.kql")}

    def count(*s):
        return sum(1 for v in exp.values() if v in s)

    assert tiles["Agents reporting"] == count("ok", "degraded")
    assert (
        tiles["Silent"],
        tiles["Degraded"],
        tiles["Stopped cleanly"],
        tiles["Deleted or evicted"],
    ) == (count("silent"), count("degraded"), count("stopped"), count("gone"))
    silent = workbook(engine, "agent-health/silent.kql")
    assert {rid[r["VmResourceId"]] for r in silent} == {k for k, v in exp.items() if v == "silent"}
    versions = {
        r["AgentVersion"]: r["Agents"] for r in workbook(engine, "agent-health/versions.kql")
    }
    last = fv.latest(beats, "VmId")
    exp_versions: dict[str, int] = defaultdict(int)
    for (vm,), r in last.items():
        if exp[vm] not in ("stopped", "gone"):
            exp_versions[r["AgentVersion"]] += 1
    assert versions == dict(exp_versions) and len(versions) == 2  # the rollout is half done


def test_fleet_table_is_paged_worst_first_and_says_how_many(engine, fleet, now):
    """A workbook result is cut at 10,000 rows silently: the table comes 5,000 VMs a page
    (FleetPage), numbered worst first, each row saying of how many."""
    rows = workbook(engine, "agent-health/fleet.kql")
    order = {"silent": 1, "degraded": 2, "stopped": 3, "gone": 4, "ok": 5}
    assert [r["Row"] for r in rows] == list(range(1, len(rows) + 1)) and {
        r["Of"] for r in rows
    } == {len(rows)}
    ranks = [(order[r["Status"]], -r["SilentMinutes"]) for r in rows]
    assert ranks == sorted(ranks) and len({r["Status"] for r in rows}) >= 4
    assert workbook(engine, "agent-health/fleet.kql", {"FleetPage": "2"}) == []  # 52 VMs: one page


# Two agents' counters over a morning, the increases each bin holds worked out by hand: a counter
# is cumulative within one run of the agent and starts again at 0 in the next.
#   a, run 1 (from 08:00, crashes): 08:10 start 0/0, 08:40 2/1, 09:10 5/1 (its uptime 3 s short:
#      a slow loop, same run), 09:40 5/4; run 2 (from 09:50): 09:50 start 1/0, 10:20 3/2, and
#      10:20 delivered twice;
#   b, run 1 (from 08:30): 08:30 start 0, 09:30 4, 10:30 4, 10:45 stop 6; run 2 (from 11:00), its
#      start heartbeat lost: 11:30 2 (uptime 30 min: a new run, counted from 0).
# (poll errors / failed deliveries.) Poll errors: 2 at 08:40; 3 at 09:10, 1 at 09:50 (a's new run)
# and 4 at 09:30; 2 at 10:20 and 2 at 10:45; 2 at 11:30. Failed deliveries: 1 at 08:40, 3 at
# 09:40, 2 at 10:20.
HAND_ERRORS = {"08:40": 2, "09:10": 3, "09:30": 4, "09:50": 1, "10:20": 2, "10:45": 2, "11:30": 2}
HAND_FAILED = {"08:40": 1, "09:40": 3, "10:20": 2}
# every heartbeat's time: each one's bin is in the chart, 0 when it adds nothing
HAND_BEATS = ["08:10", "08:30", "08:40", "09:10", "09:30", "09:40", "09:50", "10:20", "10:30"]
HAND_BEATS += ["10:45", "11:30"]


def _counters_by_hand() -> tf.Tiny:
    t, a, b = tf.Tiny(), tf.vm("a"), tf.vm("b")
    day = tf.NOW.replace(hour=0)

    def beat(who, hm, reason, run_start, errors, failed=0, slow=0.0):
        at = day + timedelta(hours=int(hm[:2]), minutes=int(hm[3:]), seconds=7)
        uptime = (at - (day + run_start)).total_seconds() - slow
        return t.beat(who, at, reason, uptime=uptime, poll_errors=errors, failed=failed)

    run_a1, run_a2 = timedelta(hours=8), timedelta(hours=9, minutes=50)
    beat(a, "08:10", "start", run_a1, 0)
    beat(a, "08:40", "periodic", run_a1, 2, 1)
    beat(a, "09:10", "periodic", run_a1, 5, 1, slow=3.0)
    beat(a, "09:40", "periodic", run_a1, 5, 4)
    beat(a, "09:50", "start", run_a2, 1)
    twice = beat(a, "10:20", "periodic", run_a2, 3, 2)
    t.heartbeats.append({**twice, "_IngestionTime": tf.iso(tf.NOW - timedelta(minutes=30))})
    run_b1, run_b2 = timedelta(hours=8, minutes=30), timedelta(hours=11)
    beat(b, "08:30", "start", run_b1, 0)
    beat(b, "09:30", "periodic", run_b1, 4)
    beat(b, "10:30", "periodic", run_b1, 4)
    beat(b, "10:45", "stop", run_b1, 6)
    beat(b, "11:30", "periodic", run_b2, 2)
    return t


def _binned_by_hand(at_minute: dict[str, int], g: str) -> dict[str, int]:
    size = {"5m": 5, "1h": 60, "1d": 24 * 60}[g]

    def binned(hm: str) -> str:
        minute = (int(hm[:2]) * 60 + int(hm[3:])) // size * size
        return f"{minute // 60:02d}:{minute % 60:02d}"

    out = {binned(hm): 0 for hm in HAND_BEATS}
    for hm, n in at_minute.items():
        out[binned(hm)] += n
    return out


@pytest.mark.parametrize("g", GRAINS)
def test_counter_charts_hold_the_increases_worked_out_by_hand(g):
    """The oracle is the comment above, not a second implementation of the query."""
    engine = _counters_by_hand().engine()
    values = grain(g, days=1)

    def hm(r):
        return r["TimeGenerated"].strftime("%H:%M")

    rows = workbook(engine, "agent-health/poll-errors.kql", values)
    assert {hm(r): r["PollErrors"] for r in rows} == _binned_by_hand(HAND_ERRORS, g)
    rows = workbook(engine, "agent-health/delivery-trouble.kql", values)
    assert {hm(r): r["FailedDeliveries"] for r in rows} == _binned_by_hand(HAND_FAILED, g)
    assert sum(HAND_ERRORS.values()) == 16 and sum(HAND_FAILED.values()) == 6


def _when(ms: int) -> datetime:
    return EPOCH + timedelta(milliseconds=ms)


def _run_increases(fleet, beats, column: str, since: datetime) -> int:
    """What the generator says the agents counted in the range: per agent run as planned (the
    truth's runs, not the heartbeats' uptime), its last count, less the count it already had at
    its first heartbeat in the range when it started before the range."""
    runs = {v.vm_id: v.runs for v in fleet.truth.vms.values()}
    by_run: dict[tuple, list] = defaultdict(list)
    for r in beats:
        t = fv.at(r)
        starts = [run.start for run in runs[r["VmId"]] if _when(run.start) <= t]
        by_run[(r["VmId"], max(starts))].append((t, r[column]))
    total = 0
    for (_, start), seen in by_run.items():
        counts = [n for _, n in sorted(seen)]
        total += counts[-1] - (counts[0] if _when(start) < since else 0)
    return total


@pytest.mark.parametrize("g", GRAINS)
def test_counter_charts_add_up_to_what_the_agents_counted(engine, fleet, now, g):
    """On the fleet (crashes, restarts, outages, at-least-once copies): every grain's bins add up
    to the counts the generator's runs reached in the range."""
    values = grain(g)
    beats = beats_in(fleet, now, "poll-errors", values)
    since = now - values["TimeRange"].duration
    errors = _run_increases(fleet, beats, "PollErrors", since)
    failed = _run_increases(fleet, beats, "FailedDeliveries", since)
    rows = workbook(engine, "agent-health/poll-errors.kql", values)
    assert sum(r["PollErrors"] for r in rows) == errors > 0
    rows = workbook(engine, "agent-health/delivery-trouble.kql", values)
    assert sum(r["FailedDeliveries"] for r in rows) == failed > 0


@pytest.mark.parametrize("g", GRAINS)
def test_agents_over_time_counts_every_agent_its_heartbeat_vouches_for(engine, fleet, now, g):
    values = grain(g)
    gt = values["TimeRange"].grain
    exp: dict[tuple, set] = defaultdict(set)
    for r in beats_in(fleet, now, "agents-over-time", values):
        t = fv.at(r)
        until = t if r["Reason"] == "stop" else t + timedelta(minutes=5)
        b = binned(t, gt)
        while b <= until:
            # no bin from now on, none starting in the range's first 5 minutes (undercounted)
            if now - values["TimeRange"].duration + timedelta(minutes=5) <= b < now:
                exp[(b, r["AgentVersion"])].add(r["VmId"])
            b += gt
    rows = workbook(engine, "agent-health/agents-over-time.kql", values)
    assert {(r["TimeGenerated"], r["AgentVersion"]): r["Agents"] for r in rows} == {
        k: len(v) for k, v in exp.items()
    }


@pytest.mark.parametrize("g", GRAINS)
def test_latency_and_spool_charts(engine, fleet, now, g):
    values = grain(g)
    gt = values["TimeRange"].grain
    beats = fv.dedupe(beats_in(fleet, now, "latency", values))
    lat: dict[datetime, list] = defaultdict(list)
    for r in beats:
        if r["LastPollLatencyMs"] is not None:
            lat[binned(fv.at(r), gt)].append(r["LastPollLatencyMs"])
    rows = workbook(engine, "agent-health/latency.kql", values)
    assert {r["TimeGenerated"]: (r["Median"], r["P95"], r["Maximum"]) for r in rows} == {
        b: (fv.percentile(v, 50), fv.percentile(v, 95), max(v)) for b, v in lat.items()
    }
    worst: dict[str, int] = defaultdict(int)
    for r in beats:
        worst[r["VmName"]] = max(worst[r["VmName"]], r["SpoolDepth"])
    ranked = sorted((v for v in worst.values() if v > 0), reverse=True)
    rows = workbook(engine, "agent-health/spool.kql", values)
    got = {r["VmName"] for r in rows}
    # the 10 worst agents (ties at the 10th place may go either way)
    assert len(got) == min(10, len(ranked)) and all(worst[n] >= ranked[len(got) - 1] for n in got)
    spool: dict[tuple, int] = defaultdict(int)
    for r in beats:
        if r["VmName"] in got:
            k = (binned(fv.at(r), gt), r["VmName"])
            spool[k] = max(spool[k], r["SpoolDepth"])
    assert {(r["TimeGenerated"], r["VmName"]): r["SpoolDepth"] for r in rows} == dict(spool)


def test_restarts_count_a_start_not_preceded_by_a_clean_stop_as_a_crash(engine, fleet, now):
    beats = beats_in(fleet, now, "restarts")
    exp: dict[tuple, list] = defaultdict(lambda: [0, 0, 0])
    for s in fv.steps(beats):
        k = (s.row["VmName"], s.row["AgentVersion"])
        if s.row["Reason"] == "start":
            exp[k][0] += 1
            if s.prev is not None and s.prev["Reason"] != "stop":
                exp[k][2] += 1
        elif s.row["Reason"] == "stop":
            exp[k][1] += 1
    rows = workbook(engine, "agent-health/restarts.kql")
    assert {
        (r["VmName"], r["AgentVersion"]): [r["Starts"], r["CleanStops"], r["CrashesOrKills"]]
        for r in rows
    } == {k: v for k, v in exp.items() if v[0] or v[1]}
    assert sum(v[2] for k, v in exp.items() if k[0] == "vm-0-13") >= 5  # the crash loop


def test_heartbeat_vms_and_parameters(engine, fleet, now):
    beats = beats_in(fleet, now, "heartbeat-vms")
    rows = workbook(engine, "agent-health/heartbeat-vms.kql", {"VmSlice": "*"})
    last = {vm.lower(): fv.at(r) for (vm,), r in fv.latest(beats, "VmId").items()}
    assert {r["VmId"]: r["LastHeartbeat"] for r in rows} == last
    assert [
        r["ResourceGroup"] for r in workbook(engine, "agent-health/parameters/ResourceGroup.kql")
    ] == sorted({r["ResourceGroup"] for r in beats_in(fleet, now, "ResourceGroup")})
    assert [
        r["SubscriptionId"] for r in workbook(engine, "agent-health/parameters/Subscription.kql")
    ] == sorted({r["SubscriptionId"] for r in beats})
    zones = workbook(engine, "agent-health/parameters/Zone.kql")
    assert {r["value"] for r in zones} == {r["Zone"] or "" for r in beats} and "(no zone)" in {
        r["label"] for r in zones
    }


def test_a_zone_selection_filters_the_fleet(engine, fleet, now):
    """Multi-select values are quoted and joined as the portal does: Zone = '1', '2'."""
    span = item_span("agent-health", "fleet")
    beats = fv.visible(fleet.heartbeats, now, span)
    rows = workbook(engine, "agent-health/fleet.kql", {"Zone": ["1", "2"]})
    assert {r["VmName"] for r in rows} == {r["VmName"] for r in beats if r["Zone"] in ("1", "2")}


def test_heartbeat_vms_stay_under_the_row_limit_past_10000_vms():
    """The merge that finds VMs with no heartbeat reads heartbeat-vms whole: cut at the portal's
    10,000 rows it would show false gaps. 10,400 VMs (one heartbeat each, a few with more, a few
    whose only one is older than 7 days, resource groups and VmIds in two casings): the item
    shows one slice of VmIds (VmSlice: its query picks "0" at this size), each slice well under the
    limit, every VM
    in exactly one slice with its latest heartbeat; "*" is the whole fleet."""
    t = tf.Tiny()
    truth: dict[str, datetime] = {}
    for k in range(10_400):
        v = tf.vm(f"vm-{k}", rg="RG-A" if k % 3 == 0 else "rg-a")
        if k % 97 == 0:
            v = replace(v, VmId=v.VmId.upper())
        at = tf.NOW - timedelta(minutes=1 + k % 5000)
        if k % 500 == 1:
            at = tf.NOW - timedelta(days=7, minutes=5)  # out of the 7 days: not a heartbeat VM
        t.beat(v, at, uptime=3600)
        if k % 50 == 0:
            at = tf.NOW - timedelta(seconds=30)
            t.beat(v, at, uptime=3900)
        if at > tf.NOW - timedelta(days=7):
            truth[v.VmId.lower()] = at
    e = t.engine()
    assert len(truth) > 10_000

    def shown(values=None):
        return {
            r["VmId"]: r["LastHeartbeat"]
            for r in workbook(e, "agent-health/heartbeat-vms.kql", values)
        }

    default = workbook(e, "agent-health/heartbeat-vms.kql")
    assert 0 < len(default) < 10_000
    assert shown() == {k: a for k, a in truth.items() if k.startswith("0")}
    union: dict[str, datetime] = {}
    for h in "0123456789abcdef":
        part = shown({"VmSlice": h})
        assert 0 < len(part) < 1_000 and part.keys().isdisjoint(
            union
        )  # under Resource Graph's page too
        union.update(part)
    assert union == truth
    assert shown({"VmSlice": "*", "ResourceGroup": ["rg-a"]}) == truth  # any casing of the group
