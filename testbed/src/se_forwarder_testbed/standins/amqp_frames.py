"""AMQP 1.0 framing helpers for the Event Hubs stand-in, used between proton and the socket.

* :class:`OutboundPadder` pads every performative that proton writes to its full field count.
  Proton leaves trailing null fields out (AMQP allows it); azure-eventhub 5.15.1 reads the fields
  of a frame by position and fails on a short list, while the real service sends full-length
  frames. Padding with explicit nulls changes nothing in meaning.
* :class:`InboundScanner` watches the client's frames (unchanged) for what proton's Python
  binding does not expose: the message format of each delivery (``0x80013700`` = batch) and the
  desired capabilities of each attach.
* :func:`decode` / :func:`sections`: a small decoder for AMQP-encoded values and message sections.
"""

from __future__ import annotations

import collections
import struct
from collections.abc import Callable, Iterator
from typing import Any

# Full field counts of the transport performatives, by descriptor code (AMQP 1.0 §2.7).
FIELD_COUNTS = {
    0x10: 10,  # open
    0x11: 8,  # begin
    0x12: 14,  # attach
    0x13: 11,  # flow
    0x14: 11,  # transfer
    0x15: 6,  # disposition
    0x16: 3,  # detach
    0x17: 1,  # end
    0x18: 1,  # close
}
ATTACH, TRANSFER, DETACH = 0x12, 0x14, 0x16
BATCH_MESSAGE_FORMAT = 0x80013700

_U32 = struct.Struct(">I")
_FRAME_HEADER = struct.Struct(">IBBH")


class Described:
    """A described value that is not one of the known composite types."""

    __slots__ = ("descriptor", "value")

    def __init__(self, descriptor: Any, value: Any) -> None:
        self.descriptor, self.value = descriptor, value

    def __repr__(self) -> str:  # pragma: no cover - debugging aid
        return f"Described({self.descriptor!r}, {self.value!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Described) and (self.descriptor, self.value) == (
            other.descriptor,
            other.value,
        )

    __hash__ = None  # type: ignore[assignment]  # compared by value, mutable: not a dict key


class Symbol(str):
    """An AMQP symbol (kept apart from strings where it matters)."""


# ---------------------------------------------------------------------------------------------
# Decoding


def _fixed(fmt: str) -> Callable[[memoryview, int], tuple[Any, int]]:
    s = struct.Struct(fmt)

    def dec(b: memoryview, p: int) -> tuple[Any, int]:
        return s.unpack_from(b, p)[0], p + s.size

    return dec


def _variable(width: int, kind: str) -> Callable[[memoryview, int], tuple[Any, int]]:
    def dec(b: memoryview, p: int) -> tuple[Any, int]:
        n = b[p] if width == 1 else _U32.unpack_from(b, p)[0]
        p += width
        raw = bytes(b[p : p + n])
        if kind == "str":
            return raw.decode("utf-8"), p + n
        if kind == "sym":
            return Symbol(raw.decode("ascii")), p + n
        return raw, p + n

    return dec


def _sized_header(b: memoryview, p: int, width: int) -> tuple[int, int, int]:
    """(size, count, offset after the header) of a list, map or array of this width (1 or 4)."""
    if width == 1:
        return b[p], b[p + 1], p + 2
    return _U32.unpack_from(b, p)[0], _U32.unpack_from(b, p + width)[0], p + 2 * width


def _compound(width: int, is_map: bool) -> Callable[[memoryview, int], tuple[Any, int]]:
    def dec(b: memoryview, p: int) -> tuple[Any, int]:
        size, count, q = _sized_header(b, p, width)
        end = p + width + size
        items = []
        for _ in range(count):
            v, q = decode(b, q)
            items.append(v)
        if is_map:
            return {_hashable(items[i]): items[i + 1] for i in range(0, len(items), 2)}, end
        return items, end

    return dec


