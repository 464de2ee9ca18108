"""infra/cloud-init/se-forwarder.yaml: valid #cloud-config (raw and rendered as the Bicep
examples render it), embeds exactly install.sh, and its runcmd passes the arguments through.

Needs `cloud-init` (Debian package `cloud-init`); the tests fail, not skip, without it.
"""

from __future__ import annotations

import base64
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from helpers import REPO

pytestmark = pytest.mark.e2e

CLOUD_INIT = REPO / "infra" / "cloud-init" / "se-forwarder.yaml"
INSTALL_SH = REPO / "infra" / "scripts" / "install.sh"
EXAMPLES = REPO / "infra" / "examples"
PLACEHOLDER = re.compile(r"__SE_[A-Z0-9_]+__")

VALUES = {
    "__SE_INSTALL_SH_B64__": base64.b64encode(INSTALL_SH.read_bytes()).decode(),
    "__SE_PACKAGE_OPTION__": "--version",
    "__SE_PACKAGE__": "0.1.0",
    "__SE_LOGS_ENDPOINT__": "https://dce-se-abcd.westeurope-1.ingest.monitor.azure.com",
    "__SE_DCR_ID__": "dcr-00112233445566778899aabbccddeeff",
    "__SE_CLIENT_ID__": "",
}


def schema(path: Path) -> subprocess.CompletedProcess:
    exe = shutil.which("cloud-init")
    assert exe, "cloud-init not found: apt-get install cloud-init"
    return subprocess.run([exe, "schema", "--config-file", str(path)], capture_output=True,
                          text=True, timeout=120, check=False)


def load_yaml(text: str):
    """Parse YAML with cloud-init's own interpreter (it ships PyYAML; the venv does not)."""
    exe = shutil.which("cloud-init")
    assert exe, "cloud-init not found: apt-get install cloud-init"
    interpreter = Path(exe).read_text(errors="replace").splitlines()[0][2:].split()[0]
    r = subprocess.run([interpreter, "-c",
                        "import sys, json, yaml; print(json.dumps(yaml.safe_load(sys.stdin)))"],
                       input=text, capture_output=True, text=True, timeout=60, check=False)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def render(text: str, values: dict[str, str]) -> str:
    for k, v in values.items():
        text = text.replace(k, v)
    return text


def test_raw_file_is_valid_cloud_config():
    text = CLOUD_INIT.read_text()
    assert text.startswith("#cloud-config\n")
    r = schema(CLOUD_INIT)
    assert r.returncode == 0 and "Valid cloud-config" in r.stdout, r.stdout + r.stderr


def test_schema_check_rejects_a_broken_config(tmp_path):
    # control: the tool really validates (a wrong type under a known key is refused)
    bad = tmp_path / "bad.yaml"
    bad.write_text(CLOUD_INIT.read_text().replace("encoding: b64", "encoding: rot13"))
    r = schema(bad)
    assert r.returncode != 0 and "rot13" in r.stdout + r.stderr


def test_placeholders_are_exactly_the_documented_ones():
    found = PLACEHOLDER.findall(CLOUD_INIT.read_text())
    assert sorted(found) == sorted(VALUES), "each placeholder exactly once (comments included)"


def test_rendered_file_is_valid_and_embeds_the_installer(tmp_path):
    rendered = tmp_path / "user-data.yaml"
    rendered.write_text(render(CLOUD_INIT.read_text(), VALUES))
    r = schema(rendered)
    assert r.returncode == 0, r.stdout + r.stderr
    doc = load_yaml(rendered.read_text())
    assert {"python3", "python3-venv"} <= set(doc["packages"])
    (wf,) = doc["write_files"]
    assert wf["encoding"] == "b64"
    assert base64.b64decode(wf["content"]) == INSTALL_SH.read_bytes()
    assert PLACEHOLDER.search(rendered.read_text().split("\n", 1)[1].split("runcmd:")[1]) is None


def test_runcmd_passes_arguments_and_retries(tmp_path):
    """Run the rendered runcmd entry with the installer path pointing at a recording stub."""
    doc = load_yaml(render(CLOUD_INIT.read_text(), VALUES))
    (wf,) = doc["write_files"]
    (cmd,) = doc["runcmd"]
    assert isinstance(cmd, list) and cmd[3] == wf["path"]
    stub = tmp_path / "install.sh"
    calls = tmp_path / "calls"
    # fails on the first attempt, succeeds on the second
    stub.write_text(
        "#!/bin/sh\n"
        f'for a in "$@"; do printf "%s|" "$a"; done >> {calls}; echo >> {calls}\n'
        f'[ -e {tmp_path}/once ] && exit 0; touch {tmp_path}/once; exit 1\n'
    )
    stub.chmod(0o755)
    script = cmd[2].replace("sleep 30", "sleep 0")
    r = subprocess.run([cmd[0], cmd[1], script, str(stub), *cmd[4:]], capture_output=True,
                       text=True, timeout=60, check=False)
    assert r.returncode == 0, r.stderr
    lines = calls.read_text().splitlines()
    assert len(lines) == 2 and "attempt 1 failed" in r.stderr
    expected = ["--version", "0.1.0", "--logs-endpoint", VALUES["__SE_LOGS_ENDPOINT__"],
                "--dcr-id", VALUES["__SE_DCR_ID__"], "--client-id", ""]
    assert lines[0].split("|")[:-1] == expected


def test_installer_accepts_the_rendered_arguments():
    """The argument set cloud-init passes is one install.sh parses (stops at --help here)."""
    r = subprocess.run(["bash", str(INSTALL_SH), "--version", "0.1.0", "--logs-endpoint",
                        VALUES["__SE_LOGS_ENDPOINT__"], "--dcr-id", VALUES["__SE_DCR_ID__"],
                        "--client-id", "", "--help"], capture_output=True, text=True, timeout=30, check=False)
    assert r.returncode == 0 and "Usage: install.sh" in r.stdout, r.stderr


def test_examples_fill_every_placeholder():
    users = [p for p in sorted(EXAMPLES.glob("*.bicep")) if "se-forwarder.yaml" in p.read_text()]
    assert users, "no example under infra/examples uses the cloud-init file"
    for bicep in users:
        text = bicep.read_text()
        for name in VALUES:
            assert f"'{name}'" in text, f"{bicep.name} does not replace {name}"
        assert "loadFileAsBase64('../scripts/install.sh')" in text
        assert "loadTextContent('../cloud-init/se-forwarder.yaml')" in text


def test_custom_data_fits_azure_limit():
    """Azure takes at most 64 KB of base64 customData; install.sh travels inside it twice-encoded."""
    rendered = render(CLOUD_INIT.read_text(), VALUES).encode()
    size = len(base64.b64encode(rendered))
    print(f"customData: {size} bytes base64")
    assert size <= 65536
