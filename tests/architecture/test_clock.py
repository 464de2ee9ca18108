"""Time has one home: in the agent's package (``src/se_forwarder``; not ``report/``, which never
runs on a VM, nor the test bed) only ``se_forwarder/clock.py`` reads the system clock or waits
for time to pass. Everything else takes a ``Clock``, so the test bed's FakeClock can run it.

The rule, as checked here: outside clock.py, no call of ``time.time``/``time_ns``/``monotonic``/
``perf_counter``/``process_time`` (and their ``_ns`` forms), ``time.sleep``, ``time.gmtime()``/
``localtime()``/``ctime()``/``asctime()`` without a time, ``time.strftime`` without a time,
``datetime.now``/``utcnow``/``today``, ``date.today``; no ``from time import`` of those; no
``threading.Timer``; and no ``.wait(...)``/``.wait_for(...)`` with a timeout except the clock's
own (``clock.wait(event, timeout)``) and a child process's (``proc.wait(timeout)``: a hook is a
process of its own, bounded in real time).
Joining a thread is not waiting for time and is allowed."""

from __future__ import annotations

import ast

import pytest
from test_layout import rel, sources

READS = {
    "time",
    "time_ns",
    "monotonic",
    "monotonic_ns",
    "perf_counter",
    "perf_counter_ns",
    "process_time",
    "process_time_ns",
    "sleep",
}
NOW_WITHOUT_ARG = {"gmtime", "localtime", "ctime", "asctime"}
DATETIME_NOW = {"now", "utcnow", "today"}
CLOCK_MODULE = "se_forwarder.clock"


def _name(node: ast.AST) -> str:
    return ast.unparse(node)


def _allowed_waiter(owner: str) -> bool:
    """A Clock (``clock``, ``self.clock``, ``SYSTEM``) or a child process (``proc``)."""
    last = owner.split(".")[-1]
    return last in ("clock", "SYSTEM") or last.endswith("proc")


def _reads_the_clock(owner: str, attr: str, call: ast.Call) -> bool:
    nargs = len(call.args) + len(call.keywords)
    if owner == "time":
        return (
            attr in READS
            or (attr in NOW_WITHOUT_ARG and not nargs)
            or (attr == "strftime" and len(call.args) < 2)
        )
    if attr in DATETIME_NOW:
        return owner.split(".")[-1] in ("datetime", "date")
    if attr in ("wait", "wait_for"):
        return bool(nargs) and not _allowed_waiter(owner)
    return attr == "Timer"


def clock_reads(tree: ast.Module) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "time":
            bad = [a.name for a in node.names if a.name in READS | NOW_WITHOUT_ARG]
            if bad:
                found.append((node.lineno, f"from time import {', '.join(bad)}"))
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Attribute) and _reads_the_clock(_name(func.value), func.attr, node):
            suffix = "(<timeout>)" if func.attr in ("wait", "wait_for") else ""
            found.append((node.lineno, _name(func) + suffix))
        elif isinstance(func, ast.Name) and func.id in ("Timer", *READS) and func.id != "time":
            found.append((node.lineno, func.id))
    return found


def _agent_modules():
    for name, (path, tree) in sources().items():
        if (
            name.startswith("se_forwarder.")
            and not name.startswith("se_forwarder.report")
            and name != CLOCK_MODULE
        ):
            yield name, path, tree


def test_only_the_clock_module_reads_the_system_clock_or_waits_for_time():
    found = [
        f"{rel(path)}:{line}: {text}"
        for _, path, tree in _agent_modules()
        for line, text in clock_reads(tree)
    ]
    assert found == []


def test_the_clock_module_is_where_time_is_read():
    _path, tree = sources()[CLOCK_MODULE]
    assert {text for _, text in clock_reads(tree)} >= {
        "time.time_ns",
        "time.monotonic",
        "event.wait(<timeout>)",
    }


@pytest.mark.parametrize(
    "code",
    [
        "import time\nx = time.time()",
        "import time\nx = time.monotonic()",
        "import time\nt0 = time.perf_counter()",
        "import time\ntime.sleep(0.1)",
        "import time\nx = time.time_ns() // 1_000_000",
        "import time\ns = time.strftime('%Y', time.gmtime())",
        "import time\ns = time.strftime('%Y')",
        "from datetime import datetime\nx = datetime.now()",
        "import datetime\nx = datetime.datetime.utcnow()",
        "from time import monotonic",
        "self.stop.wait(5)",
        "stop_event.wait(timeout=delay)",
        "self._cond.wait(wait)",
        "import threading\nthreading.Timer(1.0, f).start()",
    ],
)
def test_the_clock_check_catches_what_it_is_for(code):
    assert clock_reads(ast.parse(code)) != []


@pytest.mark.parametrize(
    "code",
    [
        "import time\ns = time.strftime('%Y', time.gmtime(t))",
        "code = proc.wait(timeout)",
        "self.proc.wait(grace)",
        "lane.join(2.0)",
        "self.clock.wait(self.stop, 1.0)",
        "event.wait()",
    ],
)
def test_the_clock_check_lets_through_what_is_not_a_clock_read(code):
    assert clock_reads(ast.parse(code)) == []