def _array(width: int) -> Callable[[memoryview, int], tuple[Any, int]]:
    def dec(b: memoryview, p: int) -> tuple[Any, int]:
        size, count, q = _sized_header(b, p, width)
        end = p + width + size
        ctor = b[q]
        q += 1
        descriptor = None
        if ctor == 0x00:
            descriptor, q = decode(b, q)
            ctor, q = b[q], q + 1
        items = []
        for _ in range(count):
            v, q = _DECODERS[ctor](b, q)
            items.append(v if descriptor is None else Described(descriptor, v))
        return items, end

    return dec


def _hashable(v: Any) -> Any:
    return tuple(v) if isinstance(v, list) else v


def _described(b: memoryview, p: int) -> tuple[Any, int]:
    descriptor, p = decode(b, p)
    value, p = decode(b, p)
    return Described(descriptor, value), p


_DECODERS: dict[int, Callable[[memoryview, int], tuple[Any, int]]] = {
    0x00: _described,
    0x40: lambda b, p: (None, p),
    0x41: lambda b, p: (True, p),
    0x42: lambda b, p: (False, p),
    0x43: lambda b, p: (0, p),
    0x44: lambda b, p: (0, p),
    0x45: lambda b, p: ([], p),
    0x50: _fixed(">B"),
    0x51: _fixed(">b"),
    0x52: _fixed(">B"),
    0x53: _fixed(">B"),
    0x54: _fixed(">b"),
    0x55: _fixed(">b"),
    0x56: lambda b, p: (b[p] != 0, p + 1),
    0x60: _fixed(">H"),
    0x61: _fixed(">h"),
    0x70: _fixed(">I"),
    0x71: _fixed(">i"),
    0x72: _fixed(">f"),
    0x73: _fixed(">I"),
    0x74: lambda b, p: (bytes(b[p : p + 4]), p + 4),  # decimal32, kept raw
    0x80: _fixed(">Q"),
    0x81: _fixed(">q"),
    0x82: _fixed(">d"),
    0x83: _fixed(">q"),
    0x84: lambda b, p: (bytes(b[p : p + 8]), p + 8),  # decimal64
    0x94: lambda b, p: (bytes(b[p : p + 16]), p + 16),  # decimal128
    0x98: lambda b, p: (bytes(b[p : p + 16]), p + 16),  # uuid, raw 16 bytes
    0xA0: _variable(1, "bin"),
    0xA1: _variable(1, "str"),
    0xA3: _variable(1, "sym"),
    0xB0: _variable(4, "bin"),
    0xB1: _variable(4, "str"),
    0xB3: _variable(4, "sym"),
    0xC0: _compound(1, False),
    0xC1: _compound(1, True),
    0xD0: _compound(4, False),
    0xD1: _compound(4, True),
    0xE0: _array(1),
    0xF0: _array(4),
}


def decode(b: memoryview | bytes, p: int = 0) -> tuple[Any, int]:
    """Decode one AMQP value at offset ``p``; return (value, offset after it)."""
    if not isinstance(b, memoryview):
        b = memoryview(b)
    ctor = b[p]
    try:
        dec = _DECODERS[ctor]
    except KeyError:
        raise ValueError(f"unknown AMQP constructor 0x{ctor:02x} at offset {p}") from None
    return dec(b, p + 1)


_FIXED_WIDTH = {
    0x40: 0,
    0x41: 0,
    0x42: 0,
    0x43: 0,
    0x44: 0,
    0x45: 0,
    0x50: 1,
    0x51: 1,
    0x52: 1,
    0x53: 1,
    0x54: 1,
    0x55: 1,
    0x56: 1,
    0x60: 2,
    0x61: 2,
    0x70: 4,
    0x71: 4,
    0x72: 4,
    0x73: 4,
    0x74: 4,
    0x80: 8,
    0x81: 8,
    0x82: 8,
    0x83: 8,
    0x84: 8,
    0x94: 16,
    0x98: 16,
}


