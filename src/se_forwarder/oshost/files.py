"""Files made in directories another user may write, without following the links planted there.

The state directory belongs to the sandboxed service (and every hook it runs can write it), yet
root runs commands in it (``status --ack-dead-letters``), and the agent may run as root (Windows,
a root unit). So no file is created or written there by a path that could follow a link:

- a file appended to or locked (``agent.lock``, ``dead-letter.jsonl``, the file sink's output) is
  opened with ``O_NOFOLLOW`` and must then be a regular file with one name (``open_own``): a
  symbolic link at its name fails the open, a hard link to another file is refused;
- a file replaced whole (``status.json``, ``dead-letter.ack``, the metrics textfile) is written to
  a temporary file ``tempfile.mkstemp`` made in the same directory (``O_CREAT | O_EXCL``: never an
  existing name, never through a link) and renamed over the target (a link at the target's name
  is replaced, not followed): ``replace``, ``copy_new``;
- a directory a file is written into where only root and the agent should write (the metrics
  textfile's) is checked whole: every ancestor, links included, owned by root or the agent and
  writable by nobody else (``private_dir``);
- a state directory others may write is refused outright (``state_dir``).
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import stat
import tempfile
from pathlib import Path

NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)  # POSIX; Windows has no symbolic links to plant here
CLOEXEC = getattr(os, "O_CLOEXEC", 0)
APPEND = os.O_WRONLY | os.O_APPEND | os.O_CREAT
_MAX_LINKS = 40  # links followed while checking a directory, as the kernel's ELOOP bound


def open_own(path: Path, flags: int, mode: int) -> int:
    """``os.open`` without following a link at ``path``'s name: a descriptor of a regular file
    with no other name, or ``OSError`` saying why not."""
    try:
        fd = os.open(path, flags | NOFOLLOW | CLOEXEC, mode)
    except OSError as exc:
        if exc.errno == errno.ELOOP or (exc.errno == errno.EMLINK and NOFOLLOW):
            raise OSError(
                errno.ELOOP, "a symbolic link: not followed, not written", str(path)
            ) from None
        raise
    st = os.fstat(fd)
    problem = (
        "not a regular file"
        if not stat.S_ISREG(st.st_mode)
        else "a file with another name (a hard link): not written"
        if st.st_nlink > 1
        else None
    )
    if problem:
        os.close(fd)
        raise OSError(errno.EPERM, problem, str(path))
    return fd


def replace(path: Path, data: bytes, mode: int) -> None:
    """``path`` now holds ``data`` (and ``mode``), or, if this raises ``OSError``, is unchanged."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            if hasattr(os, "fchmod"):  # POSIX; Windows files have no such mode
                os.fchmod(f.fileno(), mode)
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):  # a read-only file system: nothing was made
            os.unlink(tmp)
        raise


def copy_new(src: Path, dst: Path, mode: int = 0o600) -> None:
    """``src`` copied to ``dst``, a name that must not exist yet (never through a link)."""
    with open(src, "rb") as f:
        fd = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL | NOFOLLOW | CLOEXEC, mode)
        with os.fdopen(fd, "wb") as out:
            shutil.copyfileobj(f, out)


def state_dir(path: Path) -> None:
    """Create the state directory (0700) if missing; raise ``PermissionError`` (one line) when
    others may write it: anyone could then plant names the agent and root would write through,
    or swap its database."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    if os.name != "posix":
        return
    st = os.stat(path)
    if not stat.S_ISDIR(st.st_mode):
        raise NotADirectoryError(errno.ENOTDIR, "not a directory", str(path))
    if st.st_mode & stat.S_IWOTH:
        raise PermissionError(
            errno.EPERM,
            f"state directory writable by others (mode {stat.S_IMODE(st.st_mode):04o}); "
            "refused: make it the service's alone (chmod 0700)",
            str(path),
        )


def private_dir(path: Path, *, create: bool = False) -> None:
    """Raise ``PermissionError`` unless only root and this process's user could change what
    ``path`` names: every directory from ``/`` down to it, and every link on the way (and the
    directories its target lies in), owned by one of them; none writable by its group or others
    (an ancestor may be a sticky one such as ``/tmp``: its entries are their owners' alone), and
    ``path`` itself by nobody else at all. ``create``: made (0755) after its existing ancestors
    passed, so ``mkdir`` never goes through a planted link. POSIX only."""
    if os.name != "posix":
        if create:
            path.mkdir(parents=True, exist_ok=True)
        return
    path = Path(os.path.abspath(path))
    if create and not path.exists():
        existing = next(p for p in path.parents if p.exists())
        _check_chain(existing, final=False, hops=0)
        path.mkdir(mode=0o755, parents=True, exist_ok=True)
    _check_chain(path, final=True, hops=0)


def _check_chain(path: Path, *, final: bool, hops: int) -> Path:
    """Check each component of ``path`` (absolute), following links by hand; the real path."""
    current = Path(path.anchor)
    _check_entry(current, os.lstat(current), last=final and current == path)
    parts = path.parts[1:]
    for i, part in enumerate(parts):
        entry = current / part
        st = os.lstat(entry)
        last = final and i == len(parts) - 1
        _owned(entry, st)
        if stat.S_ISLNK(st.st_mode):
            hops += 1
            if hops > _MAX_LINKS:
                raise OSError(errno.ELOOP, "too many levels of symbolic links", str(path))
            target = Path(os.path.normpath(current / os.readlink(entry)))
            current = _check_chain(target, final=last, hops=hops)
            continue
        _check_entry(entry, st, last=last)
        current = entry
    return current


def _owned(path: Path, st: os.stat_result) -> None:
    if st.st_uid not in (0, os.geteuid()):
        raise PermissionError(
            errno.EPERM,
            f"owned by uid {st.st_uid}, not by root or the agent's user (uid {os.geteuid()})",
            str(path),
        )


def _check_entry(path: Path, st: os.stat_result, *, last: bool) -> None:
    _owned(path, st)
    if not stat.S_ISDIR(st.st_mode):
        if last:
            raise NotADirectoryError(errno.ENOTDIR, "not a directory", str(path))
        return
    writable = st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
    if writable and (last or not st.st_mode & stat.S_ISVTX):
        raise PermissionError(
            errno.EPERM,
            f"directory writable by its group or by others (mode {stat.S_IMODE(st.st_mode):04o})",
            str(path),
        )
