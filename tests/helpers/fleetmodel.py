"""The mixed fleet's answers, computed from the generator's truth (se_forwarder_testbed.fleet.mixed:
``MixedTruth``, the plan the rows were made from), never from the rows nor from KQL: which VMs
exist, the service each was in at each moment, what is upcoming, which services are at risk and
what maintenance cost each service per month (issue 28)."""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, datetime

from se_forwarder_testbed.fleet.mixed import MixedTruth, MixedVm
from se_forwarder_testbed.fleet.model import DAY, HOUR, MINUTE

IMPACTFUL = ("Reboot", "Redeploy", "Preempt", "Terminate")
TYPICAL = {"Freeze": 7}
OTHERS = 600


def dt(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, UTC)


def service(v: MixedVm, t: int, tag: str = "service") -> str:
    """Its tag at ``t``, else its scale set, else its resource group, qualified by subscription
    and group (lower case)."""
    value = v.tags_at(t).get(tag)
    if value:
        return value
    if v.scale_set:
        return f"scale set: {v.subscription}/{v.resource_group}/{v.scale_set}".lower()
    return f"resource group: {v.subscription}/{v.resource_group}".lower()


def lifecycle(v: MixedVm, t: int) -> str:
    return v.gone_how if v.gone_at is not None and v.gone_at <= t else "live"


def scheduled(truth: MixedTruth, t: int) -> list:
    """Events announced by ``t`` and not started."""
    return [e for e in truth.events.values() if e.appear <= t and (e.start is None or e.start > t)]


def upcoming_impactful(truth: MixedTruth, t: int) -> dict[str, set[str]]:
    """EventId -> the names of the VMs it names that exist (agent or not)."""
    return {
        e.event_id: {truth.vms[k].name for k in e.vms if truth.vms[k].exists(t)}
        for e in scheduled(truth, t)
        if e.event_type in IMPACTFUL
    }


def agent_saw(truth: MixedTruth, e, t: int) -> bool:
    """Whether an agent saw ``e`` by ``t``: one of the VMs it names runs an agent that ran at some
    moment between the event's announcement and ``t`` (an agent sees the events naming its VM)."""
    for k in e.vms:
        if not truth.vms[k].agent:
            continue
        for begin, until in truth.agent_runs.get(k, []):
            if begin <= t and (until is None or until > e.appear):
                return True
    return False


def impactful_fleet(truth: MixedTruth, t: int) -> dict[tuple[str, str], tuple[set[str], str]]:
    """The fleet alert (impactful-events-fleet) at ``t``: (EventId, EventType) -> (the names of
    every VM it is scheduled for that exists, agent or not; NotBefore as the rule prints it) of
    each impactful event an agent saw, announced, not started nor ended, whose NotBefore is less
    than an hour past (an event whose NotBefore went by an hour ago without a start is stale). An
    event naming only VMs with no agent is impactful-event-unwatched's alone (one alert per
    incident)."""
    return {
        (e.event_id, e.event_type): (
            {truth.vms[k].name for k in e.vms if truth.vms[k].exists(t)},
            "unknown" if e.not_before is None else dt(e.not_before).strftime("%Y-%m-%d %H:%M:%S"),
        )
        for e in scheduled(truth, t)
        if e.event_type in IMPACTFUL
        and (e.end is None or e.end > t)
        and (e.not_before is None or e.not_before > t - HOUR)
        and agent_saw(truth, e, t)
    }


def is_open(e, t: int) -> bool:
    """Announced by ``t``, not ended; a Preempt or Terminate started more than 15 minutes ago is
    over (the VM is gone)."""
    if e.appear > t or (e.end is not None and e.end <= t):
        return False
    started = e.start is not None and e.start <= t
    return not (started and e.event_type in ("Preempt", "Terminate") and e.start < t - 15 * MINUTE)


def open_events(truth: MixedTruth, t: int) -> dict[str, tuple[str, set[str]]]:
    """EventId -> (Scheduled or Started, the names of every VM it names, agent or not)."""
    return {
        e.event_id: (
            "Started" if e.start is not None and e.start <= t else "Scheduled",
            {truth.vms[k].name for k in e.vms},
        )
        for e in truth.events.values()
        if is_open(e, t)
    }


def started_within(truth: MixedTruth, t: int, span: int = DAY) -> dict[str, tuple[str, set[str]]]:
    """EventId -> (in progress or ended, every VM it names) of the events started in ``span``."""
    return {
        e.event_id: (
            "in progress" if is_open(e, t) else "ended",
            {truth.vms[k].name for k in e.vms},
        )
        for e in truth.events.values()
        if e.start is not None and t - span < e.start <= t
    }


