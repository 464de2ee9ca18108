"""A wheel with its dependency lock: a wheel the lock does not pin, and a tampered or missing
dependency, refused (pip's hash-checking mode). Split from test_install.py;
what is real and what is not: conftest.py."""

from __future__ import annotations

import re

import pytest
from helpers.install_runs import out

pytestmark = [pytest.mark.e2e, pytest.mark.external]


def test_a_wheel_the_lock_does_not_pin_is_refused(inst, sim, wheel, lock, tmp_path):
    other = tmp_path / wheel.name
    other.write_bytes(wheel.read_bytes() + b"\0")  # same name, other bytes
    r = inst.install(
        "--package", str(other), "--lock", str(lock), "--stdout-sink", "--imds-endpoint", sim.url
    )
    assert r.returncode == 11 and "is not the one in the lock" in r.stderr, out(r)
    r = inst.install(
        "--package",
        str(wheel),
        "--package-sha256",
        "0" * 64,
        "--stdout-sink",
        "--imds-endpoint",
        sim.url,
    )
    assert r.returncode == 11 and "not the expected" in r.stderr, out(r)
    assert list((inst.opt / "versions").iterdir()) == []


@pytest.mark.parametrize("tamper", ["hash", "missing"])
def test_lock_refuses_a_tampered_or_missing_dependency(inst, sim, wheel, lock, tmp_path, tamper):
    lines = lock.read_text().splitlines()
    dep = next(i for i, line in enumerate(lines) if line.startswith("pydantic=="))
    if tamper == "hash":
        lines[dep] = re.sub(r"sha256:[0-9a-f]{64}", "sha256:" + "1" * 64, lines[dep])
    else:
        del lines[dep]
    bad = tmp_path / "bad.lock"
    bad.write_text("\n".join(lines) + "\n")
    r = inst.install(
        "--package",
        str(wheel),
        "--lock",
        str(bad),
        "--extras",
        "none",
        "--stdout-sink",
        "--imds-endpoint",
        sim.url,
        timeout=300,
    )
    assert r.returncode == 11, out(r)
    log = (inst.opt / "install.log").read_text()
    assert (
        "THESE PACKAGES DO NOT MATCH THE HASHES" in log
        if tamper == "hash"
        else "In --require-hashes mode" in log
    ), log[-1500:]
    assert list((inst.opt / "versions").iterdir()) == []
