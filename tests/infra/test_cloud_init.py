"""infra/cloud-init/se-forwarder.yaml: valid #cloud-config (raw and rendered as the scale-set
example renders it with installWith=cloudInit, through shared.bicep's cloudInit()), embeds exactly
install.sh (gzip, from infra/cloud-init/install.sh.gz), and its runcmd passes every setting
through.

Needs `cloud-init` (Debian package `cloud-init`); the tests fail, not skip, without it.
"""

from __future__ import annotations

import base64
import gzip
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from bicep_eval import Evaluator
from helpers import REPO

pytestmark = pytest.mark.e2e

CLOUD_INIT = REPO / "infra" / "cloud-init" / "se-forwarder.yaml"
INSTALL_SH = REPO / "infra" / "scripts" / "install.sh"
INSTALL_GZ = REPO / "infra" / "cloud-init" / "install.sh.gz"
EXAMPLES = REPO / "infra" / "examples"
SHARED = REPO / "infra" / "modules" / "shared.bicep"
PLACEHOLDER = re.compile(r"__SE_[A-Z0-9_]+__")

SETTINGS = {
    "packageUri": "https://fleetpkgs.blob.core.windows.net/se/se_forwarder-0.1.0-py3-none-any.whl",
    "packageSha256": "ab" * 32,
    "lockUri": "https://fleetpkgs.blob.core.windows.net/se/se_forwarder-0.1.0.lock",
    "logsIngestionEndpoint": "https://dce-se-abcd.westeurope-1.ingest.monitor.azure.com",
    "dcrImmutableId": "dcr-00112233445566778899aabbccddeeff",
    "recordsStream": "Custom-MyRecords",
    "heartbeatsStream": "Custom-MyHeartbeats",
    "clientId": "",
}
PLACEHOLDERS = {
    "__SE_INSTALL_SH_GZ_B64__",
    "__SE_PACKAGE__",
    "__SE_PACKAGE_SHA256__",
    "__SE_LOCK__",
    "__SE_LOGS_ENDPOINT__",
    "__SE_DCR_ID__",
    "__SE_RECORDS_STREAM__",
    "__SE_HEARTBEATS_STREAM__",
    "__SE_CLIENT_ID__",
    "__SE_TAGS__",
    "__SE_POLICY_PRESET__",
    "__SE_POLICY_RULES__",
}
DEFAULT_FLEET = {"tags": [], "policyPreset": "observe", "policyRules": [], "webhookFormat": "json"}
FLEET = {
    "tags": ["service", "env"],
    "policyPreset": "microsoft",
    "policyRules": [{"name": "it's", "event_types": ["Freeze"], "approve": "at-once"}],
    "webhookFormat": "json",
}


def render(settings: dict = SETTINGS, fleet: dict = DEFAULT_FLEET) -> str:
    """The cloud-init text exactly as the Bicep templates compute it."""
    return Evaluator(SHARED).call(
        "cloudInit",
        CLOUD_INIT.read_text(),
        base64.b64encode(INSTALL_GZ.read_bytes()).decode(),
        settings,
        fleet,
    )


