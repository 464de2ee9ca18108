"""Whole files replaced atomically, without trusting the directory they are written in.

A predictable temporary name and an ``open()`` that follows symlinks (as
``prometheus_client.write_to_textfile`` has) let a local user owning the directory have the agent
(root) overwrite any root-owned file. Here the temporary file is made by ``tempfile.mkstemp`` in the
same directory (``O_CREAT | O_EXCL``: never an existing name,
never through a symlink), given its mode, written and renamed over the target (a symlink at the
target's name is replaced, not followed). A directory that others than root and the agent could
write is refused outright (``private_dir``).
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import tempfile
from pathlib import Path


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


def private_dir(path: Path) -> None:
    """Raise ``PermissionError`` unless only root and this process's user can write ``path``
    (its owner is one of them and neither its group nor others may write it). POSIX only."""
    if os.name != "posix":
        return
    st = os.stat(path)
    if st.st_uid not in (0, os.geteuid()):
        raise PermissionError(
            errno.EPERM,
            f"directory owned by uid {st.st_uid}, not by root or "
            f"the agent's user (uid {os.geteuid()})",
            str(path),
        )
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise PermissionError(
            errno.EPERM,
            f"directory writable by its group or by others (mode {stat.S_IMODE(st.st_mode):04o})",
            str(path),
        )
