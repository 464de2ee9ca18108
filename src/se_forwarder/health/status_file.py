"""status.json, written every few seconds and at stop: in place, through a file kept open, while
the file system is fine; by a new file renamed over the old one when its size changes or when
the file system looks read-only or short of space, which is then what tells; on a full disk,
rewritten in place within the blocks it already has, so `status` still tells.

Why in place: a new file renamed over the old costs an idle agent more CPU than the snapshot
itself (ext4 allocates the new file's blocks and frees the old ones: ~0.2-0.3 ms of CPU per write
against ~1 us for ``pwrite``; bench/poll_cost). What the rename found out on an idle agent, that
the disk is full or read-only, ``statvfs`` tells first: the read-only flag, and the
space and inodes left; below ``LOW_SPACE_BYTES`` or ``LOW_INODES``, the write goes through a new
file again, and the file system's own error (ENOSPC, EROFS, EDQUOT) is the answer, as before.
Where ``pwrite``/``fstatvfs`` do not exist (Windows), every write is a new file renamed.

When the state directory cannot be written (full, or forced read-only), the snapshot says so
(``problem``, read by ``HealthView``: ``persist_error``, ``disk_full``) at once, and a second
copy on the runtime directory, which stays writable, carries it (``runtime_copy.py``)."""

from __future__ import annotations

import errno
import json
import logging
import os
import stat
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from .. import logs, redact
from ..oshost import files
from .snapshot import STATUS_FILE


class Reported(Protocol):
    """A snapshot status.json is written from (the agent's, the collector's)."""

    def to_json(self) -> dict[str, Any]: ...


STATUS_MODE = 0o600  # as every file of the state directory
STATUS_BLOCK = 4096  # status.json is padded to whole blocks: rewritable in place on a full disk
# Below this much space (or these many inodes) left to the agent, a write makes a new file: the
# file system's answer then says whether it is full (a commit needs far less than this).
LOW_SPACE_BYTES = 1024 * 1024
LOW_INODES = 64
IN_PLACE = hasattr(os, "pwrite") and hasattr(os, "fstatvfs")  # POSIX
_OPEN_FLAGS = os.O_RDWR | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


class StatusFile:
    def __init__(self, state_dir: Path, runtime_dir: Path | None = None) -> None:
        self.path = state_dir / STATUS_FILE
        self.copy = runtime_dir / STATUS_FILE if runtime_dir is not None else None
        self.problem: OSError | None = None  # why the state directory's copy cannot be written
        self._main = _Kept(self.path)
        self._copy = _Kept(self.copy, mkdir=True) if self.copy is not None else None
        self._copy_failing = False
        self._lock = threading.Lock()  # the collector writes from its status thread and at stop
        self.log = logs.get("agent")

    def write(self, take: Callable[[], Reported]) -> None:
        """``take()``'s snapshot to both copies; secrets masked inside every value. When the
        state directory's fails, the snapshot is taken again: it then says why."""
        with self._lock:
            data = _encode(take())
            problem = self._main.write(data, check_disk=True)
            if problem is not None:
                first = self.problem is None
                self.problem = problem
                data = _encode(take())
                if not self._main.overwrite(data) and first:
                    logs.event(
                        self.log,
                        logging.WARNING,
                        "cannot write status.json in the state directory",
                        error=str(problem),
                        runtime_copy=str(self.copy),
                    )
            elif self.problem is not None:
                self.problem = None
            if self._copy is not None:
                failed = self._copy.write(data)
                if failed is not None and not self._copy_failing:
                    logs.event(
                        self.log,
                        logging.WARNING,
                        "cannot write the runtime copy of status.json",
                        path=str(self.copy),
                        error=str(failed),
                    )
                self._copy_failing = failed is not None

    def close(self) -> None:
        """Let go of the files (after the last write; a later write opens them again)."""
        with self._lock:
            self._main.close()
            if self._copy is not None:
                self._copy.close()


