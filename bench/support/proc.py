"""CPU and memory of another process, read from /proc (Linux; no psutil).

``cpu_seconds``: utime + stime from ``/proc/<pid>/stat`` (clock ticks, usually 10 ms; includes
threads that already exited). ``cpu_ns``: the sum of ``sum_exec_runtime`` over the live threads in
``/proc/<pid>/task/*/schedstat`` (nanoseconds; used as the high-resolution figure, since a run of a
few hundred polls costs only a few hundred milliseconds of CPU). ``peak_rss_kb``: VmHWM.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    raw = Path(f"/proc/{pid}/stat").read_text()
    fields = raw[raw.rindex(")") + 2 :].split()  # the command name may hold spaces
    utime, stime = int(fields[11]), int(fields[12])  # fields 14 and 15 of proc(5)
    return (utime + stime) / TICK


def cpu_ns(pid: int) -> int:
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(FileNotFoundError, ProcessLookupError):  # a thread just ended
            total += int((task / "schedstat").read_text().split()[0])
    return total


def status_kb(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise KeyError(key)


def peak_rss_kb(pid: int) -> int:
    return status_kb(pid, "VmHWM")


def rss_kb(pid: int) -> int:
    return status_kb(pid, "VmRSS")


def threads(pid: int) -> int:
    return status_kb(pid, "Threads")
