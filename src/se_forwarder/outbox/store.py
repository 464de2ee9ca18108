"""Durable state and outbox: one SQLite database in WAL mode in the state directory.

The tracker state and the records it produced are written in one transaction with synchronous
commits, so after a crash, a kill -9 or the VM's own reboot the agent finds either both or
neither. Records then wait in the outbox until every configured sink has acknowledged them; each
sink has its own cursor, so a slow sink never holds back another. The outbox is bounded: past
``max_bytes`` the oldest records are dropped, and what that loses is counted exactly, never
silent (``drops.py``). The bound counts every file of the store: the database's pages in use
(rows, tracker state, counters), and room for the write-ahead log (capped at a sixteenth of the
bound), its index and the free pages kept between compactions (``space.py``, ``compact``); a
bound under ``space.MIN_DISK_BOUND`` counts the rows' bytes only.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
from collections.abc import Collection, Iterable, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

from ..errors import StateError
from ..oshost.lock import StateLock
from . import space
from .drops import DROPPED, DROPPED_HEARTBEATS, PENDING_KEY, Dropped, Ledger, pending_lost
from .row import OutboxRow

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS outbox (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    tbl TEXT NOT NULL,
    pkey TEXT NOT NULL,
    payload TEXT NOT NULL,
    size INTEGER NOT NULL,
    phase TEXT,
    event_type TEXT
);
CREATE TABLE IF NOT EXISTS cursors (sink TEXT PRIMARY KEY, acked INTEGER NOT NULL);
"""


TRACKER_KEY = "tracker"  # the meta key of the tracker state
SUFFIXES = ("", "-wal", "-shm", "-journal")  # the files SQLite keeps a database in


def files_of(db: Path) -> list[Path]:
    """Every file of the database at ``db``, whether it exists or not."""
    return [db.with_name(db.name + s) for s in SUFFIXES]


