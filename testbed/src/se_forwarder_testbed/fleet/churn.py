"""A churning cell (``FleetSpec(churn=True)``): what real scale-set fleets do on top of the cell's
week (scenario.py), each with its truth on the plan (``fate``, ``gone_at``, ``gone_how``):

* every row reaches Log Analytics 0.5 to 5 minutes after it is made (ingestion lag);
* resource groups spelled in another casing on some VMs (plan.Cell, ``_other_casing``);
* scale-out and scale-in every day: new instances appear, older ones are deleted with no
  Terminate event (nothing in the data tells them from a dead agent);
* a VM deleted and recreated under the same name and resource id with a new VmId;
* a sibling of an availability set deallocated while it lists an event that then runs and ends
  on the VM it affects; a standalone VM deallocated for hours, then started again;
* a Reboot whose VM stays down 3 hours: its records arrive hours late;
* host hardware failures that arrive as a Redeploy or a Reboot already Started, seen by the
  siblings;
* a burst of Reboots whose straggler's Started record arrives 45 minutes late;
* agent upgrades in four waves (counters restart at 0).

Times are relative to the cell's end E; a span shorter than 3 days keeps what fits.
"""

from __future__ import annotations

from .model import DAY, HOUR, MINUTE, SECOND
from .plan import Cell

WAVE_VERSION = "0.3.0"
LAG = (30 * SECOND, 5 * MINUTE)


def script(cell: Cell) -> None:
    for vp in cell.vms.values():
        vp.lag = LAG
    scale(cell)
    recreate(cell)
    deallocations(cell)
    late_after_reboot(cell)
    host_failures(cell)
    straggler_burst(cell)
    upgrade_waves(cell)
    for vp in cell.vms.values():
        vp.lag = LAG  # the VMs made since


def _fits(cell: Cell, t: int) -> bool:
    return cell.start + HOUR <= t < cell.end - 10 * MINUTE


def scale(cell: Cell) -> None:
    """Each day one new instance of the app scale set; those of odd days are scaled in (deleted,
    no Terminate) 6 to 20 hours later, when that is before the end."""
    c, rng = cell.i, cell.rng
    days = (cell.end - cell.start) // DAY
    for d in range(1, days):
        at = cell.start + d * DAY + rng.randint(1, 20) * HOUR
        if not _fits(cell, at):
            continue
        name = f"vmss-app-{c}_{20 + d}"
        cell.add_vm(name, f"vmss-app-{c}_0", at).fate = "scaled-out"
        gone = at + rng.randint(6, 20) * HOUR
        if d % 2 == 1 and _fits(cell, gone):
            cell.delete(name, gone, "no-notice")
            cell.vms[name].fate = "scaled-in"


def recreate(cell: Cell) -> None:
    at = cell.end - 36 * HOUR
    if _fits(cell, at):
        cell.recreate(f"vmss-app-{cell.i}_4", at, at + 8 * MINUTE)


def deallocations(cell: Cell) -> None:
    """web-5 lists a Reboot for web-1 and is deallocated before it runs; vm-03 is deallocated
    for 6 hours."""
    c, end = cell.i, cell.end
    appear = end - 30 * HOUR
    if _fits(cell, appear):
        name = f"web-{c}-1"
        e = cell.event(
            (name,),
            "Reboot",
            appear,
            15 * MINUTE,
            30 * SECOND,
            5 * MINUTE,
            "sibling-deallocated",
            duration=-1,
        )
        cell.impact(e, (name,), 3 * MINUTE)
        cell.interrupt(f"web-{c}-5", appear + 5 * MINUTE, None)  # deallocated: a clean stop
        cell.vms[f"web-{c}-5"].fate = "deallocated"
    at = end - 26 * HOUR
    if _fits(cell, at):
        cell.interrupt(f"vm-{c}-03", at, at + 6 * HOUR)
        cell.vms[f"vm-{c}-03"].fate = "deallocated-and-back"


def late_after_reboot(cell: Cell) -> None:
    name, t = f"vm-{cell.i}-05", cell.end - 20 * HOUR
    if _fits(cell, t):
        e = cell.event(
            (name,), "Reboot", t, 15 * MINUTE, 20 * SECOND, 4 * MINUTE, "late-after-reboot"
        )
        cell.impact(e, (name,), 3 * HOUR)
        cell.vms[name].fate = "late-after-reboot"


def host_failures(cell: Cell) -> None:
    """Host failures of both types: vmss-app-8's arrives as a Redeploy already Started (its
    placement group's siblings see it, their resource groups in either casing); web-2's as a
    Reboot already Started (the availability set sees it)."""
    for name, etype, t in (
        (f"vmss-app-{cell.i}_8", "Redeploy", cell.end - 16 * HOUR),
        (f"web-{cell.i}-2", "Reboot", cell.end - 8 * HOUR),
    ):
        if _fits(cell, t):
            cell.event(
                (name,),
                etype,
                t,
                None,
                None,
                10 * MINUTE,
                f"hardware-failure-{etype.lower()}",
                description=f"Host hardware failure: service healing ({etype.lower()}).",
            )
            cell.interrupt(name, t - 2 * SECOND, t + 20 * MINUTE, clean=False)


def straggler_burst(cell: Cell) -> None:
    """Seven scale-set VMs reboot within 7 minutes, each for its own event; vmss-app-13 stays
    down 45 minutes, so its Started record arrives after the burst was paged."""
    c, t = cell.i, cell.end - 12 * HOUR
    if not _fits(cell, t - 20 * MINUTE):
        return
    for k in range(7):
        name = f"vmss-app-{c}_{10 + k}"
        e = cell.event(
            (name,),
            "Reboot",
            t - 15 * MINUTE + k * MINUTE,
            15 * MINUTE,
            0,
            4 * MINUTE,
            "straggler-burst",
        )
        cell.impact(e, (name,), (45 if k == 3 else 4) * MINUTE)


def upgrade_waves(cell: Cell) -> None:
    """A quarter of the VMs every 3 hours from E - 40 h move to the next version."""
    first = cell.end - 40 * HOUR
    for k, name in enumerate(sorted(cell.vms)):
        at = first + (k % 4) * 3 * HOUR + k * 20 * SECOND
        vp = cell.vms[name]
        if not _fits(cell, at) or not any(
            r.start < at and (r.end is None or at < r.end) for r in vp.runs
        ):
            continue
        cell.interrupt(name, at, at + 5 * SECOND)
        for run in vp.runs:
            if run.start > at:
                run.version = WAVE_VERSION
