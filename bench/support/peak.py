"""Run a command and measure it from outside: wall time, peak RSS (the child's VmHWM, sampled,
and its ``ru_maxrss`` at exit), and the peak bytes of a scratch folder it writes its temporary
files to (its ``TMPDIR``); stop it when its RSS passes a limit, so a baseline that would exhaust
a shared machine is measured up to the limit instead."""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from .proc import peak_rss_kb


@dataclass(slots=True)
class Peak:
    seconds: float
    cpu_seconds: float  # user + system, all its threads (wall time on a busy machine says less)
    rss_mb: float  # peak resident set size of the child
    temp_bytes: int  # peak size of its scratch folder
    returncode: int
    killed: bool  # stopped at the RSS limit
    stdout: str
    stderr: str


def folder_bytes(folder: Path) -> int:
    total = 0
    for root, _dirs, files in os.walk(folder):
        for name in files:
            with contextlib.suppress(FileNotFoundError):  # removed while walking
                total += os.lstat(os.path.join(root, name)).st_size
    return total


def run(
    cmd: list[str],
    scratch: Path,
    *,
    env: dict[str, str] | None = None,
    limit_mb: float | None = None,
    every: float = 0.5,
) -> Peak:
    """``cmd`` with ``TMPDIR=scratch``; sampled every ``every`` seconds."""
    scratch.mkdir(parents=True, exist_ok=True)
    child_env = {**os.environ, **(env or {}), "TMPDIR": str(scratch)}
    out, err = scratch.parent / f"{scratch.name}.out", scratch.parent / f"{scratch.name}.err"
    t0 = time.perf_counter()
    with out.open("w") as fo, err.open("w") as fe:
        proc = subprocess.Popen(cmd, stdout=fo, stderr=fe, env=child_env)
        rss, temp, killed, cpu = 0.0, 0, False, 0.0
        while True:
            try:
                _pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            except ChildProcessError:
                break
            if _pid:
                rss = max(rss, usage.ru_maxrss / 1024)
                cpu = usage.ru_utime + usage.ru_stime
                proc.returncode = os.waitstatus_to_exitcode(status)
                break
            with contextlib.suppress(FileNotFoundError, ProcessLookupError, KeyError):
                rss = max(rss, peak_rss_kb(proc.pid) / 1024)
            temp = max(temp, folder_bytes(scratch))
            if limit_mb is not None and rss > limit_mb and not killed:
                proc.kill()
                killed = True
            time.sleep(every)
    seconds = time.perf_counter() - t0
    return Peak(seconds, cpu, rss, temp, proc.returncode, killed, out.read_text(), err.read_text())
