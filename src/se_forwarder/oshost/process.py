"""Child processes for hooks, the Linux and Windows ways: start one in its own process group (so
a timeout can end everything it started, not just the first process), end that group, find the
executable, give it a minimal environment.

Every function takes ``windows`` (default: this machine), so the Windows argv and environment are
built and tested on Linux too; only ``start`` and ``kill_group`` act on the running system.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # imported where a hook starts: an agent without hooks never loads subprocess
    import subprocess

ON_WINDOWS = sys.platform == "win32"
KILL_GRACE_SECONDS = 2.0  # SIGTERM first; SIGKILL for what is still there after this

# What a hook inherits from the agent's environment (nothing else: the agent's own variables may
# hold secrets, e.g. a webhook URL or a connection string given through the environment).
POSIX_ENV = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "HOME", "USER", "LOGNAME", "TMPDIR")
WINDOWS_ENV = (
    "PATH",
    "PATHEXT",
    "SYSTEMROOT",
    "SYSTEMDRIVE",
    "WINDIR",
    "COMSPEC",
    "TEMP",
    "TMP",
    "PROGRAMDATA",
    "PROGRAMFILES",
    "USERPROFILE",
    "USERNAME",
    "COMPUTERNAME",
)


def base_environment(
    environ: Mapping[str, str] | None = None, *, windows: bool = ON_WINDOWS
) -> dict[str, str]:
    """The agent's variables a hook may see (names compared case-insensitively on Windows)."""
    env = os.environ if environ is None else environ
    keep = WINDOWS_ENV if windows else POSIX_ENV
    if windows:
        wanted = {k.upper() for k in keep}
        return {k: v for k, v in env.items() if k.upper() in wanted}
    return {k: env[k] for k in keep if k in env}


def shell_argv(
    command: str, *, windows: bool = ON_WINDOWS, environ: Mapping[str, str] | None = None
) -> list[str]:
    """``command`` run by the system shell (only when a hook asks for one)."""
    if windows:
        env = os.environ if environ is None else environ
        comspec = next((v for k, v in env.items() if k.upper() == "COMSPEC"), "cmd.exe")
        return [comspec, "/d", "/s", "/c", command]
    return ["/bin/sh", "-c", command]


def executable_problem(
    program: str, *, path: str | None = None, windows: bool = ON_WINDOWS
) -> str | None:
    """Why ``program`` (a hook's first argv element) cannot be run, or None. A bare name is
    looked up on ``PATH`` as the agent will run it."""
    if not program:
        return "the command is empty"
    if (
        os.sep not in program
        and (os.altsep is None or os.altsep not in program)
        and not Path(program).is_absolute()
    ):
        if shutil.which(program, path=path) is None:
            return f"{program}: not found on PATH"
        return None
    p = Path(program)
    if not p.exists():
        return f"{program}: no such file"
    if p.is_dir():
        return f"{program}: is a directory"
    if not windows and not os.access(p, os.X_OK):
        return f"{program}: not executable (chmod +x, and readable by the agent's user)"
    return None


def start(
    argv: Sequence[str], env: Mapping[str, str], *, cwd: str | None = None
) -> subprocess.Popen[bytes]:
    """Start ``argv`` in a new process group (POSIX session; Windows process group), with stdin
    a pipe and stdout and stderr merged into one pipe."""
    import subprocess

    kwargs: dict[str, Any] = {}
    if ON_WINDOWS:
        kwargs["creationflags"] = subprocess.CREATE_NEW_PROCESS_GROUP  # type: ignore[attr-defined]
    else:
        kwargs["start_new_session"] = True  # its own session and group: killpg reaches all of it
    return subprocess.Popen(
        list(argv),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=dict(env),
        cwd=cwd,
        close_fds=True,
        **kwargs,
    )


def end_leftovers(
    proc: subprocess.Popen[bytes],
    settled: Callable[[float], object],
    grace: float = KILL_GRACE_SECONDS,
) -> bool:
    """After the leader of a hook's group exited (and was reaped): end what it left in its group.
    SIGTERM, then ``settled(grace)`` (the caller's wait for what it watches to end, at most
    ``grace`` seconds in real time: the reader of the group's output pipe, which the leftovers
    hold), then SIGKILL to whatever is still there. True if anything was left. (The group id
    stays reserved while any member lives, so no signal can reach a stranger.) Windows: nothing
    (a process group there is not a container; the timeout's ``taskkill /T`` needs the leader)."""
    if ON_WINDOWS:
        return False
    try:
        os.killpg(proc.pid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        settled(grace)
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass  # the group is gone
    return True


def kill_group(proc: subprocess.Popen[bytes], grace: float = KILL_GRACE_SECONDS) -> None:
    """End the process and everything it started: SIGTERM to the group, SIGKILL after ``grace``
    (Windows: ``taskkill /T /F``, which ends the whole tree at once)."""
    import subprocess

    if ON_WINDOWS:
        subprocess.run(
            ["taskkill", "/T", "/F", "/PID", str(proc.pid)], capture_output=True, check=False
        )
        return
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            return  # the group is gone
        if sig == signal.SIGTERM:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(grace)