def schema(path: Path) -> subprocess.CompletedProcess:
    exe = shutil.which("cloud-init")
    assert exe, "cloud-init not found: apt-get install cloud-init"
    return subprocess.run(
        [exe, "schema", "--config-file", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def load_yaml(text: str):
    """Parse YAML with cloud-init's own interpreter (it ships PyYAML; the venv does not)."""
    exe = shutil.which("cloud-init")
    assert exe, "cloud-init not found: apt-get install cloud-init"
    interpreter = Path(exe).read_text(errors="replace").splitlines()[0][2:].split()[0]
    r = subprocess.run(
        [interpreter, "-c", "import sys, json, yaml; print(json.dumps(yaml.safe_load(sys.stdin)))"],
        input=text,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


@pytest.mark.external
def test_raw_file_is_valid_cloud_config():
    text = CLOUD_INIT.read_text()
    assert text.startswith("#cloud-config\n")
    r = schema(CLOUD_INIT)
    assert r.returncode == 0 and "Valid cloud-config" in r.stdout, r.stdout + r.stderr


@pytest.mark.external
def test_schema_check_rejects_a_broken_config(tmp_path):
    # control: the tool really validates (a wrong type under a known key is refused)
    bad = tmp_path / "bad.yaml"
    bad.write_text(CLOUD_INIT.read_text().replace("encoding: gz+b64", "encoding: rot13"))
    r = schema(bad)
    assert r.returncode != 0 and "rot13" in r.stdout + r.stderr


def test_placeholders_are_exactly_the_documented_ones():
    found = PLACEHOLDER.findall(CLOUD_INIT.read_text())
    assert sorted(found) == sorted(PLACEHOLDERS), (
        "each placeholder exactly once (comments included)"
    )


def test_compressed_installer_is_install_sh():
    """Bicep cannot compress: install.sh.gz is committed; after editing install.sh run
    `python3 infra/scripts/pack-installer.py`."""
    assert gzip.decompress(INSTALL_GZ.read_bytes()) == INSTALL_SH.read_bytes(), (
        "install.sh.gz is stale: run python3 infra/scripts/pack-installer.py"
    )


@pytest.mark.external
def test_rendered_file_is_valid_and_embeds_the_installer(tmp_path):
    rendered = tmp_path / "user-data.yaml"
    rendered.write_text(render())
    r = schema(rendered)
    assert r.returncode == 0, r.stdout + r.stderr
    doc = load_yaml(rendered.read_text())
    assert {"python3", "python3-venv"} <= set(doc["packages"])
    (wf,) = doc["write_files"]
    assert wf["encoding"] == "gz+b64"
    assert gzip.decompress(base64.b64decode(wf["content"])) == INSTALL_SH.read_bytes()
    assert PLACEHOLDER.search(rendered.read_text().split("\n", 1)[1].split("runcmd:")[1]) is None


def _runcmd_argv(doc) -> list[str]:
    (cmd,) = doc["runcmd"]
    return cmd[4:]


@pytest.mark.external
def test_runcmd_passes_every_setting_and_retries(tmp_path):
    """Run the rendered runcmd entry with the installer path pointing at a recording stub that
    is refused the download once (exit 11), then succeeds."""
    doc = load_yaml(render(dict(SETTINGS, heartbeatsStream="Custom-It's"), FLEET))
    (wf,) = doc["write_files"]
    (cmd,) = doc["runcmd"]
    assert isinstance(cmd, list) and cmd[3] == wf["path"]
    stub = tmp_path / "install.sh"
    calls = tmp_path / "calls"
    # fails on the first attempt, succeeds on the second
    stub.write_text(
        "#!/bin/sh\n"
        f'for a in "$@"; do printf "%s|" "$a"; done >> {calls}; echo >> {calls}\n'
        f"[ -e {tmp_path}/once ] && exit 0; touch {tmp_path}/once; exit 11\n"
    )
    stub.chmod(0o755)
    script = cmd[2].replace("sleep 90", "sleep 0")
    assert script != cmd[2]
    r = subprocess.run(
        [cmd[0], cmd[1], script, str(stub), *cmd[4:]],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert r.returncode == 0, r.stderr
    lines = calls.read_text().splitlines()
    assert len(lines) == 2 and "attempt 1 failed" in r.stderr
    expected = [
        "--package",
        SETTINGS["packageUri"],
        "--package-sha256",
        SETTINGS["packageSha256"],
        "--lock",
        SETTINGS["lockUri"],
        "--logs-endpoint",
        SETTINGS["logsIngestionEndpoint"],
        "--dcr-id",
        SETTINGS["dcrImmutableId"],
        "--records-stream",
        "Custom-MyRecords",
        "--heartbeats-stream",
        "Custom-It's",
        "--client-id",
        "",
        "--tags",
        "service,env",
        "--policy-preset",
        "microsoft",
        "--policy-rules",
        json.dumps(FLEET["policyRules"], separators=(",", ":")),
    ]
    assert lines[0].split("|")[:-1] == expected
    assert json.loads(expected[-1]) == FLEET["policyRules"]  # quotes survive YAML and the shell
    # a refused configuration (exit 2) is final: no retry
    stub.write_text(f"#!/bin/sh\necho x >> {tmp_path}/final\nexit 2\n")
    r = subprocess.run(
        [cmd[0], cmd[1], script, str(stub), *cmd[4:]],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert r.returncode == 2 and (tmp_path / "final").read_text() == "x\n"


@pytest.mark.external
@pytest.mark.parametrize(
    "settings",
    [
        SETTINGS,
        dict(
            SETTINGS,
            packageUri=SETTINGS["packageUri"].replace(".whl", "-bundle.tar.gz"),
            packageSha256="",
            lockUri="",
        ),
    ],
    ids=["wheel", "bundle-unpinned"],
)
def test_installer_accepts_the_rendered_arguments(settings):
    """The argument set cloud-init passes is one install.sh parses (stops at --help here), empty
    values included (no lock with a bundle, no pin)."""
    argv = _runcmd_argv(load_yaml(render(settings)))
    r = subprocess.run(
        ["bash", str(INSTALL_SH), *argv, "--help"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert r.returncode == 0 and "Usage: install.sh" in r.stdout, r.stderr


def test_examples_render_through_the_shared_function():
    """Only the scale set (installWith=cloudInit) carries the first-boot installer: a VM's
    customData can never change, so vm.bicep installs and upgrades with a Run Command."""
    users = [p for p in sorted(EXAMPLES.glob("*.bicep")) if "se-forwarder.yaml" in p.read_text()]
    assert {p.name for p in users} == {"scale-set.bicep"}
    text = users[0].read_text()
    assert "var cloudInitTemplate = loadTextContent('../cloud-init/se-forwarder.yaml')" in text
    assert "var installerGzBase64 = loadFileAsBase64('../cloud-init/install.sh.gz')" in text
    assert "cloudInit(cloudInitTemplate, installerGzBase64, settings, fleetChecked)" in text


def test_custom_data_fits_azure_limit():
    """Azure takes at most 64 KB of base64 customData."""
    rendered = render().encode()
    size = len(base64.b64encode(rendered))
    plain = len(base64.b64encode(INSTALL_SH.read_bytes()))
    print(f"customData: {size} bytes base64 (the installer alone, uncompressed: {plain})")
    assert size <= 65536
