"""Run one hook: its own process group, the event in its environment and the record on stdin,
its output logged line by line, a timeout that kills the whole group, its exit status recorded.
The group ends with the hook: what it left running in the background (``sleep 120 &``, holding
its output pipe) is ended as soon as the hook itself exits (POSIX; a process that made itself a
new session, ``setsid``, is out of reach: long-lived work belongs to a service, not a hook).

The wait for the process blocks in the kernel (no polling), so the approval that follows a hook
can leave as soon as the hook exits. The timeout is real time whatever the agent's clock: a hook
is a process of its own, and its timeout is the process wait's (``Popen.wait``); the agent's
clock only measures the run.
"""

from __future__ import annotations

import contextlib
import logging
import subprocess
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import IO

from .. import logs, redact
from ..clock import SYSTEM, Clock
from ..oshost import process
from .states import HookState

MAX_LOGGED_LINES = 200  # per run; more output is read and counted, not logged
MAX_LINE_BYTES = 4096  # a longer line is logged in pieces of this size
READER_GRACE_SECONDS = 1.0  # after exit, output still held open by a child it left behind


@dataclass(frozen=True, slots=True)
class HookRun:
    state: HookState
    exit_code: int | None
    seconds: float
    lines: int  # output lines read
    pid: int | None = None

    @property
    def ok(self) -> bool:
        return self.state == HookState.OK


class _Output:
    """Reads the merged stdout/stderr until EOF: logs the first lines, counts the rest."""

    def __init__(self, stream: IO[bytes], log: Callable[[str], None]) -> None:
        self.stream = stream
        self.log = log
        self.lines = 0
        self.thread = threading.Thread(target=self._pump, name="hook-output", daemon=True)
        self.thread.start()

    def _pump(self) -> None:
        carry = ""  # the end of a long line's piece, logged with the next piece
        try:
            while chunk := self.stream.readline(MAX_LINE_BYTES):
                self.lines += 1
                text = carry + chunk.decode("utf-8", "replace")
                carry = ""
                if not chunk.endswith(b"\n"):
                    text, carry = _uncut(text)
                    if not text:
                        continue
                if self.lines <= MAX_LOGGED_LINES:
                    self.log(text.rstrip("\r\n"))
            if carry and self.lines <= MAX_LOGGED_LINES:
                self.log(carry)
        except (OSError, ValueError):  # closed under us at stop
            pass


def _uncut(text: str) -> tuple[str, str]:
    """A piece of a long line split where no secret known by value (``redact.keep``) is cut:
    (what may be logged now, what goes with the next piece). The piece's last characters, as
    many as the longest secret's, wait for the next: a secret that starts before them ends in
    this piece, so masking sees it whole."""
    pattern, longest = redact.kept()
    if pattern is None:
        return text, ""
    cut = max(0, len(text) - longest)
    for m in pattern.finditer(text):
        if m.start() < cut < m.end():
            cut = m.start()
    return text[:cut], text[cut:]


def _feed(stream: IO[bytes], data: bytes) -> None:
    """Write the record to stdin and close it; a hook that never reads it is not an error."""
    try:
        stream.write(data)
    except (BrokenPipeError, OSError, ValueError):
        pass
    finally:
        with contextlib.suppress(OSError):
            stream.close()


class Running:
    """One hook process under way (the controller can stop it when the agent stops)."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen[bytes] | None = None
        self.reason: HookState | None = None  # why it was killed: timeout, stopped
        self._lock = threading.Lock()

    def kill(self, reason: HookState) -> None:
        with self._lock:
            if self.proc is None or self.reason is not None or self.proc.poll() is not None:
                return
            self.reason = reason
        process.kill_group(self.proc)


def run(
    argv: Sequence[str],
    env: Mapping[str, str],
    stdin: bytes,
    timeout: float,
    *,
    log: logging.Logger,
    fields: Mapping[str, object],
    running: Running | None = None,
    on_started: Callable[[int], None] | None = None,
    clock: Clock = SYSTEM,
) -> HookRun:
    """Run to the end (or the timeout); never raises for the hook's own failures."""
    running = running or Running()
    t0 = clock.monotonic()
    try:
        proc = process.start(argv, env)
    except (OSError, ValueError) as exc:  # ValueError: a NUL in argv or the environment
        error = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        logs.event(
            log,
            logging.ERROR,
            "hook could not start",
            **fields,
            error=f"{type(exc).__name__}: {error}",
        )
        return HookRun(HookState.ERROR, None, clock.monotonic() - t0, 0)
    running.proc = proc
    if on_started is not None:
        on_started(proc.pid)
    logs.event(log, logging.INFO, "hook started", **fields, pid=proc.pid, timeout=timeout)
    assert proc.stdout is not None and proc.stdin is not None
    out = _Output(
        proc.stdout, lambda line: logs.event(log, logging.INFO, "hook output", **fields, line=line)
    )
    threading.Thread(target=_feed, args=(proc.stdin, stdin), name="hook-stdin", daemon=True).start()
    try:
        code = proc.wait(timeout)
    except subprocess.TimeoutExpired:
        running.kill(HookState.TIMEOUT)
        code = proc.wait()
    # what it left in its group: SIGTERM, then SIGKILL once the output closes (or the grace ends)
    if running.reason is None and process.end_leftovers(proc, out.thread.join):
        logs.event(
            log,
            logging.WARNING,
            "hook left processes running in its process group; they were ended",
            **fields,
            pid=proc.pid,
        )
    seconds = clock.monotonic() - t0
    out.thread.join(READER_GRACE_SECONDS)
    state = running.reason or (HookState.OK if code == 0 else HookState.FAILED)
    result = HookRun(state, code, seconds, out.lines, proc.pid)
    _report(log, fields, result, timeout)
    return result


def _report(log: logging.Logger, fields: Mapping[str, object], r: HookRun, timeout: float) -> None:
    level = logging.INFO if r.ok else logging.ERROR
    msg = {
        HookState.OK: "hook succeeded",
        HookState.FAILED: "hook failed",
        HookState.TIMEOUT: f"hook timed out after {timeout:g} s; its process group was killed",
        HookState.STOPPED: "hook killed: the agent is stopping",
    }[r.state]
    extra = {"dropped_lines": r.lines - MAX_LOGGED_LINES} if r.lines > MAX_LOGGED_LINES else {}
    logs.event(
        log,
        level,
        msg,
        **fields,
        exit_code=r.exit_code,
        seconds=round(r.seconds, 3),
        lines=r.lines,
        **extra,
    )
