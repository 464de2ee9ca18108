"""The services' truth, from the generator's plan (se_forwarder_testbed.fleet), never from the
rows: which service each VM is in (``VmTruth.service``: its tag, else its scale set, else its
resource group), what is scheduled for each in the next 7 days, and how many of its VMs may be
impacted at the same time (issue 20; dashboards/queries/services-*.kql and the alert
service-concurrency-risk)."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta

from se_forwarder_testbed.fleet.documents import view_at
from se_forwarder_testbed.fleet.model import DAY, MINUTE, VmTruth

from . import fleetchurn as fc

#: the typical impact of a type whose duration is unknown (-1), seconds
#: (../shared/spec/scheduled-events-api.md: impact 7 s; Started to removed 10 minutes)
TYPICAL = {"Freeze": 7}
OTHERS = 600
LAG = 11 * MINUTE  # a change this recent may not be in the data yet (fleetchurn.L)


@dataclass(frozen=True)
class Window:
    """One VM's impact window of one open event."""

    service: str
    key: str  # the VM's plan key
    name: str
    zone: str | None
    fault_domain: int | None
    event_id: str
    event_type: str
    status: str
    start: int
    end: int
    seconds: int


def exists(v: VmTruth, t: int) -> bool:
    return bool(v.runs) and v.runs[0].start <= t and (v.gone_at is None or v.gone_at > t)


def windows(truth: fc.Truth, t: int, tag: str = "service") -> list[Window]:
    """The impact windows at ``t`` of every event in the documents, due within 7 days."""
    out = []
    for e in truth.events.values():
        v = view_at(e, t)
        if v is None:
            continue
        started = v.status == "Started"
        start = (
            (e.start if e.start is not None and e.start <= t else e.appear)
            if started
            else v.not_before_ms
        )
        if start > t + 7 * DAY:
            continue
        seconds = v.duration if v.duration >= 0 else TYPICAL.get(v.event_type, OTHERS)
        end = start + seconds * 1000
        if started:
            end = max(end, t)
        for name in v.resources:
            for key in truth.by_name.get(name, []):
                vm = truth.vms[key]
                if exists(vm, t):
                    out.append(
                        Window(
                            vm.service(tag),
                            key,
                            name,
                            vm.zone,
                            vm.fault_domain,
                            e.event_id,
                            v.event_type,
                            v.status,
                            start,
                            end,
                            seconds,
                        )
                    )
    return out


def quiet(truth: fc.Truth, t: int, lag: int = LAG) -> bool:
    """Nothing changed in the last ``lag`` before ``t`` (no event appeared, moved, started or went
    away; no agent started or stopped) and every VM with a Scheduled window at ``t`` ran when its
    event last changed and runs now, with no delivery outage: the data at ``t`` can tell everything
    the plan says."""
    for e in truth.events.values():
        moments = [e.appear, e.start, e.remove] + [u.at for u in e.updates]
        if any(m is not None and t - lag <= m <= t for m in moments):
            return False
    for v in truth.vms.values():
        edges = [r.start for r in v.runs] + [r.end for r in v.runs if r.end is not None]
        if any(t - lag <= m <= t for m in edges):
            return False
    for w in windows(truth, t):
        e = truth.events[w.event_id]
        since = max([e.appear] + [u.at for u in e.updates if u.at <= t])
        vm = truth.vms[w.key]
        if w.status == "Scheduled" and not (
            vm.running(since + 5000)
            and vm.running(t)
            and not any(o.start < t and o.end > since - 3600_000 for o in vm.outages)
        ):
            return False
    return True


def upcoming(truth: fc.Truth, t: int, tag: str = "service") -> dict[tuple, dict]:
    """Per (service, zone, fault domain): the events still Scheduled, the VMs, the earliest
    NotBefore and the expected impact in VM-minutes."""
    out: dict[tuple, dict] = defaultdict(
        lambda: {"events": set(), "vms": set(), "earliest": None, "seconds": 0}
    )
    for w in windows(truth, t, tag):
        if w.status != "Scheduled":
            continue
        row = out[(w.service, w.zone or "", w.fault_domain)]
        row["events"].add(w.event_id)
        row["vms"].add(w.key)
        row["earliest"] = min(w.start, row["earliest"] or w.start)
        row["seconds"] += w.seconds
    return dict(out)


