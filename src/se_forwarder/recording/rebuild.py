"""What a damaged outbox lost, rebuilt from the tracker state that survived it.

A database damaged in the middle can leave the tracker state readable and the outbox rows not:
records not yet delivered would never be sent, with a critical log line as the only sign. The
tracker knows which events it has emitted:
the FirstSeen and Started records of every event it still tracks are made again, with the same
RecordIds (downstream drops the copies of those that had arrived), and wait in the hold like any
record made before the VM's identity is known (``hold.py``: it gives them the identity columns
and sends them on). What cannot be rebuilt (records of events no longer tracked, Updated and
Approved records, heartbeats) is counted as lost when the number of unreadable rows is known:
``counter:lost``, which ``status`` and the heartbeats (``LostRecords``) show.
"""

from __future__ import annotations

from typing import Any

from .. import tracker
from ..model import VmIdentity
from ..outbox.recovery import Rebuilt
from ..outbox.store import TRACKER_KEY
from .hold import PREFIX


def rebuild(meta: dict[str, Any], have: set[str], unreadable: int | None) -> Rebuilt:
    """From the recovered ``meta`` (decoded; the tracker state at ``TRACKER_KEY``), the records
    to send again (none whose RecordId is in ``have``, the rows recovered) and how many of the
    ``unreadable`` rows (None: not known) are lost for certain."""
    if unreadable == 0:
        return Rebuilt()
    saved = meta.get(TRACKER_KEY)
    try:
        state = tracker.state_from_json(saved) if saved else None
    except (ValueError, KeyError, IndexError, TypeError):
        state = None  # the recorder logs an unreadable state when it loads it
    records = (
        [r for r in tracker.emitted(state, VmIdentity()) if r.RecordId not in have]
        if state is not None
        else []
    )
    n = max((int(k[len(PREFIX) :]) for k in meta if k.startswith(PREFIX)), default=0)
    entries = {f"{PREFIX}{n + i:012d}": r.as_dict() for i, r in enumerate(records, 1)}
    return Rebuilt(entries, 0 if unreadable is None else max(0, unreadable - len(records)))
