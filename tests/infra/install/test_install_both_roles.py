"""Both roles on one VM (the agent and the collector), upgraded through Azure: a Run Command or
the extension runs install.sh for the agent with the agent's own options only. The virtualenv both
units run from gets the union of the installed roles' extras, the download identity is an option
of its own (--client-id with --collector), and the upgrade checks the health of every role that
runs, rolling both back when one fails. What is real and what is not: conftest.py (the units run
under the systemctl stand-in; the collector has no hub here, so it never becomes healthy: the
upgrade that moves it must roll back)."""

from __future__ import annotations

import json
import os
import subprocess

import pytest
from helpers.install_runs import collector_toml, no_index, out

pytestmark = [pytest.mark.e2e, pytest.mark.external]


def test_an_agent_upgrade_keeps_the_collectors_extra_and_rolls_both_back(
    inst, sim, bundle, tmp_path
):
    records = inst.state / "records.jsonl"
    agent = ["--package", str(bundle), "--imds-endpoint", sim.url, "--file-sink", str(records)]
    r = inst.install(*agent, "--verify-timeout", "120", **no_index())
    assert r.returncode == 0, out(r)
    agent_venv = os.readlink(inst.opt / "current")

    # the collector beside it, downloading with its own identity (--client-id with --collector)
    collector_state = inst.prefix / "var/lib/se-forwarder-collector"
    given = tmp_path / "collector.toml"
    given.write_text(collector_toml(collector_state))
    r = inst.install(
        "--collector",
        "--client-id",
        "collector-client-id",
        "--package",
        str(bundle),
        "--config-file",
        str(given),
        "--skip-imds-check",
        "--no-systemd",
        **no_index(),
    )
    assert r.returncode == 0, out(r)
    assert "installing se-forwarder[azure,collector]" in r.stdout, out(r)
    assert (inst.opt / "extras.se-forwarder").read_text().strip() == "azure"
    assert (inst.opt / "extras.se-forwarder-collector").read_text().strip() == "azure,collector"
    both_venv = os.readlink(inst.opt / "current")
    assert both_venv != agent_venv
    started = subprocess.run(
        [str(inst.fake), "start", "se-forwarder-collector.service"],
        env=inst.env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert started.returncode == 0, started.stderr
    assert (
        subprocess.run(
            [str(inst.fake), "is-active", "se-forwarder-collector.service"],
            env=inst.env,
            check=False,
        ).returncode
        == 0
    )

    # the agent's upgrade as a Run Command runs it: its own values only, no --extras
    calls = inst.run_dir / "calls.log"
    before = calls.read_text().splitlines()
    r = inst.install(
        "--from-env",
        "--reinstall",
        "--imds-endpoint",
        sim.url,
        "--verify-timeout",
        "40",
        SE_INSTALL_PACKAGE=str(bundle),
        SE_INSTALL_FILE_SINK=str(records),
        **no_index(),
    )
    # the new virtualenv took both roles' extras, the agent came up on it, the collector did not
    assert "installing se-forwarder[azure,collector]" in r.stdout, out(r)
    assert "restarting se-forwarder-collector.service on the new version" in r.stdout, out(r)
    assert r.returncode == 13, out(r)
    assert "the collector (se-forwarder-collector.service) did not become healthy" in r.stderr
    assert "rolled both roles back" in r.stderr
    # both back on the virtualenv they ran before
    assert os.readlink(inst.opt / "current") == both_venv
    after = calls.read_text().splitlines()[len(before) :]
    restarts = [c for c in after if c.startswith("restart")]
    assert restarts == [
        "restart se-forwarder.service",
        "restart se-forwarder-collector.service",
        "restart se-forwarder.service",
        "restart se-forwarder-collector.service",
    ], after
    st = json.loads(inst.status("--json").stdout or "{}")
    assert st, "the agent reports again after the rollback"