def skip(b: memoryview | bytes, p: int) -> int:
    """Offset just after the value at ``p``, without decoding it."""
    ctor = b[p]
    p += 1
    if ctor == 0x00:
        return skip(b, skip(b, p))
    width = _FIXED_WIDTH.get(ctor)
    if width is not None:
        return p + width
    if ctor in (0xA0, 0xA1, 0xA3, 0xC0, 0xC1, 0xE0):
        return p + 1 + b[p]
    if ctor in (0xB0, 0xB1, 0xB3, 0xD0, 0xD1, 0xF0):
        size: int = _U32.unpack_from(b, p)[0]
        return p + 4 + size
    raise ValueError(f"unknown AMQP constructor 0x{ctor:02x} at offset {p - 1}")


def split_sections(payload: bytes | memoryview) -> list[tuple[int, memoryview]]:
    """Cut an encoded message into (section code, raw section bytes) without decoding values."""
    b = memoryview(payload)
    out = []
    p, n = 0, len(b)
    while p < n:
        if b[p] != 0x00 or b[p + 1] != 0x53:
            if b[p] == 0x00 and b[p + 1] == 0x80:
                code = int.from_bytes(b[p + 2 : p + 10], "big")
                end = skip(b, p + 10)
                out.append((code, b[p:end]))
                p = end
                continue
            raise ValueError(f"message section expected at offset {p}")
        end = skip(b, p + 3)
        out.append((b[p + 2], b[p:end]))
        p = end
    return out


def data_section_bytes(section: memoryview) -> memoryview:
    """The binary inside a raw Data section (``0x00 0x53 0x75`` + vbin8/vbin32)."""
    ctor = section[3]
    if ctor == 0xA0:
        return section[5 : 5 + section[4]]
    if ctor == 0xB0:
        return section[8 : 8 + _U32.unpack_from(section, 4)[0]]
    raise ValueError(f"a Data section holds a binary, not 0x{ctor:02x}")


def sections(payload: bytes | memoryview) -> Iterator[tuple[int, Any, memoryview]]:
    """Split an encoded message into (section code, decoded value, raw section bytes)."""
    b = memoryview(payload)
    p = 0
    while p < len(b):
        start = p
        if b[p] != 0x00:
            raise ValueError(f"message section expected at offset {p}")
        code, p = decode(b, p + 1)
        value, p = decode(b, p)
        yield int(code) if isinstance(code, int) else code, value, b[start:p]


# ---------------------------------------------------------------------------------------------
# Framing


class _FrameSplitter:
    """Cuts a byte stream into protocol headers (8 bytes, ``AMQP...``) and whole frames."""

    def __init__(self) -> None:
        self._buf = bytearray()

    def units(self, data: bytes) -> list[bytes]:
        buf = self._buf
        buf += data
        out: list[bytes] = []
        p, n = 0, len(buf)
        while n - p >= 8:
            if buf[p : p + 4] == b"AMQP":
                out.append(bytes(buf[p : p + 8]))
                p += 8
                continue
            size = _U32.unpack_from(buf, p)[0]
            if size < 8:
                raise ValueError(f"bad AMQP frame size {size}")
            if n - p < size:
                break
            out.append(bytes(buf[p : p + size]))
            p += size
        del buf[:p]
        return out


def _pad_body(body: memoryview) -> bytes | None:
    """Return the frame body with its performative padded, or None when nothing to change."""
    if len(body) < 4 or body[0] != 0x00:
        return None
    if body[1] == 0x53:
        code, p = body[2], 3
    elif body[1] == 0x80:
        code, p = int.from_bytes(body[2:10], "big"), 10
    else:
        return None
    full = FIELD_COUNTS.get(code)
    if full is None:
        return None
    ctor = body[p]
    elems: bytes | memoryview
    if ctor == 0x45:
        count, elems, end = 0, b"", p + 1
    elif ctor == 0xC0:
        size, count = body[p + 1], body[p + 2]
        elems, end = body[p + 3 : p + 2 + size], p + 2 + size
    elif ctor == 0xD0:
        size, count = _U32.unpack_from(body, p + 1)[0], _U32.unpack_from(body, p + 5)[0]
        elems, end = body[p + 9 : p + 5 + size], p + 5 + size
    else:
        return None
    if count >= full:
        return None
    elems = bytes(elems) + b"\x40" * (full - count)
    if len(elems) + 1 <= 0xFF:
        lst = bytes((0xC0, len(elems) + 1, full)) + elems
    else:
        lst = b"\xd0" + _U32.pack(len(elems) + 4) + _U32.pack(full) + elems
    return bytes(body[:p]) + lst + bytes(body[end:])


