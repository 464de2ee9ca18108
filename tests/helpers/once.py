"""Builds made once per test run and shared by every xdist worker (a wheel, a report, a
generated fleet): the first worker that needs one makes it under a lock in the run's shared
temporary directory, and the others take it from there. ``--dist loadfile`` hands a folder's
modules to different workers, so a build several modules need is not made once per worker."""

from __future__ import annotations

import fcntl
import os
import pickle
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest

T = TypeVar("T")


def shared_dir(factory: pytest.TempPathFactory) -> Path | None:
    """The run's directory every worker sees, or None without workers."""
    if "PYTEST_XDIST_WORKER" not in os.environ:
        return None
    shared = factory.getbasetemp().parent / "once"  # the run's, every worker's parent
    shared.mkdir(exist_ok=True)
    return shared


def once(factory: pytest.TempPathFactory, name: str, build: Callable[[Path], Path]) -> Path:
    """``build(directory)``, made once per test run (once per session without workers)."""
    shared = shared_dir(factory)
    if shared is None:
        return build(factory.mktemp(name))
    with open(shared / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file is closed
        done = shared / f"{name}.path"
        if done.exists():
            return Path(done.read_text())
        (shared / name).mkdir()
        made = build(shared / name)
        done.write_text(str(made))
        return made


def once_value(factory: pytest.TempPathFactory, name: str, build: Callable[[Path], T]) -> T:
    """``build(directory)``'s value (picklable), computed once per test run; each caller gets
    its own copy, so one module changing it does not change another's."""
    if shared_dir(factory) is None:
        return build(factory.mktemp(name))
    return pickle.loads(once(factory, name, lambda d: _pickled(d, build(d))).read_bytes())


def known_fleet(factory: pytest.TempPathFactory):
    """The known fleet (``FleetSpec()``: 52 VMs over 8 days, seconds to generate), generated once
    per test run for the fleet-view and the report tests; each caller gets its own copy."""
    from se_forwarder_testbed.fleet import FleetSpec, generate

    return once_value(factory, "known-fleet", lambda _: generate(FleetSpec()))


def _pickled(folder: Path, value: object) -> Path:
    path = folder / "value.pickle"
    path.write_bytes(pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL))
    return path
