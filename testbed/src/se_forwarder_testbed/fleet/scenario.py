"""What happens in one cell (see ``plan``): the calls that script the week."""

from __future__ import annotations

from .model import DAY, HOUR, MINUTE, SECOND, Outage, PollErrors, Update
from .plan import Cell


def script(cell: Cell) -> None:
    routine(cell)
    maintenance_walk(cell)
    updates(cell)
    announced_and_cancelled(cell)
    failures(cell)
    departures(cell)
    agent_trouble(cell)
    rollout(cell)
    burst(cell)


def routine(cell: Cell) -> None:
    """Live migrations (Freeze, 9 s) on every standalone VM about every 3 days."""
    rng, c = cell.rng, cell.i
    for k in range(16):
        t = cell.start + rng.randint(2, 30) * HOUR
        while t < cell.end - 6 * HOUR:
            cell.event(
                (f"vm-{c}-{k:02d}",),
                "Freeze",
                t,
                15 * MINUTE,
                rng.randint(0, 40) * SECOND,
                9 * SECOND,
                "routine-freeze",
                duration=9,
            )
            t += rng.randint(50, 90) * HOUR


def maintenance_walk(cell: Cell) -> None:
    """The availability set's update domains, one Reboot each, an hour apart; web-2's agent is
    down for 3 hours right after it saw the first one start (its impact window reads 3 h)."""
    c, t0 = cell.i, cell.start + 2 * DAY + 3 * HOUR
    for ud in range(5):
        names = tuple(n for n in cell.group(f"web-{c}-0") if cell.vms[n].vm.UpdateDomain == ud)
        e = cell.event(
            names,
            "Reboot",
            t0 + ud * HOUR,
            15 * MINUTE,
            30 * SECOND,
            5 * MINUTE,
            "ud-walk",
            duration=-1,
        )
        cell.impact(e, names, 3 * MINUTE)
        if ud == 0:
            assert e.start is not None  # it starts 30 s after NotBefore, by construction
            cell.interrupt(f"web-{c}-2", e.start + 10 * SECOND, e.start + 3 * HOUR, clean=False)


def updates(cell: Cell) -> None:
    """A Freeze updated to a Reboot (duration, one VM added, NotBefore 5 min earlier), and a
    scale-set Reboot whose update drops a VM from Resources."""
    c, t = cell.i, cell.start + 3 * DAY + 5 * HOUR
    e = cell.event(
        (f"web-{c}-0",),
        "Freeze",
        t,
        30 * MINUTE,
        20 * SECOND,
        2 * MINUTE,
        "updated-type",
        duration=5,
    )
    e.updates.append(
        Update(
            t + 10 * MINUTE,
            not_before=t + 25 * MINUTE,
            event_type="Reboot",
            duration=-1,
            resources=(f"web-{c}-0", f"web-{c}-3"),
        )
    )
    e.start = t + 25 * MINUTE + 20 * SECOND
    e.remove = e.start + 2 * MINUTE
    cell.impact(e, (f"web-{c}-0", f"web-{c}-3"), 2 * MINUTE)
    t = cell.start + 4 * DAY + 2 * HOUR
    names = tuple(f"vmss-app-{c}_{k}" for k in (1, 2, 3))
    e = cell.event(names, "Reboot", t, 2 * HOUR, 15 * SECOND, 4 * MINUTE, "resources-dropped")
    e.updates.append(Update(t + 40 * MINUTE, resources=names[:2]))
    cell.impact(e, names[:2], 3 * MINUTE)


def announced_and_cancelled(cell: Cell) -> None:
    c, end, rng = cell.i, cell.end, cell.rng
    cell.event(
        (f"vm-{c}-00",),
        "Redeploy",
        end - 3 * DAY,
        3 * DAY + 6 * HOUR,
        None,
        None,
        "announced-ahead",
        duration=-1,
        description="Predicted hardware degradation: redeploy.",
    )
    cell.event(
        (f"vm-{c}-06",), "Reboot", cell.start + 1 * DAY, 1 * DAY, None, -22 * HOUR, "cancelled"
    )
    cell.event(
        (f"web-{c}-1",), "Redeploy", cell.start + 5 * DAY, 12 * HOUR, None, -10 * HOUR, "cancelled"
    )
    # removed while the agent was down (an upgrade that took 2 hours): Unknown
    e = cell.event(
        (f"vm-{c}-07",), "Reboot", cell.start + 2 * DAY, 30 * MINUTE, None, 10 * MINUTE, "unknown"
    )
    cell.interrupt(f"vm-{c}-07", e.appear + 5 * MINUTE, e.appear + 2 * HOUR)
    # a user reboot, approved by the VM 3 minutes after it appeared: it starts 12 minutes early
    t = cell.start + 1 * DAY + rng.randint(1, 20) * HOUR
    e = cell.event(
        (f"vm-{c}-08",),
        "Reboot",
        t,
        15 * MINUTE,
        None,
        3 * MINUTE,
        "approved",
        source="User",
        description="User initiated reboot.",
    )
    e.approvals[f"vm-{c}-08"] = t + 3 * MINUTE
    e.start, e.remove = t + 3 * MINUTE + 5 * SECOND, t + 6 * MINUTE
    cell.impact(e, (f"vm-{c}-08",), 2 * MINUTE, clean=True)


