"""Opening the state database after a crash or a disk fault, without losing records in silence.

SQLite treats a damaged database as "not a database" (an error), but a damaged write-ahead log
as the end of the log: the committed transactions after the damage are dropped without a word.
So before opening, the WAL is checked the way SQLite reads it (header, salts, cumulative
checksums); when committed frames lie beyond a damaged one, or the database itself is
unreadable, the files are moved aside as ``state.db.corrupt-<time>`` (a critical log line says
so), a fresh store is opened, and what can still be read from the damaged copy (the tracker
state, the counters and every row not yet delivered to all sinks) is copied into it before the
agent starts. When rows could not be read, what the tracker state says was emitted is rebuilt
and what cannot be is counted as lost, in the same transaction: the caller hands in how
(``recording/rebuild.py``, a layer above the outbox, which reads the tracker's state).
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..clock import SYSTEM, Clock
from ..oshost import files
from ..oshost.lock import StateLock
from .row import OutboxRow
from .store import TRACKER_KEY, Store

LOST = "lost"  # the store counter (counter:lost)


@dataclass(frozen=True, slots=True)
class Rebuilt:
    entries: dict[str, Any] = field(default_factory=dict)  # held|<n> -> record, for the hold
    lost: int = 0  # unreadable rows not made up for by a rebuilt record (a lower bound)


# (recovered meta, decoded; RecordIds of the rows recovered; unreadable rows, None: unknown)
Rebuild = Callable[[dict[str, Any], set[str], int | None], Rebuilt]

_WAL_MAGIC = (0x377F0682, 0x377F0683)  # checksums little- / big-endian
_WAL_HEADER = 32
_FRAME_HEADER = 24


def open_or_recover(
    state_dir: str | Path, *, rebuild: Rebuild, clock: Clock = SYSTEM, **kw: Any
) -> tuple[Store, str | None]:
    """The store, and a sentence for a critical log line when the old one had to be replaced;
    ``rebuild`` makes up, from the tracker state, for rows that could not be read."""
    state_dir = Path(state_dir)
    state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    owner = StateLock(state_dir)
    owner.acquire()  # before anything is moved: never under another agent's feet
    try:
        damage = wal_damage(state_dir / "state.db-wal")
        if damage is None:
            try:
                store = Store(state_dir, owner=owner, **kw)
            except sqlite3.OperationalError:
                raise  # cannot open (permissions, a locked file): not damage, never moved aside
            except sqlite3.DatabaseError as exc:  # "not a database", "disk image is malformed"
                damage = str(exc)
            else:  # a page damaged where opening did not read (the tracker state, a leaf)
                damage = store.damage()
                if damage is None:
                    return store, None
                store.close(release=False)
        aside = _move_aside(state_dir, clock)
        store = Store(state_dir, owner=owner, **kw)
    except BaseException:
        owner.release()
        raise
    found = salvage(aside)
    rebuilt = found.copy_into(store, rebuild)
    note = (
        f"state database damaged ({damage}); moved aside as {aside.name}; recovered "
        f"{len(found.rows)} undelivered record(s)"
        + (" and the tracker state" if found.meta.get(TRACKER_KEY) is not None else "")
        + (f"; unreadable: {found.unreadable}" if found.unreadable else "")
        + (
            f"; rebuilt {len(rebuilt.entries)} record(s) from the tracker state (sent again "
            "with their RecordIds)"
            if rebuilt.entries
            else ""
        )
        + (f"; {rebuilt.lost} record(s) lost" if rebuilt.lost else "")
        + ("; how many rows were lost is unknown" if found.unreadable_rows is None else "")
    )
    return store, note


def wal_damage(path: Path) -> str | None:
    """Why SQLite would drop committed transactions from this WAL, or None when it would not
    (no WAL, an empty one, or only a torn, uncommitted tail)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    if len(data) <= _WAL_HEADER:
        return None
    magic, _version, page_size, _seq, salt1, salt2, c1, c2 = struct.unpack(">8I", data[:32])
    if magic not in _WAL_MAGIC or page_size < 512 or page_size & (page_size - 1):
        return "write-ahead log header is damaged"
    order = ">" if magic & 1 else "<"
    s = _checksum(data[:24], order, (0, 0))
    if s != (c1, c2):
        return "write-ahead log header checksum does not match"
    frame = _FRAME_HEADER + page_size
    broken = None
    for offset in range(_WAL_HEADER, len(data) - frame + 1, frame):
        head = struct.unpack(">6I", data[offset : offset + _FRAME_HEADER])
        same_log = head[2:4] == (salt1, salt2)
        if broken is None:
            s = _checksum(
                data[offset : offset + 8] + data[offset + _FRAME_HEADER : offset + frame], order, s
            )
            if not same_log or s != head[4:6]:
                broken = offset
        elif same_log and head[1] != 0:  # a commit frame of this log beyond the damage
            return (
                f"write-ahead log damaged at byte {broken}: committed transactions after it "
                "would be dropped"
            )
    return None


