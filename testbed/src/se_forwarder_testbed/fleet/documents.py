"""What one VM's Scheduled Events document says over time, from the events its group sees.

Only the moments the document changes are computed (an event appears, is re-scheduled, starts
or goes away); the agent simulation feeds the tracker at those moments, not at every poll.
"""

from __future__ import annotations

from se_forwarder.model import Document, EventView

from ..simulator.wire import rfc1123
from .model import EventPlan


def view_at(e: EventPlan, t: int) -> EventView | None:
    """The event as served at ``t`` (None: not in the document)."""
    if t < e.appear or (e.remove is not None and t >= e.remove):
        return None
    event_type, duration, resources, nb = e.event_type, e.duration, e.resources, e.not_before
    for u in e.updates:
        if u.at <= t:
            event_type = u.event_type or event_type
            duration = u.duration if u.duration is not None else duration
            resources = u.resources if u.resources is not None else resources
            nb = u.not_before if u.not_before is not None else nb
    started = nb is None or (e.start is not None and t >= e.start)
    return EventView(
        event_id=e.event_id,
        event_type=event_type,
        status="Started" if started else "Scheduled",
        resource_type="VirtualMachine",
        resources=tuple(resources),
        description=e.description,
        source=e.source,
        duration=duration,
        not_before_raw="" if started or nb is None else rfc1123(nb // 1000),
        not_before_ms=None if started else nb,
    )


def change_moments(events: list[EventPlan]) -> list[int]:
    moments: set[int] = set()
    for e in events:
        moments.add(e.appear)
        moments.update(u.at for u in e.updates)
        moments.update(t for t in (e.start, e.remove) if t is not None)
    return sorted(moments)


def timeline(events: list[EventPlan], first_incarnation: int = 1) -> list[tuple[int, Document]]:
    """(moment, document) at every change of the VM's document, starting with the empty one."""
    ordered = sorted(events, key=lambda e: (e.appear, e.event_id))
    out: list[tuple[int, Document]] = [(0, Document(first_incarnation, ()))]
    for t in change_moments(ordered):
        views = tuple(v for v in (view_at(e, t) for e in ordered) if v is not None)
        if views != out[-1][1].events:
            out.append((t, Document(out[-1][1].incarnation + 1, views)))
    return out
