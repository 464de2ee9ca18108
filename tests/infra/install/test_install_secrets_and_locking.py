"""A package URL's query string (a SAS token) never printed or logged; concurrent runs serialized
on a lock that never follows a symbolic link. Split from test_install.py;
what is real and what is not: conftest.py."""

from __future__ import annotations

import stat

import pytest
from helpers.install_runs import out
from helpers.installer import free_port

pytestmark = [pytest.mark.e2e, pytest.mark.external]


def test_package_url_query_string_is_never_printed_or_logged(inst, sim):
    """A --package URL may carry a SAS token: neither the output nor install.log may show it."""
    dead = f"http://127.0.0.1:{free_port()}"
    url = f"{dead}/se_forwarder-0.1.0-py3-none-any.whl?sv=2024&sig=TOPSECRETSIG"
    r = inst.install(
        "--package",
        url,
        "--extras",
        "none",
        "--stdout-sink",
        "--imds-endpoint",
        sim.url,
        PIP_RETRIES="0",
        PIP_TIMEOUT="3",
        timeout=180,
    )
    assert r.returncode == 11, out(r)
    assert "TOPSECRETSIG" not in r.stdout + r.stderr, out(r)
    assert f"{dead}/se_forwarder-0.1.0-py3-none-any.whl?***" in r.stdout + r.stderr, out(r)
    log = (inst.opt / "install.log").read_text()
    assert "TOPSECRETSIG" not in log and "?***" in log, log[-2000:]
    assert list((inst.opt / "versions").iterdir()) == [], "failed virtualenv left behind"


def test_concurrent_runs_are_serialized(inst):
    """A second install.sh waits for the lock (cloud-init retries, extension re-runs)."""
    import fcntl

    lock_dir = inst.prefix / "run/se-forwarder-install"
    r = inst.install("--uninstall", SE_FORWARDER_INSTALL_LOCK_WAIT="1", timeout=60)
    assert r.returncode == 0, out(r)
    assert stat.S_IMODE(lock_dir.stat().st_mode) == 0o700  # not /run/lock, nobody else writes
    assert not (inst.prefix / "run/lock").exists()
    with open(lock_dir / "lock") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # as a running install.sh holds it
        r = inst.install("--uninstall", SE_FORWARDER_INSTALL_LOCK_WAIT="1", timeout=60)
        assert r.returncode == 1 and "another install.sh is still running" in r.stderr, out(r)
    r = inst.install("--uninstall", SE_FORWARDER_INSTALL_LOCK_WAIT="1", timeout=60)
    assert r.returncode == 0, out(r)


def test_the_install_lock_never_follows_a_symbolic_link(inst, tmp_path):
    """A symlink where the lock goes (planted before the directory was made root-only) makes
    install.sh stop: the file it points at is neither created nor truncated."""
    victim = tmp_path / "victim"
    victim.write_text("precious")
    lock_dir = inst.prefix / "run/se-forwarder-install"
    lock_dir.mkdir(parents=True)
    (lock_dir / "lock").symlink_to(victim)
    r = inst.install("--uninstall", timeout=60)
    assert r.returncode == 1 and "is a symbolic link" in r.stderr, out(r)
    assert victim.read_text() == "precious"
    (lock_dir / "lock").unlink()
    lock_dir.rmdir()
    lock_dir.symlink_to(tmp_path)  # the directory itself
    r = inst.install("--uninstall", timeout=60)
    assert r.returncode == 1 and "symbolic link" in r.stderr, out(r)
    assert not (tmp_path / "lock").exists()


def test_wait_delivery_needs_a_number(inst):
    r = inst.install("--version", "0.1.0", "--stdout-sink", "--wait-delivery", "soon")
    assert r.returncode == 2 and "--wait-delivery must be a whole number" in r.stderr, out(r)
