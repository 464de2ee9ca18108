"""What a document served that makes no record, or not the one it says: logged and counted once.

Malformed and repeated events, events past a document's limits, an event that reappears after it
was removed, an event changed under an incarnation already seen: each is one log line and one
count of ``malformed_events`` (``status``, the heartbeat's ``MalformedEvents``) per (EventId,
incarnation), however often the document's body changes meanwhile: every path that discards
logs it and counts it. A value cut to the size limit is counted once (``truncated_values``,
the heartbeat's ``TruncatedValues``: values, not documents), by its event, field and size, however
many documents serve it again; a document bringing new ones is one log line.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from typing import TYPE_CHECKING, Protocol

from .. import logs
from ..imds.parse import MAX_DOCUMENT_TEXT, MAX_EVENTS

if TYPE_CHECKING:
    from ..model import Document
    from ..tracker import Observed

# (EventId, incarnation, kind) already reported: every event of a document, of each kind, so a
# problem is counted once however often the document's body changes under one incarnation; and
# ("cut", EventId, field, size) for the values cut (seven text fields an event)
MAX_REMEMBERED = 11 * MAX_EVENTS


class Counts(Protocol):
    malformed_events: int
    truncated_values: int


class DocumentProblems:
    def __init__(self, stats: Counts, log: logging.Logger) -> None:
        self.stats = stats
        self.log = log
        self._reported: OrderedDict[tuple[object, ...], None] = OrderedDict()

    def served(self, doc: Document) -> None:
        """A new document's malformed, repeated and excess events, and its cut values."""
        for p in doc.problems:
            if not self._first((p.event_id, doc.incarnation, p.kind)):
                continue
            self.stats.malformed_events += 1
            what = (
                "event served twice in one document; the first is used"
                if p.kind == "repeated"
                else "malformed event; nothing changes for it until it is served well-formed"
            )
            logs.event(
                self.log,
                logging.WARNING,
                what,
                EventId=p.event_id,
                reason=p.reason,
                DocumentIncarnation=doc.incarnation,
            )
        if doc.excess and self._first((None, doc.incarnation, "excess")):
            self.stats.malformed_events += doc.excess
            logs.event(
                self.log,
                logging.WARNING,
                "document over its limits: events past them are "
                "not taken, and no tracked event is removed while it is",
                events=doc.excess,
                max_events=MAX_EVENTS,
                max_text=MAX_DOCUMENT_TEXT,
                DocumentIncarnation=doc.incarnation,
            )
        new = [c for c in doc.cut if self._first(("cut", *c))]
        if new:
            self.stats.truncated_values += len(new)
            logs.event(
                self.log,
                logging.WARNING,
                "values over the size limit were truncated",
                values=len(new),
                in_fields=sorted({f for _, f, _ in new}),
                DocumentIncarnation=doc.incarnation,
            )

    def unrecorded(self, obs: Observed, incarnation: int) -> None:
        """Events the tracker made no record for: reappeared after their Removed, or changed
        under an incarnation already considered (the Updated record's RecordId is taken)."""
        changed = (
            "event changed under an incarnation already seen; no Updated record (its "
            "RecordId is taken)"
        )
        for eids, kind, what in (
            (obs.ignored, "reappeared", "event reappeared after it was removed; ignored"),
            (obs.unrecorded, "unrecorded", changed),
        ):
            for eid in eids:
                if self._first((eid, incarnation, kind)):
                    self.stats.malformed_events += 1
                    logs.event(
                        self.log,
                        logging.WARNING,
                        what,
                        EventId=eid,
                        DocumentIncarnation=incarnation,
                    )

    def _first(self, key: tuple[object, ...]) -> bool:
        """Whether ``key`` (EventId, incarnation, kind) is reported for the first time."""
        if key in self._reported:
            return False
        self._reported[key] = None
        if len(self._reported) > MAX_REMEMBERED:
            self._reported.popitem(last=False)
        return True
