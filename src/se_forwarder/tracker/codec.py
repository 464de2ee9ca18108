"""The tracker state's persistence form: JSON-ready lists, versioned, read back exactly.

The store keeps it as one JSON value committed with the records it produced; a change here must
keep reading what the previous version wrote (``v``), or every VM loses its open events on upgrade.
Version 2 writes each event once: the last document's events that are tracked as they were
served (all of them, almost always) are written as their EventId, not a second copy (a document
of large descriptions made the state, rewritten at every change, twice its size).
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Any

from ..model import Document, EventView
from .machine import TrackedEvent, TrackerState


def _view_to_list(v: EventView) -> list[Any]:
    return [
        v.event_id,
        v.event_type,
        v.status,
        v.resource_type,
        list(v.resources),
        v.description,
        v.source,
        v.duration,
        v.not_before_raw,
        v.not_before_ms,
    ]


def _view_from_list(x: list[Any]) -> EventView:
    return EventView(x[0], x[1], x[2], x[3], tuple(x[4]), x[5], x[6], x[7], x[8], x[9])


def _doc_from_list(x: list[Any], events: dict[str, TrackedEvent]) -> Document:
    # held and complete decide which tracked events the next document removes, so they survive a
    # restart; states written before they were kept read as a document with none held.
    held, complete = (tuple(x[2]), bool(x[3])) if len(x) > 2 else ((), True)
    views = tuple(events[v].view if isinstance(v, str) else _view_from_list(v) for v in x[1])
    return Document(x[0], views, held=held, complete=complete)


def _doc_view(v: EventView, events: Any) -> Any:
    """A view of the last document: its EventId when it is the tracked event's view."""
    te = events.get(v.event_id)
    return v.event_id if te is not None and (te.view is v or te.view == v) else _view_to_list(v)


def state_to_json(state: TrackerState) -> dict[str, Any]:
    doc = state.last_doc
    return {
        "v": 2,
        "last_ok_ms": state.last_ok_ms,
        "last_doc": None
        if doc is None
        else [
            doc.incarnation,
            [_doc_view(v, state.events) for v in doc.events],
            list(doc.held),
            doc.complete,
        ],
        "events": [
            [
                eid,
                _view_to_list(te.view),
                te.first_seen_ms,
                te.started_ms,
                te.last_not_before_ms,
                list(te.incarnations),
                te.approved,
                te.approved_by,
                te.acted,
            ]
            for eid, te in state.events.items()
        ],
        "tombstones": dict(state.tombstones),
        "vm_key": state.vm_key,
    }


def state_from_json(data: dict[str, Any]) -> TrackerState:
    if data.get("v") not in (1, 2):
        raise ValueError(f"unknown tracker state version {data.get('v')!r}")
    doc = data["last_doc"]
    events = {
        # approved_by and acted: absent in states saved before they were kept
        e[0]: TrackedEvent(
            _view_from_list(e[1]),
            e[2],
            e[3],
            e[4],
            tuple(e[5]),
            e[6],
            *(e[7:9] if len(e) > 8 else ()),
        )
        for e in data["events"]
    }
    return TrackerState(
        events=MappingProxyType(events),
        last_doc=None if doc is None else _doc_from_list(doc, events),
        last_ok_ms=data["last_ok_ms"],
        restarted=False,
        tombstones=MappingProxyType(dict(data["tombstones"])),
        vm_key=data.get("vm_key"),  # absent in states saved before it was kept
    )
