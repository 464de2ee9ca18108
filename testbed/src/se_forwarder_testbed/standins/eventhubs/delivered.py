"""An event as a receiver gets it: the stored message with the service's annotations added.

The service stamps every event it hands out with ``x-opt-sequence-number`` (long),
``x-opt-offset`` (string), ``x-opt-enqueued-time`` (timestamp) and, when the event had one,
``x-opt-partition-key`` (string), in the message-annotations section; a receiver that asked for
``com.microsoft:enable-receiver-runtime-metric`` also gets the partition's last enqueued event in
delivery annotations. The producer's own bytes (its annotations, properties, body) are kept as
they are: the new entries are spliced into the encoded map, nothing is decoded and re-encoded.
"""

from __future__ import annotations

import struct
import time

from proton import Data, symbol, timestamp

from .. import amqp_frames
from .events import PARTITION_KEY, ReceivedEvent

_HEADER, _DELIVERY_ANNOTATIONS, _MESSAGE_ANNOTATIONS = 0x70, 0x71, 0x72
_U32 = struct.Struct(">I")


def _section(code: int, items: bytes, count: int) -> bytes:
    """A described map section (``0x00 0x53 code`` + map32) of ``count`` encoded items."""
    return bytes((0x00, 0x53, code, 0xD1)) + _U32.pack(len(items) + 4) + _U32.pack(count) + items


def _map_items(section: memoryview) -> tuple[bytes, int]:
    """The encoded items of a map section, and how many values they are (keys included)."""
    p = 3 if section[1] == 0x53 else 10
    ctor = section[p]
    if ctor == 0xC1:
        size, count = section[p + 1], section[p + 2]
        return bytes(section[p + 3 : p + 2 + size]), count
    if ctor == 0xD1:
        size, count = _U32.unpack_from(section, p + 1)[0], _U32.unpack_from(section, p + 5)[0]
        return bytes(section[p + 9 : p + 5 + size]), count
    return b"", 0


def _keys(items: bytes, count: int) -> set[str]:
    """The keys among ``count`` encoded map items."""
    keys, p = set(), 0
    for i in range(count):
        value, p = amqp_frames.decode(items, p)
        if i % 2 == 0:
            keys.add(str(value))
    return keys


def _annotations(event: ReceivedEvent, existing: bytes, count: int) -> tuple[bytes, int]:
    d = Data()
    d.put_symbol(symbol("x-opt-sequence-number"))
    d.put_long(event.sequence_number)
    d.put_symbol(symbol("x-opt-offset"))
    d.put_string(str(event.offset))
    d.put_symbol(symbol("x-opt-enqueued-time"))
    d.put_timestamp(timestamp(event.enqueued_ms))
    n = 6
    key = event.partition_key
    if key is not None and PARTITION_KEY not in _keys(existing, count):
        d.put_symbol(symbol(PARTITION_KEY))
        d.put_string(key)
        n += 2
    return d.encode(), n


def runtime_info(last_seq: int, last_offset: int, last_time: float) -> bytes:
    """Delivery annotations telling the partition's last enqueued event."""
    d = Data()
    d.put_symbol(symbol("last_enqueued_sequence_number"))
    d.put_long(last_seq)
    d.put_symbol(symbol("last_enqueued_offset"))
    d.put_string(str(last_offset))
    d.put_symbol(symbol("last_enqueued_time_utc"))
    d.put_timestamp(timestamp(int(last_time * 1000)))
    d.put_symbol(symbol("runtime_info_retrieval_time_utc"))
    d.put_timestamp(timestamp(int(time.time() * 1000)))
    return _section(_DELIVERY_ANNOTATIONS, d.encode(), 8)


def encode(event: ReceivedEvent, delivery_annotations: bytes = b"") -> bytes:
    """The bytes of ``event`` as delivered: header, delivery annotations, message annotations
    (the producer's plus the service's), then every other section unchanged."""
    header = b""
    existing, count = b"", 0
    rest: list[bytes] = []
    for code, raw in amqp_frames.split_sections(event.raw):
        if code == _HEADER:
            header = bytes(raw)
        elif code == _MESSAGE_ANNOTATIONS:
            existing, count = _map_items(raw)
        elif code != _DELIVERY_ANNOTATIONS:  # delivery annotations are per hop: not kept
            rest.append(bytes(raw))
    added, n = _annotations(event, existing, count)
    return b"".join(
        [
            header,
            delivery_annotations,
            _section(_MESSAGE_ANNOTATIONS, existing + added, count + n),
            *rest,
        ]
    )
