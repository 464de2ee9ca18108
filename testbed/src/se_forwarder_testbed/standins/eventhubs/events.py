"""Events as the stand-in stores them, and how the AMQP messages of a transfer become events."""

from __future__ import annotations

import json
from typing import Any

from .. import amqp_frames

PARTITION_KEY = "x-opt-partition-key"
_MESSAGE_ANNOTATIONS, _PROPERTIES, _APPLICATION_PROPERTIES, _DATA = 0x72, 0x73, 0x74, 0x75
_BODY_VALUES = (0x76, 0x77)  # amqp-sequence, amqp-value


class ReceivedEvent:
    """One event as stored by the stand-in (one Data section of a batch, or one plain message).

    Kept as the encoded AMQP message; its sections are decoded on first access, so that taking
    events in stays cheap."""

    __slots__ = (
        "_batch_key",
        "_decoded",
        "connection_id",
        "enqueued_time",
        "hub",
        "offset",
        "partition_id",
        "raw",
        "sequence_number",
    )

    def __init__(
        self,
        hub: str,
        partition_id: str,
        sequence_number: int,
        enqueued_time: float,
        raw: bytes,
        connection_id: int = 0,
        batch_key: str | None = None,
        *,
        offset: int | None = None,
    ) -> None:
        self.hub = hub
        self.partition_id = partition_id
        self.sequence_number = sequence_number
        self.offset = sequence_number if offset is None else offset  # byte position in the log
        self.enqueued_time = enqueued_time  # epoch seconds
        self.raw = raw  # the event's encoded AMQP message
        self.connection_id = connection_id
        self._batch_key = batch_key
        self._decoded: dict[str, Any] | None = None

    def _d(self) -> dict[str, Any]:
        if self._decoded is None:
            self._decoded = message_sections(self.raw)
        return self._decoded

    @property
    def enqueued_ms(self) -> int:
        return int(self.enqueued_time * 1000)

    @property
    def body(self) -> bytes:
        return body_bytes(self._d())

    @property
    def content_type(self) -> str | None:
        kind = self._d()["properties"][6]
        return kind if isinstance(kind, str) else None

    @property
    def properties(self) -> dict[str, Any]:
        """Application properties."""
        props: dict[str, Any] = self._d()["application_properties"]
        return props

    @property
    def annotations(self) -> dict[str, Any]:
        """Message annotations (symbol keys as str)."""
        annotations: dict[str, Any] = self._d()["annotations"]
        return annotations

    @property
    def partition_key(self) -> str | None:
        k = self.annotations.get(PARTITION_KEY, self._batch_key)
        return None if k is None else str(k)

    def json(self) -> Any:
        return json.loads(self.body)

    def __repr__(self) -> str:
        return (
            f"ReceivedEvent(hub={self.hub!r}, partition_id={self.partition_id!r}, "
            f"sequence_number={self.sequence_number}, body={self.body[:80]!r}, "
            f"properties={self.properties!r}, partition_key={self.partition_key!r})"
        )


def body_bytes(m: dict[str, Any]) -> bytes:
    """An event's body as bytes: its Data sections joined, or its value (text as UTF-8)."""
    if m["data"]:
        return b"".join(m["data"])
    v = m["value"]
    if v is None or isinstance(v, bytes):
        return v or b""
    return (v if isinstance(v, str) else repr(v)).encode("utf-8")


def message_sections(payload: bytes | memoryview) -> dict[str, Any]:
    """Decode an AMQP message's sections: annotations (str keys), properties (13 fields),
    application properties, data sections (bytes) and, for a body that is not Data, the value."""
    out: dict[str, Any] = {
        "annotations": {},
        "properties": [None] * 13,
        "application_properties": {},
        "data": [],
        "value": None,
    }
    for code, section, _raw in amqp_frames.sections(payload):
        value = section.value if isinstance(section, amqp_frames.Described) else section
        if code == _MESSAGE_ANNOTATIONS and isinstance(value, dict):
            out["annotations"] = {str(k): v for k, v in value.items()}
        elif code == _PROPERTIES and isinstance(value, list):
            out["properties"] = (value + [None] * 13)[:13]
        elif code == _APPLICATION_PROPERTIES and isinstance(value, dict):
            out["application_properties"] = {str(k): v for k, v in value.items()}
        elif code == _DATA:
            out["data"].append(bytes(value))
        elif code in _BODY_VALUES:
            out["value"] = value
    return out


def unpack_transfer(data: bytes, fmt: int) -> tuple[list[bytes], str | None]:
    """The encoded events in one transfer (a batch holds one per Data section), and the partition
    key: the batch's own, else its first event's."""
    if fmt != amqp_frames.BATCH_MESSAGE_FORMAT:
        key = message_sections(data)["annotations"].get(PARTITION_KEY)
        return [bytes(data)], None if key is None else str(key)
    key = None
    events: list[bytes] = []
    for code, raw in amqp_frames.split_sections(data):
        if code == _DATA:
            events.append(bytes(amqp_frames.data_section_bytes(raw)))
        elif code == _MESSAGE_ANNOTATIONS:
            value = amqp_frames.decode(raw, 1)[0]  # skip the section's 0x00, keep the map
            if isinstance(value, amqp_frames.Described) and isinstance(value.value, dict):
                key = value.value.get(PARTITION_KEY)
    if key is None and events:
        key = message_sections(events[0])["annotations"].get(PARTITION_KEY)
    return events, None if key is None else str(key)
