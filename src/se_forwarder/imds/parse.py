"""The Scheduled Events document at the edge: untrusted JSON in, plain dataclasses out.

pydantic checks the shape once, when a document has changed; the tracker only ever sees the
frozen ``model.Document``, so it never has to defend against bad input.
"""

from __future__ import annotations

import json
from typing import Any, overload

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictInt,
    StrictStr,
    ValidationError,
    field_validator,
)

from .. import textcap
from ..errors import BadDocument
from ..model import Document, EventProblem, EventView
from ..timefmt import parse_not_before_ms


class _Event(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)

    EventId: StrictStr = Field(min_length=1)
    EventType: StrictStr
    EventStatus: StrictStr
    ResourceType: StrictStr | None = None
    Resources: list[StrictStr] = Field(default_factory=list)
    NotBefore: StrictStr | None = None
    Description: StrictStr | None = None
    EventSource: StrictStr | None = None
    DurationInSeconds: StrictInt | None = None


class _Document(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)

    DocumentIncarnation: int
    Events: list[Any]  # each event is checked on its own (one bad event never blinds the agent)

    @field_validator("DocumentIncarnation", mode="before")
    @classmethod
    def _incarnation(cls, value: Any) -> int:
        # A number, or (old clients, the 2017 approval body) a numeric string; never a bool.
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lstrip("-").isdigit():
            return int(value)
        raise ValueError("must be an integer or a numeric string")


def parse_body(body: bytes | str) -> Document:
    """Parse an HTTP body. Raises BadDocument for empty, non-JSON or wrongly shaped bodies."""
    if not isinstance(body, (bytes, bytearray, str)):
        raise BadDocument(f"not a body: {type(body).__name__}")
    if not body or not body.strip():
        raise BadDocument("empty body")
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadDocument(f"invalid JSON: {exc}") from None
    except RecursionError:  # e.g. 100 000 nested "[": hostile, not a document
        raise BadDocument("invalid JSON: nested too deeply") from None
    return parse_json(data)


def parse_json(data: Any) -> Document:
    """Validate already-decoded JSON: the top level (BadDocument naming the first bad field),
    then each event on its own (record-contract.md §1): a malformed event is reported and held,
    a repeated EventId reported and ignored, text that is not valid UTF-8 kept with U+FFFD."""
    try:
        doc = _Document.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or "document"
        raise BadDocument(
            f"wrong shape: {where}: {err['msg']} ({len(exc.errors())} problem(s))"
        ) from None
    events: list[EventView] = []
    held: list[str] = []
    problems: list[EventProblem] = []
    seen: set[str] = set()
    cut = _Cutter()
    kept = excess = 0
    for raw in doc.Events:
        if len(events) >= MAX_EVENTS or kept >= MAX_DOCUMENT_TEXT:
            excess += 1  # the tracker state, rewritten at every change, stays bounded
            continue
        eid = _event_id(raw)
        if eid is not None and eid in seen:
            problems.append(EventProblem(eid, "EventId appears more than once", "repeated"))
            continue
        try:
            e = _Event.model_validate(_cleaned(raw))
        except ValidationError as exc:
            err = exc.errors()[0]
            where = ".".join(str(p) for p in err["loc"]) or "event"
            problems.append(EventProblem(eid, f"{where}: {err['msg']}"))
            if eid is not None:
                seen.add(eid)
                held.append(eid)
            continue
        seen.add(eid or e.EventId)
        cut.event = _clean(e.EventId)
        view = _view(e, cut)
        kept += _text_size(view)
        events.append(view)
    complete = not excess and all(p.event_id is not None for p in problems)
    return Document(
        doc.DocumentIncarnation,
        tuple(events),
        tuple(held),
        tuple(problems),
        len(cut.values),
        complete,
        excess,
        tuple(cut.values),
    )


def _event_id(raw: Any) -> str | None:
    eid = raw.get("EventId") if isinstance(raw, dict) else None
    return _clean(eid) if isinstance(eid, str) and eid else None


def _view(e: _Event, cut: _Cutter) -> EventView:
    try:
        nb_ms = parse_not_before_ms(e.NotBefore) if e.NotBefore is not None else None
    except ValueError:
        nb_ms = None  # kept raw: an unknown date format must not blind the agent to the event
    return EventView(
        event_id=_clean(e.EventId),
        event_type=cut(e.EventType, "EventType"),
        status=cut(e.EventStatus, "EventStatus"),
        resource_type=cut(e.ResourceType, "ResourceType"),
        resources=cut.names(e.Resources),
        description=cut(e.Description, "Description"),
        source=cut(e.EventSource, "EventSource"),
        duration=e.DurationInSeconds,
        not_before_raw=cut(e.NotBefore, "NotBefore"),
        not_before_ms=nb_ms,
    )


# -- what is kept of a value ---------------------------------------------------------------------

MAX_VALUE_BYTES = textcap.MAX_VALUE_BYTES
# Per document: events past these are not taken (counted, logged; the document then removes no
# tracked event). A real document holds a handful of events; these bound the tracker state.
MAX_EVENTS = 1000
MAX_DOCUMENT_TEXT = 4 * 1024 * 1024  # characters of the events taken


def _text_size(v: EventView) -> int:
    return sum(
        len(t)
        for t in (
            v.event_id,
            v.event_type,
            v.status,
            v.resource_type,
            v.description,
            v.source,
            v.not_before_raw,
        )
        if t
    ) + sum(len(r) for r in v.resources)


_clean = textcap.clean  # lone surrogates (valid JSON escapes, not valid UTF-8) become U+FFFD


def _cleaned(raw: Any) -> Any:
    """An event's strings (and lists of strings) with lone surrogates replaced, before checking
    it (the checker refuses such strings, and one character must not hide a whole event)."""
    if not isinstance(raw, dict):
        return raw
    return {
        k: _clean(v)
        if isinstance(v, str)
        else [_clean(x) if isinstance(x, str) else x for x in v]
        if isinstance(v, list)
        else v
        for k, v in raw.items()
    }


class _Cutter:
    """Cleans and caps every text value of a document, noting each value it had to cut (one
    per event and field: the Resources list is one value)."""

    def __init__(self) -> None:
        self.event = ""  # the EventId of the values being cut
        self.values: list[tuple[str, str, int]] = []  # (EventId, field, size served)

    @overload
    def __call__(self, text: str, field: str) -> str: ...
    @overload
    def __call__(self, text: str | None, field: str) -> str | None: ...
    def __call__(self, text: str | None, field: str) -> str | None:
        if text is None:
            return None
        kept, served = self._cap(text)
        if served:
            self.values.append((self.event, field, served))
        return kept

    def _cap(self, text: str) -> tuple[str, int]:
        """The value kept, and its size in bytes when it was cut (0: kept whole)."""
        return textcap.cap(text, MAX_VALUE_BYTES)

    def names(self, names: list[str]) -> tuple[str, ...]:
        """Resources, kept whole up to the value limit (a list is one dynamic value)."""
        out, cut = textcap.cap_names(names, MAX_VALUE_BYTES)
        if cut:  # its size served, in characters (what tells this list from another)
            self.values.append((self.event, "Resources", sum(map(len, names))))
        return out
