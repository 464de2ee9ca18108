"""``dead-letter.jsonl``: rows a sink can never accept, each with the reason (never a transient
answer: the worker dead-letters only what no retry can fix).

A dead letter is a loss a person must look at, so ``status`` fails (exit 1, ``DEAD LETTERS``)
while the file holds lines nobody acknowledged; ``status --ack-dead-letters`` records, in
``dead-letter.ack`` beside it, the file's inode and how far it was read (later lines count
again; a file removed or replaced starts again at 0)."""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ..clock import SYSTEM, Clock
from ..outbox import OutboxRow


class DeadLetters:
    def __init__(self, path: Path, clock: Clock = SYSTEM) -> None:
        self.path = path
        self.clock = clock
        self._lock = threading.Lock()

    def write(self, sink: str, reason: str, rows: Sequence[OutboxRow]) -> None:
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.clock.wall_seconds()))
        lines = []
        for row in rows:
            try:
                record = json.loads(row.payload)
            except ValueError:
                record = row.payload
            lines.append(json.dumps({"time": now, "sink": sink, "reason": reason, "table": row.table,
                                     "seq": row.seq, "record": record}, separators=(",", ":")))
        data = ("\n".join(lines) + "\n").encode("utf-8")
        with self._lock:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                os.write(fd, data)
            finally:
                os.close(fd)


# -- reading and acknowledging them (``se-forwarder status``) ---------------------------------

ACK_SUFFIX = ".ack"  # dead-letter.jsonl -> dead-letter.ack: how far a person has read it
_CHUNK = 1 << 20


@dataclass(frozen=True, slots=True)
class Backlog:
    """``dead-letter.jsonl`` as ``status`` sees it: whole lines written, and how many of them
    were acknowledged (``status --ack-dead-letters``)."""

    records: int
    acknowledged: int
    size: int  # bytes of whole lines
    inode: int

    @property
    def pending(self) -> int:
        return self.records - self.acknowledged


def ack_path(path: Path) -> Path:
    return path.with_suffix(ACK_SUFFIX)


def backlog(path: Path) -> Backlog | None:
    """The dead letters in ``path`` (None: there is no such file). An acknowledgement counts only
    for the same file (inode) and at most its size: a file removed or replaced after it was read
    starts again at 0. OSError when the file exists but cannot be read."""
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    ack = _read_ack(ack_path(path))
    offset = ack.get("offset", 0) if ack.get("inode") == st.st_ino else 0
    if not isinstance(offset, int) or not 0 <= offset <= st.st_size:
        offset = 0
    before = total = whole = pos = 0  # whole: bytes up to the end of the last whole line
    with path.open("rb") as f:
        while pos < st.st_size and (chunk := f.read(min(_CHUNK, st.st_size - pos))):
            total += chunk.count(b"\n")
            if pos < offset:
                before += chunk[:offset - pos].count(b"\n")
            if (last := chunk.rfind(b"\n")) >= 0:
                whole = pos + last + 1
            pos += len(chunk)
    return Backlog(total, before, whole, st.st_ino)


def acknowledge(path: Path, clock: Clock = SYSTEM) -> Backlog | None:
    """Record every whole line of ``path`` as read (atomically, mode 0600); what it holds now."""
    now = backlog(path)
    if now is None:
        return None
    at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(clock.wall_seconds()))
    data = json.dumps({"inode": now.inode, "offset": now.size, "total": now.records, "at": at})
    target = ack_path(path)
    tmp = target.with_suffix(".ack.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, data.encode())
    finally:
        os.close(fd)
    os.replace(tmp, target)
    return Backlog(now.records, now.records, now.size, now.inode)


def _read_ack(path: Path) -> dict:
    try:
        value = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}
