"""Runs a script of ``bench/`` in its ``--quick`` mode for the smoke tests of tests/bench, and
reads its table. The smoke tests are split over several modules so ``--dist loadfile`` spreads
them over the workers (most of a script's time is its processes waiting, not CPU)."""

from __future__ import annotations

import subprocess
import sys

from helpers import REPO

BENCH = REPO / "bench"
NUM = r"[0-9][0-9,]*(?:\.[0-9]+)?"


def run_bench(script: str, *args: str, timeout: float = 120) -> str:
    proc = subprocess.run(
        [sys.executable, str(BENCH / script), "--quick", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert proc.returncode == 0, f"{script} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def row(out: str, name: str) -> list[str]:
    for line in out.splitlines():
        if line.startswith(name):
            return line[len(name) :].split()
    raise AssertionError(f"no row {name!r} in:\n{out}")