class Store:
    """Thread-safe: the agent loop and every delivery worker share one connection under a lock."""

    def __init__(
        self,
        state_dir: str | Path,
        *,
        max_bytes: int = 256 * 1024 * 1024,
        durable: bool = True,
        owner: StateLock | None = None,
    ) -> None:
        self.dir = Path(state_dir)
        self.dir.mkdir(mode=0o700, parents=True, exist_ok=True)  # records name VMs: not for all
        self.path = self.dir / "state.db"
        self.max_bytes = max_bytes
        self._wal_limit = space.wal_limit(max_bytes)
        self._keep = space.SLACK_PAGES  # free pages kept between compactions (set when open)
        self._reserve = 0  # the log, its index and the free pages kept: bytes beside the rows
        self._lock = threading.Lock()
        self._drops = Ledger()
        self._transactions = 0  # begun so far: what depths() was read at tells if it is current
        self._depths: tuple[int, dict[str, int]] | None = None  # (at transaction, per sink)
        if owner is None:  # one agent (or replay) per state directory
            owner = StateLock(self.dir)
            owner.acquire()
        self._owner = owner
        try:
            self._open(durable)
        except BaseException:
            self._owner.release()
            raise

    def _open(self, durable: bool) -> None:
        for part in files_of(self.path):  # SQLite would follow them: write and truncate through
            if part.is_symlink():
                raise StateError(f"{part} is a symbolic link: refused, never written through")
        old_umask = os.umask(0o077)
        try:
            self._db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
            try:
                space.prepare(self._db)
                self._db.execute("PRAGMA journal_mode=WAL")
                space.bound_wal(self._db, self._wal_limit)
                page_size = int(self._db.execute("PRAGMA page_size").fetchone()[0])
                self._keep = space.slack_pages(self.max_bytes, page_size)
                self._reserve = self._wal_limit + space.SHM_BYTES + self._keep * page_size
                # FULL: a commit survives power loss. replay passes durable=False (a crash only).
                self._db.execute(f"PRAGMA synchronous={'FULL' if durable else 'NORMAL'}")
                self._db.execute("PRAGMA busy_timeout=5000")
                self._db.executescript(_SCHEMA)
                _migrate(self._db)
                space.convert(self._db, self.path)
                self._bytes: int = self._db.execute(
                    "SELECT COALESCE(SUM(size), 0) FROM outbox"
                ).fetchone()[0]
                self._pending_from_last_run()
            except sqlite3.Error:
                self._db.close()
                raise
        finally:
            os.umask(old_umask)

    # -- tracker state ------------------------------------------------------------------------

    def load(self, key: str) -> Any | None:
        with self._lock:
            row = self._db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else json.loads(row[0])

    def save(self, key: str, value: Any) -> None:
        with self._lock, self._tx():
            self._put(key, value)

    def claim(self, key: str, value: Any, rows: Iterable[OutboxRow] = ()) -> bool:
        """Store ``value`` under ``key`` unless the key exists; True if this call stored it. A
        durable at-most-once: whoever claims first (even before a kill -9) owns the key.
        ``rows`` are appended in the same transaction when (and only when) it does."""
        with self._lock, self._tx():
            cur = self._db.execute(
                "INSERT OR IGNORE INTO meta (key, value) VALUES (?, ?)",
                (key, json.dumps(value, separators=(",", ":"))),
            )
            if cur.rowcount == 1:
                self._append(rows)
            return cur.rowcount == 1

    def scan(self, prefix: str) -> dict[str, Any]:
        """Every key starting with ``prefix``, with its value."""
        with self._lock:
            rows = self._db.execute(
                "SELECT key, value FROM meta WHERE substr(key, 1, ?) = ?", (len(prefix), prefix)
            ).fetchall()
        return {k: json.loads(v) for k, v in rows}

    def forget(self, keys: Iterable[str]) -> None:
        with self._lock, self._tx():
            self._db.executemany("DELETE FROM meta WHERE key = ?", [(k,) for k in keys])

    def commit(
        self,
        state_key: str,
        state: Any,
        rows: Iterable[OutboxRow],
        meta: dict[str, Any] | None = None,
        forget: Iterable[str] = (),
    ) -> Dropped:
        """Persist ``state`` (and ``meta``'s keys, without ``forget``'s) and append ``rows``
        atomically. Returns what the spool bound dropped to make room (nothing almost always)."""
        with self._lock, self._tx():
            self._put(state_key, state)
            for key, value in (meta or {}).items():
                self._put(key, value)
            self._db.executemany("DELETE FROM meta WHERE key = ?", [(k,) for k in forget])
            return self._append(rows)

    # -- outbox -------------------------------------------------------------------------------

    def register_sinks(
        self, names: Iterable[str], tables: Mapping[str, Collection[str]] | None = None
    ) -> dict[str, int]:
        """Create cursors for new sinks (starting at what is still spooled) and forget sinks no
        longer configured, so they stop holding records back. ``tables``: which tables each sink
        takes (a dropped row of another table is no loss to it). Returns the forgotten sinks,
        each with how many spooled records it had not confirmed (its backlog, released)."""
        names = list(names)
        self._drops.tables = {
            n: frozenset(tables[n]) if tables and n in tables else None for n in names
        }
        with self._lock, self._tx():
            existing = dict(self._db.execute("SELECT sink, acked FROM cursors").fetchall())
            start = min(existing.values(), default=0)
            for name in names:
                if name not in existing:
                    self._db.execute(
                        "INSERT INTO cursors (sink, acked) VALUES (?, ?)", (name, start)
                    )
            gone = {
                n: self._db.execute(
                    "SELECT COUNT(*) FROM outbox WHERE seq > ?", (acked,)
                ).fetchone()[0]
                for n, acked in existing.items()
                if n not in names
            }
            for name in gone:
                self._db.execute("DELETE FROM cursors WHERE sink = ?", (name,))
                if self._drops.forget(name):
                    self._put(PENDING_KEY, self._drops.to_json())
            self._trim()
        return gone

    def fetch(
        self, sink: str, limit: int, after: int | None = None, *, to_send: bool | None = None
    ) -> list[OutboxRow]:
        """The next ``limit`` records after the sink's cursor (or after ``after``), in order.
        ``to_send`` (by default: when read from the cursor): the sink sends them now or right
        after the batch it is sending, so they are in its hands until it acknowledges past them
        (a row the spool bound drops meanwhile is lost only if the sink does not confirm it);
        else they are only looked at."""
        with self._lock:
            mine = after is None if to_send is None else to_send
            if after is None:
                after = self._cursor(sink)
            rows = self._db.execute(
                "SELECT tbl, pkey, payload, size, phase, event_type, seq FROM outbox "
                "WHERE seq > ? ORDER BY seq LIMIT ?",
                (after, limit),
            ).fetchall()
            if mine and rows:  # in the sink's hands until it acknowledges past them
                self._drops.fetched(sink, rows[-1][-1])
        return [OutboxRow(*row) for row in rows]

    def ack(self, sink: str, upto_seq: int, confirmed: Collection[int] = ()) -> int:
        """Everything up to ``upto_seq`` is done with by ``sink``: the rows ``confirmed``
        (their seqs: delivered or dead-lettered) and rows it skips. Returns how many rows the
        spool bound dropped while the sink was sending them are now known lost (counted:
        records in ``dropped``, heartbeat rows in ``dropped_heartbeats``)."""
        with self._lock, self._tx():
            self._db.execute(
                "UPDATE cursors SET acked = MAX(acked, ?) WHERE sink = ?", (upto_seq, sink)
            )
            lost = heartbeats = 0
            if self._drops.pending:
                before = len(self._drops.pending)
                lost, heartbeats = self._drops.acknowledged(sink, upto_seq, set(confirmed))
                if len(self._drops.pending) != before:
                    self._put(PENDING_KEY, self._drops.to_json())
                self._count(DROPPED, lost)
                self._count(DROPPED_HEARTBEATS, heartbeats)
            self._trim()
        return lost + heartbeats

    def depth(self, sink: str) -> int:
        """Records waiting for ``sink``."""
        return self.depths()[sink]

    def depths(self) -> dict[str, int]:
        """Records waiting, per sink. O(1): rows are only ever deleted from the head, so the
        outbox is always the unbroken range of seq numbers [min, max]. Read again only after a
        transaction (every change is one): an idle agent's status.json every few seconds then
        costs no query."""
        with self._lock:
            if self._depths is None or self._depths[0] != self._transactions:
                lo, hi = self._db.execute("SELECT MIN(seq), MAX(seq) FROM outbox").fetchone()
                cursors = self._db.execute("SELECT sink, acked FROM cursors").fetchall()
                self._depths = (
                    self._transactions,
                    {s: 0 if hi is None else hi - max(acked, lo - 1) for s, acked in cursors},
                )
            return dict(self._depths[1])

    @property
    def spooled_bytes(self) -> int:
        return self._bytes

    def count(self, name: str, n: int) -> None:
        """Add ``n`` to ``counter:<name>``, durably (a loss counted outside the outbox, such as
        dead-letter lines dropped, survives a kill -9 as the spool's own counters do)."""
        with self._lock, self._tx():
            self._count(name, n)

    def counter(self, name: str) -> int:
        value = self.load(f"counter:{name}")
        return int(value) if value is not None else 0

    def compact(self) -> space.Compaction:
        """Give free pages back to the file system, a few megabytes at a time, and truncate the
        write-ahead log (``space.compact``); raises ``sqlite3.Error`` on a full disk."""
        with self._lock:
            return space.compact(
                self._db,
                self.path.with_name(self.path.name + "-wal"),
                keep=self._keep,
                wal_bytes=self._wal_limit,
            )

    def damage(self) -> str | None:
        """What SQLite's ``quick_check`` finds wrong with the file (every page read: about a
        second for 300 MB), or None. A fault reading it (I/O, a lock) is not damage."""
        with self._lock:
            try:
                found = [r[0] for r in self._db.execute("PRAGMA quick_check(3)").fetchall()]
            except sqlite3.OperationalError:
                return None
            except sqlite3.DatabaseError as exc:
                return str(exc)
        return None if found == ["ok"] else "; ".join(found)

    def close(self, *, release: bool = True) -> None:
        with self._lock:
            self._db.close()  # the last connection: SQLite checkpoints and removes the log
        if release:  # kept by whoever moves the damaged files aside
            self._owner.release()

    # -- internals ----------------------------------------------------------------------------

    def _tx(self) -> _Transaction:
        return _Transaction(self)

    def _recount(self) -> None:
        self._bytes = self._db.execute("SELECT COALESCE(SUM(size), 0) FROM outbox").fetchone()[0]

    def _put(self, key: str, value: Any) -> None:
        self._db.execute(
            "INSERT INTO meta (key, value) VALUES (?, ?) "
            "ON CONFLICT(key) DO UPDATE SET value = excluded.value",
            (key, json.dumps(value, separators=(",", ":"))),
        )

    def _append(self, rows: Iterable[OutboxRow]) -> Dropped:
        """Append ``rows`` (inside a transaction); what the bound dropped to make room."""
        rows = list(rows)
        added = sum(r.size for r in rows)
        # Room is made before the rows go in: their pages reuse the dropped ones, so the
        # file does not grow by a commit's worth past the bound first.
        dropped = self._enforce_bound(added)
        self._db.executemany(
            "INSERT INTO outbox (tbl, pkey, payload, size, phase, event_type) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            [(r.table, r.partition_key, r.payload, r.size, r.phase, r.event_type) for r in rows],
        )
        self._bytes += added
        dropped += self._enforce_bound(0)  # a commit larger than the bound: its newest stay
        return dropped

    def _cursor(self, sink: str) -> int:
        row = self._db.execute("SELECT acked FROM cursors WHERE sink = ?", (sink,)).fetchone()
        if row is None:
            raise KeyError(f"sink {sink!r} is not registered")
        acked: int = row[0]
        return acked

    def _trim(self) -> None:
        """Delete what every sink has acknowledged."""
        row = self._db.execute("SELECT MIN(acked) FROM cursors").fetchone()
        if row[0] is None:
            return
        freed = self._db.execute(
            "SELECT COALESCE(SUM(size), 0) FROM outbox WHERE seq <= ?", (row[0],)
        ).fetchone()[0]
        if freed:
            self._db.execute("DELETE FROM outbox WHERE seq <= ?", (row[0],))
            self._bytes -= freed

    def _enforce_bound(self, incoming: int) -> Dropped:
        """Drop the oldest records until the spool fits with ``incoming`` more bytes; count in
        ``counter:dropped`` those lost (``drops.py``), remember those being sent."""
        over = self._bytes + incoming - self.max_bytes
        if self.max_bytes >= space.MIN_DISK_BOUND:  # every file: the pages in use, the log...
            disk = space.used_bytes(self._db) + incoming + self._reserve - self.max_bytes
            over = max(over, disk)  # a payload byte frees at least a byte of the file
        if over <= 0:
            return Dropped()
        cut = 0
        victims: list[tuple[int, str]] = []
        for seq, size, table in self._db.execute("SELECT seq, size, tbl FROM outbox ORDER BY seq"):
            if over <= 0:
                break
            over -= size
            self._bytes -= size
            victims.append((seq, table))
            cut = seq
        if not victims:
            return Dropped()
        self._db.execute("DELETE FROM outbox WHERE seq <= ?", (cut,))
        cursors = dict(self._db.execute("SELECT sink, acked FROM cursors").fetchall())
        dropped = self._drops.drop(victims, cursors)
        self._count(DROPPED, dropped.lost)
        self._count(DROPPED_HEARTBEATS, dropped.heartbeats)
        if dropped.sending:
            self._put(PENDING_KEY, self._drops.to_json())
        return dropped

    def _count(self, name: str, n: int) -> None:
        """Add ``n`` to ``counter:<name>`` (inside the caller's transaction)."""
        if n:
            row = self._db.execute(
                "SELECT value FROM meta WHERE key = ?", (f"counter:{name}",)
            ).fetchone()
            self._put(f"counter:{name}", (int(json.loads(row[0])) if row else 0) + n)

    def _pending_from_last_run(self) -> None:
        """Rows the bound dropped while a sink of the last run was sending them, with no answer
        recorded since (a kill -9): lost, as far as anyone can tell."""
        row = self._db.execute("SELECT value FROM meta WHERE key = ?", (PENDING_KEY,)).fetchone()
        if row is None:
            return
        records, heartbeats = pending_lost(json.loads(row[0]))
        with self._tx():
            self._count(DROPPED, records)
            self._count(DROPPED_HEARTBEATS, heartbeats)
            self._db.execute("DELETE FROM meta WHERE key = ?", (PENDING_KEY,))


class _Transaction:
    """BEGIN IMMEDIATE … COMMIT; on any failure (a full disk) roll back and recount the bytes."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def __enter__(self) -> None:
        self.store._transactions += 1
        self.store._db.execute("BEGIN IMMEDIATE")

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        db = self.store._db
        if exc_type is None:
            try:
                db.execute("COMMIT")
                return
            except sqlite3.Error:
                if db.in_transaction:
                    db.execute("ROLLBACK")
                self.store._recount()
                raise
        if db.in_transaction:
            db.execute("ROLLBACK")
        self.store._recount()


def _migrate(db: sqlite3.Connection) -> None:
    """Add the routing columns to an outbox written by an older agent (rows spooled before the
    upgrade carry NULL there; sinks fall back to the payload for them)."""
    have = {row[1] for row in db.execute("PRAGMA table_info(outbox)")}
    for column in ("phase", "event_type"):
        if column not in have:
            db.execute(f"ALTER TABLE outbox ADD COLUMN {column} TEXT")
