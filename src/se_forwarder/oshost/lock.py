"""One agent per state directory: an exclusive lock on ``<state_dir>/agent.lock`` holding the
holder's PID. Two agents on one outbox would deliver every record twice and write conflicting
content under one RecordId.

The lock is the operating system's (``flock`` on Linux, ``msvcrt.locking`` on Windows): it goes
with the process, so a ``kill -9`` or a crash never leaves a stale lock behind.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from ..errors import StateError
from . import files

LOCK_NAME = "agent.lock"


class StateLock:
    def __init__(self, state_dir: Path) -> None:
        self.path = Path(state_dir) / LOCK_NAME
        self._fd: int | None = None

    def acquire(self) -> None:
        """Take the lock or raise ``StateError`` naming the holder's PID."""
        try:  # the service (and its hooks) may write the directory: never through a link
            files.state_dir(self.path.parent)
            fd = files.open_own(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as exc:
            raise StateError(
                f"cannot use the state directory {self.path.parent}: "
                f"{exc.filename}: {exc.strerror or exc}"
            ) from None
        try:
            _lock(fd)
        except OSError:
            holder = _read_pid(fd)
            os.close(fd)
            who = f"pid {holder}" if holder else "another process"
            raise StateError(
                f"another se-forwarder ({who}) is using the state directory {self.path.parent}"
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)  # closing the descriptor releases the lock


def _read_pid(fd: int) -> int | None:
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except (OSError, AttributeError):  # no pread on Windows
        return None
    return int(text) if text.isdigit() else None


if sys.platform == "win32":  # pragma: no cover - exercised on Windows
    import msvcrt

    def _lock(fd: int) -> None:
        msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
else:
    import fcntl

    def _lock(fd: int) -> None:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
