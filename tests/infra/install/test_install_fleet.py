"""One place to configure a fleet, through the installer every path runs: tags, a policy and a
webhook given as options (or as the Run Command's environment, the webhook URL as its protected
parameter) become the VM's configuration, validated by the new version's check-config before
anything is written; a dry run that changes nothing (the refusals: test_install_refusals.py).
Installs from the offline bundle with no package index (what is real: conftest.py).
"""

from __future__ import annotations

import json
import subprocess
import tomllib

import pytest
from helpers.install_runs import no_index, out

pytestmark = [pytest.mark.e2e, pytest.mark.external]

SECRET = "https://hooks.example.test/services/T0/c2VjcmV0LWZsZWV0"
RULES = [
    {"name": "approve freezes", "event_types": ["Freeze"], "max_duration": 10, "approve": "at-once"}
]


def test_a_dry_run_validates_everything_and_changes_nothing(inst, sim, bundle, tmp_path):
    records = tmp_path / "records.jsonl"
    r = inst.install(
        "--dry-run",
        "--from-env",
        "--package",
        str(bundle),
        "--imds-endpoint",
        sim.url,
        "--file-sink",
        str(records),
        SE_INSTALL_TAGS="service,env",
        SE_INSTALL_POLICY_PRESET="microsoft",
        SE_INSTALL_POLICY_RULES=json.dumps(RULES),
        SE_INSTALL_WEBHOOK_URL=SECRET,
        **no_index(),
    )
    assert r.returncode == 0, out(r)
    assert "dry run: the configuration is valid" in r.stdout, out(r)
    shown = "\n".join(line[4:] for line in r.stdout.splitlines() if line.startswith("    "))
    doc = tomllib.loads(shown)
    assert doc["agent"]["tags"] == ["service", "env"]
    assert doc["policy"]["preset"] == "microsoft"
    assert doc["policy"]["rules"] == RULES
    assert doc["sinks"]["webhook"] == {"url_credential": "webhook-url", "format": "json"}
    assert "would store the credential(s) webhook-url" in r.stdout
    assert SECRET not in r.stdout + r.stderr and "c2VjcmV0LWZsZWV0" not in r.stdout + r.stderr
    # nothing under the prefix but the installers' lock
    assert not inst.opt.exists() and not inst.etc.exists(), out(r)
    assert not (inst.prefix / "etc/systemd").exists()


def test_fleet_settings_become_the_configuration_and_the_secret_a_credential(
    inst, sim, bundle, tmp_path
):
    """As a Run Command passes them: named parameters in the environment, the webhook URL a
    protected one; the URL is stored root-only, never in the configuration."""
    r = inst.install(
        "--from-env",
        "--no-systemd",
        "--package",
        str(bundle),
        "--imds-endpoint",
        sim.url,
        "--file-sink",
        str(tmp_path / "records.jsonl"),
        SE_INSTALL_TAGS="service",
        SE_INSTALL_POLICY_RULES=json.dumps(RULES),
        SE_INSTALL_WEBHOOK_URL=SECRET,
        SE_INSTALL_WEBHOOK_FORMAT="teams",
        **no_index(),
    )
    assert r.returncode == 0, out(r)
    text = inst.config.read_text()
    assert SECRET not in text
    doc = tomllib.loads(text)
    assert doc["agent"]["tags"] == ["service"] and doc["policy"]["rules"] == RULES
    assert "preset" not in doc["policy"]  # the default: observe
    assert doc["sinks"]["webhook"]["format"] == "teams"
    cred = inst.etc / "credentials" / "webhook-url"
    assert cred.read_text().strip() == SECRET and cred.stat().st_mode & 0o077 == 0
    # the webhook needs its extra: the default extras took it
    venv = (inst.opt / "current").resolve()
    assert (
        subprocess.run([str(venv / "bin/python"), "-c", "import httpx"], check=False).returncode
        == 0
    )