def windows(truth: MixedTruth, t: int) -> list[tuple[str, str, str, int, int]]:
    """(service, VM key, VM name, from, to) of every open event on every VM that exists."""
    out = []
    for e in truth.events.values():
        if e.appear > t or (e.end is not None and e.end <= t):
            continue
        started = e.start is not None and e.start <= t
        if started and e.event_type in ("Preempt", "Terminate") and e.start < t - 15 * MINUTE:
            continue
        start = e.start if started else e.not_before
        if start > t + 7 * DAY:
            continue
        seconds = e.duration if e.duration >= 0 else TYPICAL.get(e.event_type, OTHERS)
        end = max(start + seconds * 1000, t) if started else start + seconds * 1000
        for k in e.vms:
            v = truth.vms[k]
            if v.exists(t):
                out.append((service(v, t), k, v.name, start, end))
    return out


def service_sizes(truth: MixedTruth, t: int) -> dict[str, int]:
    out: dict[str, int] = defaultdict(int)
    for v in truth.vms.values():
        if v.exists(t):
            out[service(v, t)] += 1
    return dict(out)


def at_risk(
    truth: MixedTruth, t: int, vms: int = 5, percent: float = 50
) -> dict[str, tuple[int, int, set[str]]]:
    """Service -> (VMs at once, the service's live VMs, their names), where at risk."""
    by: dict[str, list] = defaultdict(list)
    for w in windows(truth, t):
        by[w[0]].append(w)
    sizes = service_sizes(truth, t)
    out = {}
    for s, ws in by.items():
        best: dict[str, str] = {}
        for w in ws:
            now = {o[1]: o[2] for o in ws if o[3] <= w[3] < o[4]}
            best = now if len(now) > len(best) else best
        n, size = len(best), sizes.get(s, 0)
        if n >= vms or (n >= 2 and 100 * n / max(size, n) >= percent):
            out[s] = (n, size, set(best.values()))
    return out


def upcoming_by_service(truth: MixedTruth, t: int) -> dict[str, tuple[int, int]]:
    """Service -> (events still scheduled within 7 days, VMs) over the VMs that exist."""
    ev: dict[str, set] = defaultdict(set)
    vm: dict[str, set] = defaultdict(set)
    for e in scheduled(truth, t):
        if e.not_before > t + 7 * DAY:
            continue
        for k in e.vms:
            v = truth.vms[k]
            if v.exists(t):
                ev[service(v, t)].add(e.event_id)
                vm[service(v, t)].add(k)
    return {s: (len(ev[s]), len(vm[s])) for s in ev}


def month(ms: int) -> str:
    return dt(ms).strftime("%Y-%m")


def _month_edges(a: int, b: int) -> list[tuple[int, int]]:
    out = []
    while a < b:
        d = dt(a)
        nxt = datetime(d.year + (d.month == 12), d.month % 12 + 1, 1, tzinfo=UTC)
        edge = int(nxt.timestamp() * 1000)
        out.append((a, min(b, edge)))
        a = min(b, edge)
    return out


def impact_account(truth: MixedTruth, now: int) -> dict[tuple[str, str], dict]:
    """(service, month) -> VM-minutes of impact (each VM's started-to-completed windows merged,
    split at month edges, charged to the service the VM was in when the window began), the VMs
    and the events of each type."""
    out: dict[tuple[str, str], dict] = defaultdict(
        lambda: {"minutes": 0.0, "vms": set(), "types": defaultdict(set)}
    )
    per_vm: dict[str, list] = defaultdict(list)
    for e in truth.events.values():
        if e.start is None or e.end is None or e.end > now:
            continue
        for k in e.vms:
            per_vm[k].append((e.start, e.end, e))
    for k, ws in per_vm.items():
        v = truth.vms[k]
        merged: list[list[int]] = []
        for a, b, e in sorted(ws, key=lambda w: w[0]):
            row = out[(service(v, a), month(a))]
            row["vms"].add(k)
            row["types"][e.event_type].add(e.event_id)
            if merged and a <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], b)
            else:
                merged.append([a, b])
        for a, b in merged:
            for x, y in _month_edges(a, b):
                out[(service(v, a), month(x))]["minutes"] += (y - x) / 60_000
                out[(service(v, a), month(x))]["vms"].add(k)
    return dict(out)


def dt_iso(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))