def _checksum(data: bytes, order: str, start: tuple[int, int]) -> tuple[int, int]:
    s0, s1 = start
    words = struct.unpack(f"{order}{len(data) // 4}I", data)
    for i in range(0, len(words), 2):
        s0 = (s0 + words[i] + s1) & 0xFFFFFFFF
        s1 = (s1 + words[i + 1] + s0) & 0xFFFFFFFF
    return s0, s1


def _move_aside(state_dir: Path, clock: Clock) -> Path:
    """``state.db`` (with its ``-wal`` and ``-shm``, renamed so SQLite still pairs them) to
    ``state.db.corrupt-<time>``."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(clock.wall_seconds()))
    aside = state_dir / f"state.db.corrupt-{stamp}"
    for suffix in ("", "-wal", "-shm"):
        part = state_dir / f"state.db{suffix}"
        if part.exists():
            part.replace(aside.with_name(aside.name + suffix))
    return aside


@dataclass
class Salvage:
    meta: dict[str, str]  # key -> JSON text (tracker state, counters)
    rows: list[OutboxRow]  # not yet delivered to every sink, in order
    unreadable: str | None = None  # what could not be read, if anything
    unreadable_rows: int | None = 0  # rows not delivered to every sink and not read (None: unknown)

    def copy_into(self, store: Store, rebuild: Rebuild) -> Rebuilt:
        """Into the fresh store, with what ``rebuild`` says is missing."""
        if not (self.meta or self.rows or self.unreadable_rows):
            return Rebuilt()
        meta = {k: json.loads(v) for k, v in self.meta.items()}
        ids = {rid for r in self.rows if (rid := _record_id(r)) is not None}
        rebuilt = rebuild(meta, ids, self.unreadable_rows)
        meta |= rebuilt.entries
        if rebuilt.lost:
            meta[f"counter:{LOST}"] = int(meta.get(f"counter:{LOST}", 0)) + rebuilt.lost
        state = meta.pop(TRACKER_KEY, None)  # null: the recorder starts fresh
        fresh = [
            OutboxRow(r.table, r.partition_key, r.payload, r.size, r.phase, r.event_type)
            for r in self.rows
        ]  # new seqs in the new outbox, same order
        store.commit(TRACKER_KEY, state, fresh, meta)
        return rebuilt


def _record_id(row: OutboxRow) -> str | None:
    try:
        rid = json.loads(row.payload).get("RecordId")
    except (ValueError, AttributeError):
        return None
    return rid if isinstance(rid, str) else None


def salvage(path: Path) -> Salvage:
    """Everything still readable from a damaged database, row by row where it must. It reads a
    copy: SQLite would rewrite the original (and drop its log) on opening, and the damaged files
    are kept as they are for whoever looks into the fault."""
    copy = path.with_name(path.name + ".reading")
    try:
        for suffix in ("", "-wal"):
            src = path.with_name(path.name + suffix)
            if src.exists():
                copy.with_name(copy.name + suffix).unlink(missing_ok=True)  # a crash's
                files.copy_new(src, copy.with_name(copy.name + suffix))
        return _salvage(copy)
    except OSError as exc:
        return Salvage({}, [], f"cannot copy it: {exc}")
    finally:
        for suffix in ("", "-wal", "-shm"):
            copy.with_name(copy.name + suffix).unlink(missing_ok=True)


def _salvage(path: Path) -> Salvage:
    try:
        db = sqlite3.connect(path)
    except sqlite3.Error as exc:
        return Salvage({}, [], f"cannot open it: {exc}")
    try:
        with contextlib.suppress(sqlite3.Error):  # the log's pages into the file: the raw scan
            db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()  # sees what it holds
        meta, problem = _read_meta(db)
        rows, row_problem, lost = _read_rows(db, path)
        return Salvage(meta, rows, "; ".join(p for p in (problem, row_problem) if p) or None, lost)
    finally:
        db.close()


def _read_meta(db: sqlite3.Connection) -> tuple[dict[str, str], str | None]:
    try:
        found = dict(db.execute("SELECT key, value FROM meta").fetchall())
    except sqlite3.Error as exc:
        return {}, f"tracker state: {exc}"
    return found, None  # the tracker state, counters, the hook journal: all of it


_COLS = "tbl, pkey, payload, size, phase, event_type, seq"


def _read_rows(
    db: sqlite3.Connection, path: Path
) -> tuple[list[OutboxRow], str | None, int | None]:
    """The rows not delivered to every sink, what went wrong, and how many could not be read
    (None: not known). Through SQLite, row by row where the table is damaged, and what its
    b-tree cannot reach any more off the raw leaf pages (``pages.py``)."""
    try:
        start = db.execute("SELECT COALESCE(MIN(acked), 0) FROM cursors").fetchone()[0]
        cursors_ok = True
    except sqlite3.Error:
        start, cursors_ok = 0, False  # every row still there is sent again (RecordIds dedupe)
    try:
        rows = db.execute(
            f"SELECT {_COLS} FROM outbox WHERE seq > ? ORDER BY seq", (start,)
        ).fetchall()
        return [OutboxRow(*r) for r in rows], None, 0
    except sqlite3.Error as exc:
        problem = f"outbox: {exc}"
    lo, hi = _one(db, "SELECT MIN(seq) FROM outbox"), _last_seq(db)
    found: dict[int, OutboxRow] = {}
    if hi is not None:
        for seq in range(start + 1, hi + 1):  # the table is damaged somewhere: row by row
            try:
                row = db.execute(f"SELECT {_COLS} FROM outbox WHERE seq = ?", (seq,)).fetchone()
            except sqlite3.Error:
                continue
            if row is not None:
                found[seq] = OutboxRow(*row)
    from . import pages  # a damaged table only: no agent loads the page reader otherwise

    for seq, row in pages.outbox_rows(path).items():  # under a damaged interior page
        if seq > start and (hi is None or seq <= hi):
            found.setdefault(seq, row)
    rows = [found[s] for s in sorted(found)]
    if hi is None or not cursors_ok:
        return rows, problem, None
    first = max(start + 1, lo or 0)  # below MIN(seq): dropped at the bound, counted then
    lost = sum(1 for s in range(first, hi + 1) if s not in found)
    return rows, (f"outbox: {lost} row(s) unreadable" if lost else None), lost


def _one(db: sqlite3.Connection, sql: str) -> int | None:
    try:
        value = db.execute(sql).fetchone()[0]
    except sqlite3.Error:
        return None
    return value if isinstance(value, int) else None


def _last_seq(db: sqlite3.Connection) -> int | None:
    """The last seq handed out: the outbox's own maximum, or what AUTOINCREMENT keeps in
    ``sqlite_sequence`` (readable when the outbox is not); None when neither is."""
    found = _one(db, "SELECT MAX(seq) FROM outbox")
    kept = _one(db, "SELECT seq FROM sqlite_sequence WHERE name = 'outbox'")
    return max((v for v in (found, kept) if v is not None), default=None)