def failures(cell: Cell) -> None:
    """Hardware failure: web-4's host dies; the siblings see it already Started."""
    c, t = cell.i, cell.start + 5 * DAY + 7 * HOUR
    cell.event(
        (f"web-{c}-4",),
        "Reboot",
        t,
        None,
        None,
        10 * MINUTE,
        "hardware-failure",
        description="Host hardware failure: service healing.",
    )
    cell.interrupt(f"web-{c}-4", t - 2 * SECOND, t + 25 * MINUTE, clean=False)


def departures(cell: Cell) -> None:
    c, end = cell.i, cell.end
    for k, (at, back) in {
        1: (cell.start + 3 * DAY, None),
        2: (end - 2 * DAY, None),
        0: (end - 20 * HOUR, end - 18 * HOUR),
    }.items():
        name = f"vmss-spot-{c}_{k}"
        e = cell.event((name,), "Preempt", at, 30 * SECOND, 0, 2 * MINUTE, "spot-eviction")
        assert e.start is not None  # it starts at NotBefore, by construction
        cell.interrupt(name, e.start + 10 * SECOND, back)
        if back is None:
            cell.vms[name].gone_at, cell.vms[name].gone_how = e.start + 10 * SECOND, "preempt"
    cell.vms[f"vmss-spot-{c}_2"].fate = "evicted"
    # came back after the eviction, reported for hours, then fell silent (no stop heartbeat)
    cell.interrupt(f"vmss-spot-{c}_0", end - 1 * HOUR, None, clean=False)
    cell.vms[f"vmss-spot-{c}_0"].fate = "evicted-and-back-silent"
    # scale-in: approved, the agent stops cleanly, the VM is deleted
    name = f"vmss-app-{c}_19"
    e = cell.event(
        (name,),
        "Terminate",
        end - 2 * DAY,
        10 * MINUTE,
        None,
        2 * MINUTE,
        "scale-in",
        duration=-1,
        source="User",
    )
    e.approvals[name] = e.appear + 1 * MINUTE
    e.start, e.remove = e.appear + 1 * MINUTE + 5 * SECOND, e.appear + 4 * MINUTE
    cell.interrupt(name, e.start + 8 * SECOND, None)
    cell.vms[name].fate = "deleted"
    cell.vms[name].gone_at, cell.vms[name].gone_how = e.start + 8 * SECOND, "terminate"
    # a clean stop never followed by a start
    cell.interrupt(f"vm-{c}-14", end - 6 * HOUR, None)
    cell.vms[f"vm-{c}-14"].fate = "stopped-silent"


def agent_trouble(cell: Cell) -> None:
    c, end, vms = cell.i, cell.end, cell.vms
    # crash loop for an hour (runs of 7 minutes, failing to deliver), then it dies before its
    # start heartbeat
    name = f"vm-{c}-13"
    t = end - 3 * HOUR
    cell.interrupt(name, t, t + 20 * SECOND, clean=False)
    while t < end - 2 * HOUR:
        t += 420 * SECOND
        cell.interrupt(name, t, t + 20 * SECOND if t < end - 2 * HOUR else None, clean=False)
    vms[name].outages.append(Outage(end - 3 * HOUR, end - 2 * HOUR))
    vms[name].fate = "crash-loop-silent"
    vms[f"vm-{c}-12"].outages.append(
        Outage(cell.start + 5 * DAY + 2 * HOUR, cell.start + 5 * DAY + 4 * HOUR)
    )
    vms[f"vmss-app-{c}_5"].outages.append(Outage(end - 40 * MINUTE, end + HOUR, slowdown=0.5))
    vms[f"vmss-app-{c}_5"].fate = "delivery-failing"
    vms[f"vm-{c}-10"].outages.append(Outage(end - 3 * HOUR, end - 1 * HOUR, drop_after=15))
    vms[f"vm-{c}-10"].fate = "dropping"
    vms[f"vm-{c}-11"].poll_errors.append(PollErrors(end - 3 * HOUR, end, 18))
    vms[f"vm-{c}-11"].poll_errors.append(PollErrors(cell.start + DAY, cell.start + DAY + HOUR, 4))
    vms[f"vm-{c}-11"].fate = "poll-errors"


def rollout(cell: Cell) -> None:
    """Half the VMs move to the new agent version on day 5, ten minutes apart."""
    at = cell.start + 5 * DAY
    for k, name in enumerate(sorted(cell.vms)):
        if k % 2 == 0 and cell.vms[name].runs[-1].end is None:
            cell.upgrade(name, at + k * 10 * MINUTE)


def burst(cell: Cell) -> None:
    """Eight scale-set VMs reboot within 8 minutes, each for its own event (many VMs hit)."""
    c, t = cell.i, cell.end - 50 * MINUTE
    for k in range(8):
        name = f"vmss-app-{c}_{6 + k}"
        e = cell.event(
            (name,), "Reboot", t - 15 * MINUTE + k * MINUTE, 15 * MINUTE, 0, 4 * MINUTE, "burst"
        )
        # the middle of the burst is back last: its Started record arrives last
        cell.impact(e, (name,), (12 - abs(k - 4) * 2) * MINUTE)
