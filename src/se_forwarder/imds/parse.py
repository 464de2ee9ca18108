"""The Scheduled Events document at the edge: untrusted JSON in, plain dataclasses out.

pydantic checks the shape once, when a document has changed; the tracker only ever sees the
frozen ``model.Document``, so it never has to defend against bad input.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictInt,
    StrictStr,
    ValidationError,
    field_validator,
)

from ..errors import BadDocument
from ..model import Document, EventView
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
    Events: list[_Event]

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
    """Validate already-decoded JSON. Raises BadDocument naming the first bad field."""
    try:
        doc = _Document.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or "document"
        raise BadDocument(f"wrong shape: {where}: {err['msg']} ({len(exc.errors())} problem(s))") from None
    events = []
    seen: set[str] = set()
    for e in doc.Events:
        if e.EventId in seen:
            raise BadDocument(f"wrong shape: EventId {e.EventId} appears twice")
        seen.add(e.EventId)
        try:
            nb_ms = parse_not_before_ms(e.NotBefore) if e.NotBefore is not None else None
        except ValueError:
            nb_ms = None  # kept raw: an unknown date format must not blind the agent to the event
        events.append(EventView(
            event_id=e.EventId, event_type=e.EventType, status=e.EventStatus,
            resource_type=e.ResourceType, resources=tuple(e.Resources), description=e.Description,
            source=e.EventSource, duration=e.DurationInSeconds, not_before_raw=e.NotBefore,
            not_before_ms=nb_ms,
        ))
    return Document(doc.DocumentIncarnation, tuple(events))
