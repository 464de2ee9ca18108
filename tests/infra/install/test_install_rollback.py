"""One installation, three runs: --wait-delivery with a sink that cannot deliver and with one that
can, then an upgrade that never becomes healthy, rolled back. Split from test_install.py;
what is real and what is not: conftest.py."""

from __future__ import annotations

import os

import pytest
from helpers.install_runs import out, wait_healthy
from helpers.installer import free_port

pytestmark = [pytest.mark.e2e, pytest.mark.external]


def test_wait_delivery_then_a_failed_upgrade_rolls_back(inst, sim, wheel, lock, tmp_path):
    """One installation, three runs: --wait-delivery with a sink that cannot deliver (exit 15,
    its warning, the install kept) and with one that can (the virtualenv reused); then an
    upgrade that never becomes healthy, rolled back to the version and config that were."""
    inst.prefix.mkdir(parents=True)
    (inst.prefix / "blocked").write_text("not a directory")
    r = inst.install(
        "--package",
        str(wheel),
        "--lock",
        str(lock),
        "--extras",
        "none",
        "--imds-endpoint",
        sim.url,
        "--file-sink",
        str(inst.prefix / "blocked" / "records.jsonl"),
        "--verify-timeout",
        "120",
        "--wait-delivery",
        "20",  # long enough for the agent's first attempt on a loaded machine (5 s was not)
    )
    assert r.returncode == 15, out(r)
    assert "not every sink delivered within 20s (delivered 0/1)" in r.stderr, out(r)
    assert "warning: sink file: cannot write" in r.stderr, out(r)
    assert (inst.opt / "current").is_symlink(), "the install itself stays in place"
    # a file sink delivers at once: the wait ends as soon as it has
    records = inst.state / "records.jsonl"
    r = inst.install(
        "--package",
        str(wheel),
        "--lock",
        str(lock),
        "--extras",
        "none",
        "--imds-endpoint",
        sim.url,
        "--file-sink",
        str(records),
        "--verify-timeout",
        "120",
        "--wait-delivery",
        "90",
    )
    assert r.returncode == 0, out(r)
    assert "every sink delivered (1/1)" in r.stdout and "reusing versions/" in r.stdout, out(r)
    good_target = os.readlink(inst.opt / "current")
    good_config = inst.config.read_text()

    # an "upgrade" whose config points the agent at an IMDS that never answers: the installer's
    # own IMDS check passes (the simulator), the agent never gets a good poll
    dead = f"http://127.0.0.1:{free_port()}"
    bad = tmp_path / "bad.toml"
    bad.write_text(
        f'[agent]\nstate_dir = "{inst.state}"\n\n[imds]\nendpoint = "{dead}"\n\n[sinks.stdout]\n'
    )
    r = inst.install(
        "--package",
        str(wheel),
        "--lock",
        str(lock),
        "--extras",
        "none",
        "--reinstall",
        "--config-file",
        str(bad),
        "--imds-endpoint",
        sim.url,
        "--verify-timeout",
        "3",
    )  # never healthy: any wait ends in a rollback
    assert r.returncode == 13, out(r)
    assert "rolling back" in r.stderr and "did not become healthy" in r.stderr
    assert os.readlink(inst.opt / "current") == good_target
    assert inst.config.read_text() == good_config
    assert len(list((inst.opt / "versions").iterdir())) == 1, "the failed version is removed"
    # the previous version runs again and becomes healthy
    doc = wait_healthy(inst)
    assert doc["status"]["pid"] == inst.agent_pid()