class _Kept:
    """One copy of status.json and the descriptor it is rewritten through."""

    def __init__(self, path: Path, *, mkdir: bool = False) -> None:
        self.path = path
        self.mkdir = mkdir
        self.fd: int | None = None

    def write(self, data: bytes, *, check_disk: bool = False) -> OSError | None:
        """``data`` is the file now; else the error that kept it from being."""
        try:
            if self._rewritable(len(data)) and not (check_disk and self._doubtful()):
                os.pwrite(self.fd, data, 0)  # type: ignore[arg-type]  # _rewritable opened it
            else:
                self._replace(data)
        except OSError as exc:
            return exc
        return None

    def overwrite(self, data: bytes) -> bool:
        """``data`` written over the file within the blocks it has (a full disk)."""
        try:
            if self.fd is None:
                self.fd = _open(self.path)
            if os.fstat(self.fd).st_size < len(data):
                return False
            os.lseek(self.fd, 0, os.SEEK_SET)
            os.write(self.fd, data)
            os.ftruncate(self.fd, len(data))
            return True
        except OSError:
            return False

    def close(self) -> None:
        if self.fd is not None:
            fd, self.fd = self.fd, None
            os.close(fd)

    def _rewritable(self, size: int) -> bool:
        """The file kept open is still the one at ``path``, and ``size`` bytes long (a change of
        size goes through a new file: a reader never meets a half-grown one)."""
        if not IN_PLACE or self.fd is None:
            return False
        mine, there = os.fstat(self.fd), _lstat(self.path)
        return (
            there is not None
            and mine.st_size == size
            and mine.st_nlink > 0
            and (mine.st_ino, mine.st_dev) == (there.st_ino, there.st_dev)
        )

    def _doubtful(self) -> bool:
        """The file system says it is read-only, or is short of space or inodes for the agent's
        user (then a new file finds out for sure)."""
        st = os.fstatvfs(self.fd)  # type: ignore[arg-type]  # only once opened
        return (
            bool(st.f_flag & os.ST_RDONLY)
            or st.f_bavail * st.f_frsize < LOW_SPACE_BYTES
            or (st.f_files > 0 and st.f_favail < LOW_INODES)
        )

    def _replace(self, data: bytes) -> None:
        self.close()
        if self.mkdir:
            self.path.parent.mkdir(mode=0o750, parents=True, exist_ok=True)
        files.replace(self.path, data, STATUS_MODE)
        if IN_PLACE:
            try:
                self.fd = _open(self.path)
            except OSError:
                self.fd = None  # the next write makes a new file again


FULL_BYTES = 64 * 1024  # less than this left to the agent's user: a commit cannot be made


@dataclass(frozen=True, slots=True)
class FileSystem:
    """What the state directory's file system says of itself (``statvfs``, by path: what the
    agent's next file would meet, whether or not its open files still write)."""

    read_only: bool = False
    full: bool = False
    free_bytes: int | None = None

    @property
    def problem(self) -> str | None:
        if self.read_only:
            return "the state directory's file system is read-only"
        if self.full:
            return f"the state directory's file system is full ({self.free_bytes} bytes free)"
        return None


def filesystem(state_dir: Path) -> FileSystem:
    """The state directory's file system now: ``statvfs``, and a file made and removed at once
    (ext4 forced read-only after an I/O error keeps its ``statvfs`` flags: only a write tells;
    ``mkstemp``: never through a link). A probe the caller may not make (not the agent's user,
    not root) says nothing."""
    read_only = full = False
    free = None
    if hasattr(os, "statvfs"):
        try:
            st = os.statvfs(state_dir)
        except OSError:
            return FileSystem()
        free = st.f_bavail * st.f_frsize
        read_only = bool(st.f_flag & os.ST_RDONLY)
        full = free < FULL_BYTES or (st.f_files > 0 and st.f_favail == 0)
    if not read_only:
        try:
            fd, probe = tempfile.mkstemp(dir=state_dir, prefix=".probe.")
        except OSError as exc:
            read_only = exc.errno == errno.EROFS
            full = full or exc.errno in (errno.ENOSPC, errno.EDQUOT)
        else:
            os.close(fd)
            os.unlink(probe)
    return FileSystem(read_only, full, free)


def _open(path: Path) -> int:
    """The agent's own regular file at ``path`` (never through a symlink)."""
    fd = os.open(path, _OPEN_FLAGS)
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or (hasattr(os, "geteuid") and st.st_uid != os.geteuid()):
        os.close(fd)
        raise PermissionError(f"{path} is not the agent's own file")
    return fd


def _lstat(path: Path) -> os.stat_result | None:
    try:
        return os.lstat(path)
    except OSError:
        return None


def _encode(snap: Reported) -> bytes:
    text = json.dumps(redact.data(snap.to_json(), by_key=False), separators=(",", ":"))
    data = text.encode("utf-8")
    return data + b" " * (-len(data) % STATUS_BLOCK)  # whitespace after JSON is still JSON
