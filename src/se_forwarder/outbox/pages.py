"""Outbox rows read straight off the pages of a damaged database file.

When an interior page of the outbox's b-tree is damaged, SQLite cannot reach the leaf pages
below it, though they are intact: every record in them would be lost. So the salvage reads the
file as SQLite lays it out (https://www.sqlite.org/fileformat2.html): every table leaf page not on
the free list, each cell's record decoded, overflow chains followed. A cell is taken as an outbox
row only when it has the outbox's shape (the rowid alias NULL, three texts, the size) and its
payload is exactly ``size`` bytes of JSON, so a damaged cell, a page of another table or a stale
page is never mistaken for one.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .row import OutboxRow

_LEAF_TABLE = 0x0D
_HEADER = 100  # the file header, on page 1


def outbox_rows(path: Path) -> dict[int, OutboxRow]:
    """seq -> row, for every outbox row found on a readable leaf page (damaged cells skipped)."""
    try:
        data = path.read_bytes()
    except OSError:
        return {}
    if len(data) < _HEADER or not data.startswith(b"SQLite format 3\x00"):
        return {}
    page_size = int.from_bytes(data[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    if page_size < 512 or page_size & (page_size - 1):
        return {}
    usable = page_size - data[20]
    pages = _Pages(data, page_size, usable)
    free = pages.free_list(int.from_bytes(data[32:36], "big"))
    found: dict[int, OutboxRow] = {}
    for number in range(1, len(data) // page_size + 1):
        if number in free:
            continue
        for rowid, values in pages.leaf_cells(number):
            row = _as_outbox_row(rowid, values)
            if row is not None:
                found[rowid] = row
    return found


class _Pages:
    def __init__(self, data: bytes, page_size: int, usable: int) -> None:
        self.data, self.size, self.usable = data, page_size, usable
        self.count = len(data) // page_size

    def page(self, number: int) -> bytes:
        if not 1 <= number <= self.count:
            raise ValueError("page number out of range")
        return self.data[(number - 1) * self.size : number * self.size]

    def free_list(self, trunk: int) -> set[int]:
        """The pages on the free list (stale content), as far as the list can be read."""
        free: set[int] = set()
        while trunk and trunk not in free and len(free) <= self.count:
            try:
                page = self.page(trunk)
            except ValueError:
                break
            free.add(trunk)
            n = int.from_bytes(page[4:8], "big")
            if n > (self.usable - 8) // 4:
                break
            free.update(struct.unpack(f">{n}I", page[8 : 8 + 4 * n]))
            trunk = int.from_bytes(page[0:4], "big")
        return free

    def leaf_cells(self, number: int) -> Iterator[tuple[int, list[Any]]]:
        page = self.page(number)
        head = _HEADER if number == 1 else 0
        if page[head] != _LEAF_TABLE:
            return
        cells = int.from_bytes(page[head + 3 : head + 5], "big")
        for i in range(min(cells, (self.usable - head) // 2)):
            at = head + 8 + 2 * i
            try:
                yield self._cell(page, int.from_bytes(page[at : at + 2], "big"))
            except (ValueError, IndexError, UnicodeDecodeError, struct.error):
                continue  # a damaged cell: skipped, the row counted as unreadable by the caller

    def _cell(self, page: bytes, offset: int) -> tuple[int, list[Any]]:
        if not 8 <= offset < self.usable:
            raise ValueError("cell offset out of the page")
        size, offset = _varint(page, offset)
        rowid, offset = _varint(page, offset)
        local = _local_size(size, self.usable)
        payload = page[offset : offset + local]
        if len(payload) != local:
            raise ValueError("cell runs past the page")
        if local < size:
            payload += self._overflow(
                int.from_bytes(page[offset + local : offset + local + 4], "big"), size - local
            )
        return rowid, _record(payload)

    def _overflow(self, number: int, remaining: int) -> bytes:
        out = bytearray()
        seen: set[int] = set()
        while remaining > 0:
            if number in seen:
                raise ValueError("overflow chain loops")
            seen.add(number)
            page = self.page(number)
            take = min(remaining, self.usable - 4)
            out += page[4 : 4 + take]
            remaining -= take
            number = int.from_bytes(page[0:4], "big")
        return bytes(out)


def _local_size(size: int, usable: int) -> int:
    """How much of a table leaf cell's payload is on its page (the file format's rule)."""
    most = usable - 35
    if size <= most:
        return size
    least = ((usable - 12) * 32 // 255) - 23
    k = least + (size - least) % (usable - 4)
    return k if k <= most else least


def _varint(buf: bytes, at: int) -> tuple[int, int]:
    value = 0
    for i in range(9):
        byte = buf[at + i]
        if i == 8:
            return (value << 8) | byte, at + 9
        value = (value << 7) | (byte & 0x7F)
        if byte < 0x80:
            return value, at + i + 1
    raise ValueError("varint")  # pragma: no cover - the loop always returns


_INT_SIZES = {1: 1, 2: 2, 3: 3, 4: 4, 5: 6, 6: 8}


def _record(payload: bytes) -> list[Any]:
    header_size, at = _varint(payload, 0)
    if header_size > len(payload):
        raise ValueError("record header past its payload")
    types = []
    while at < header_size:
        t, at = _varint(payload, at)
        types.append(t)
    body = header_size
    values: list[Any] = []
    for t in types:
        if t == 0:
            values.append(None)
        elif t in _INT_SIZES:
            n = _INT_SIZES[t]
            values.append(int.from_bytes(payload[body : body + n], "big", signed=True))
            body += n
        elif t == 7:
            values.append(struct.unpack(">d", payload[body : body + 8])[0])
            body += 8
        elif t in (8, 9):
            values.append(t - 8)
        elif t >= 12:
            n = (t - 12) // 2
            raw = payload[body : body + n]
            if len(raw) != n:
                raise ValueError("value past its record")
            values.append(raw.decode("utf-8") if t % 2 else raw)
            body += n
        else:
            raise ValueError("reserved serial type")
    return values


def _as_outbox_row(rowid: int, values: list[Any]) -> OutboxRow | None:
    """An outbox row (``seq`` the rowid), or None when the cell is not one beyond doubt."""
    if len(values) not in (5, 7) or values[0] is not None or rowid <= 0:
        return None
    table, key, payload, size = values[1:5]
    phase, event_type = values[5:7] if len(values) == 7 else (None, None)
    if not (
        isinstance(table, str)
        and isinstance(key, str)
        and isinstance(payload, str)
        and isinstance(size, int)
        and all(v is None or isinstance(v, str) for v in (phase, event_type))
        and len(payload.encode("utf-8")) == size
    ):
        return None
    try:
        json.loads(payload)
    except ValueError:
        return None
    return OutboxRow(table, key, payload, size, phase, event_type, rowid)