def pad_frame(frame: bytes | memoryview) -> bytes:
    """Pad the performative of one AMQP frame (type 0) to its full field count."""
    frame = memoryview(frame)
    size, doff, ftype, channel = _FRAME_HEADER.unpack_from(frame, 0)
    if ftype != 0 or size <= doff * 4:
        return bytes(frame)
    body = _pad_body(frame[doff * 4 :])
    if body is None:
        return bytes(frame)
    return (
        _FRAME_HEADER.pack(doff * 4 + len(body), doff, ftype, channel)
        + bytes(frame[8 : doff * 4])
        + body
    )


class OutboundPadder:
    """Feed it what proton writes; it returns the same stream with full-length performatives."""

    def __init__(self) -> None:
        self._splitter = _FrameSplitter()

    def feed(self, data: bytes) -> bytes:
        out = bytearray()
        for unit in self._splitter.units(data):
            out += unit if len(unit) == 8 else pad_frame(unit)
        return bytes(out)


class InboundScanner:
    """Watches the client's frames for sender-link names and each delivery's message format.

    ``next_format(link_name)`` answers (and forgets) the format of the link's next delivery, in
    the order they arrived (proton hands deliveries of one link over in that order); proton's
    Python binding has no accessor for it.
    """

    def __init__(self) -> None:
        self._splitter = _FrameSplitter()
        self._links: dict[tuple[int, int], str] = {}
        self._formats: dict[str, collections.deque[int]] = {}
        self._capabilities: dict[str, frozenset[str]] = {}

    def feed(self, data: bytes) -> None:
        for unit in self._splitter.units(data):
            if len(unit) > 8:
                self._frame(unit)

    def _frame(self, frame: bytes) -> None:
        size, doff, ftype, channel = _FRAME_HEADER.unpack_from(frame, 0)
        p = doff * 4
        if ftype != 0 or size - p < 4 or frame[p] != 0x00 or frame[p + 1] != 0x53:
            return
        code = frame[p + 2]
        if code not in (ATTACH, TRANSFER, DETACH):
            return
        ctor = frame[p + 3]
        if ctor == 0xC0:
            count, q = frame[p + 5], p + 6
        elif ctor == 0xD0:
            count, q = _U32.unpack_from(frame, p + 8)[0], p + 12
        else:
            return
        fields = []
        want = {ATTACH: 13, TRANSFER: 4, DETACH: 1}[code]
        for _ in range(min(count, want)):
            v, q = decode(frame, q)
            fields.append(v)
        fields += [None] * (want - len(fields))
        if code == ATTACH:
            self._links[(channel, fields[1])] = fields[0]
            desired = fields[12]
            self._capabilities[fields[0]] = frozenset(
                map(str, desired if isinstance(desired, list) else [desired] if desired else [])
            )
        elif code == DETACH:
            self._links.pop((channel, fields[0]), None)
        else:
            name = self._links.get((channel, fields[0]))
            if name is not None and fields[2] is not None:  # a delivery's first transfer frame
                self._formats.setdefault(name, collections.deque()).append(fields[3] or 0)

    def capabilities(self, link_name: str) -> frozenset[str]:
        """The desired capabilities of the link's last attach."""
        return self._capabilities.get(link_name, frozenset())

    def next_format(self, link_name: str) -> int:
        queue = self._formats.get(link_name)
        return queue.popleft() if queue else 0