def at_once(truth: fc.Truth, t: int, tag: str = "service") -> dict[str, set[str]]:
    """Per service: the most VMs whose windows hold one moment (reached at a window's start)."""
    by_service: dict[str, list[Window]] = defaultdict(list)
    for w in windows(truth, t, tag):
        by_service[w.service].append(w)
    out = {}
    for service, ws in by_service.items():
        best: set[str] = set()
        for w in ws:
            vms = {o.name for o in ws if o.start <= w.start < o.end}
            best = vms if len(vms) > len(best) else best
        if best:
            out[service] = best
    return out


def service_vms(truth: fc.Truth, t: int, tag: str = "service") -> dict[str, int]:
    """The VMs of each service that exist at ``t``."""
    out: dict[str, int] = defaultdict(int)
    for v in truth.vms.values():
        if exists(v, t):
            out[v.service(tag)] += 1
    return dict(out)


def at_risk(
    truth: fc.Truth, t: int, vms: int = 5, percent: float = 50, tag: str = "service"
) -> dict[str, set[str]]:
    """The services at risk at ``t``: at least ``vms`` VMs, or ``percent`` % of the service's
    VMs (at least 2), impacted at the same time."""
    sizes = service_vms(truth, t, tag)
    return {
        s: names
        for s, names in at_once(truth, t, tag).items()
        if len(names) >= vms
        or (len(names) >= 2 and 100 * len(names) / max(sizes.get(s, 0), len(names)) >= percent)
    }


def risk_incidents(
    truth: fc.Truth, start: int, end: int, step: int = MINUTE, **kw
) -> list[tuple[str, datetime, datetime]]:
    """(service, from, to): each stretch of time a service is at risk, sampled every ``step``."""
    out: list = []
    open_: dict[str, int] = {}
    t = start
    while t <= end:
        now = set(at_risk(truth, t, **kw))
        for s in now - set(open_):
            open_[s] = t
        for s in set(open_) - now:
            out.append((s, fc.dt(open_.pop(s)), fc.dt(t)))
        t += step
    out += [(s, fc.dt(a), fc.dt(end)) for s, a in open_.items()]
    return sorted(out, key=lambda x: x[1])


def minutes(td: timedelta) -> float:
    return td.total_seconds() / 60


#: Microsoft's minimum notice per type, seconds (../shared/spec/scheduled-events-api.md)
MINIMUM_NOTICE = {"Freeze": 900, "Reboot": 900, "Redeploy": 600, "Terminate": 300, "Preempt": 30}


def month(t: int) -> str:
    return fc.dt(t).strftime("%Y-%m")


def impact(truth: fc.Truth, now: int, tag: str = "service") -> dict[tuple, dict]:
    """Per (service, month): what maintenance cost, from the plan. A VM counts an event that
    affected it (its final Resources) when its agent ran while the event was Started, or when
    the event ended Unknown to it (the scenario's kind "unknown"); the window (start to
    removal) when its agent ran again after the removal."""
    out: dict[tuple, dict] = defaultdict(
        lambda: (
            defaultdict(int)
            | {"vms": set(), "types": defaultdict(set), "window": 0, "announced": 0}
        )
    )
    for e in truth.events.values():
        final = view_at(e, (e.remove or now) - 1) or view_at(e, now)
        if final is None:
            continue
        for name in final.resources:
            for key in truth.by_name.get(name, []):
                v = truth.vms[key]
                end = min(e.remove or now, now)
                seen = (
                    e.start is not None
                    and e.start < now
                    and any(r.start < end and (r.end is None or r.end > e.start) for r in v.runs)
                )
                unknown = e.kind == "unknown"
                if not (seen or unknown) or not exists(v, e.start or e.appear):
                    continue
                row = out[(v.service(tag), month(e.start if seen else e.appear))]
                row["vms"].add(key)
                row["types"][final.event_type].add(e.event_id)
                row["unknown"] += unknown
                first = min(
                    max(r.start, e.appear) for r in v.runs if r.end is None or r.end > e.appear
                )
                nb = final.not_before_ms if final.status == "Scheduled" else _final_nb(e)
                short = nb is None or (nb - first) / 1000 < MINIMUM_NOTICE[final.event_type] - 60
                row["short"] += short
                row["early"] += seen and nb is not None and e.start < nb
                if seen and final.duration > 0:
                    row["announced"] += final.duration
                if (
                    seen
                    and e.remove is not None
                    and e.remove <= now
                    and any(r.end is None or r.end > e.remove for r in v.runs)
                ):
                    row["window"] += (e.remove - e.start) / 1000
    return dict(out)


def _final_nb(e) -> int | None:
    nb = e.not_before
    for u in e.updates:
        nb = u.not_before if u.not_before is not None else nb
    return nb
