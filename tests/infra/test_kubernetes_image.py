"""deploy/kubernetes/image/build.sh without building (the build takes minutes: .ci/run builds it
and runs its entry point in a chroot as a step of its own, deploy/kubernetes/image/smoke.py).
What is checked here is what the build and the DaemonSet must agree on: the entry point is the
console script the venv gets, the DaemonSet's arguments are a command line ``run`` accepts, the
image's user is the DaemonSet's, the extras it installs exist and cover ``[kubernetes]``, and the
image stays lean (no docs, man pages, pip caches, pip itself)."""

from __future__ import annotations

import re
import shlex
import subprocess
import tomllib

import pytest
import yaml
from helpers import REPO

from se_forwarder.cli import build_parser

IMAGE = REPO / "deploy" / "kubernetes" / "image"
BUILD = (IMAGE / "build.sh").read_text()
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())


def pod_spec() -> dict:
    docs = yaml.safe_load_all((REPO / "deploy" / "kubernetes" / "daemonset.yaml").read_text())
    (ds,) = [d for d in docs if d and d["kind"] == "DaemonSet"]
    return ds["spec"]["template"]["spec"]


def setting(name: str) -> str:
    m = re.search(rf'^{name}="\$\{{[A-Z]+:-([^}}]+)\}}"|^{name}=(\S+)$', BUILD, re.M)
    assert m, f"{name}= in build.sh"
    return m.group(1) or m.group(2)


def test_the_script_is_valid_bash_and_refuses_to_run_unprivileged():
    subprocess.run(["bash", "-n", str(IMAGE / "build.sh")], check=True)
    assert 'if [ "$(id -u)" != 0 ]' in BUILD  # mmdebstrap's root mode, chroot, vfs storage


def test_the_entry_point_is_the_console_script_and_the_daemonsets_args_are_a_run_command():
    m = re.search(r"--entrypoint '\[\"([^\"]+)\"\]'", BUILD)
    assert m, "buildah config --entrypoint in build.sh"
    entry = m.group(1)
    assert entry == "/opt/se-forwarder/bin/se-forwarder"
    assert "python3 -m venv /opt/se-forwarder" in BUILD  # the venv whose bin/ has the script
    assert "se-forwarder" in PYPROJECT["project"]["scripts"]
    (container,) = pod_spec()["containers"]
    assert "command" not in container  # the image's entry point runs, with the DaemonSet's args
    args = build_parser().parse_args(container["args"])
    assert args.command == "run" and args.config == "/etc/se-forwarder/config.toml"
    mount = next(m for m in container["volumeMounts"] if m["name"] == "config")
    assert args.config.startswith(mount["mountPath"] + "/")
    cmd = re.search(r"--cmd '([^']+)'", BUILD)
    assert cmd and shlex.split(cmd.group(1)) == container["args"]  # `docker run image` alike


def test_the_image_user_is_the_daemonsets_non_root_user_and_owns_the_state():
    uid = int(setting("uid"))
    assert uid != 0
    assert '--user "$uid:$uid"' in BUILD
    pod = pod_spec()
    (container,) = pod["containers"]
    sc = container["securityContext"]
    assert sc["runAsUser"] == sc["runAsGroup"] == uid and sc["runAsNonRoot"] is True
    (init,) = pod["initContainers"]
    assert f"chown -R {uid}:{uid} /var/lib/se-forwarder" in init["command"][-1]
    assert set(init["securityContext"]["capabilities"]["add"]) <= {
        "CHOWN",
        "DAC_OVERRIDE",
        "FOWNER",
    }
    state = next(
        e["value"] for e in container["env"] if e["name"] == "SE_FORWARDER_AGENT__STATE_DIR"
    )
    assert {m["mountPath"] for m in init["volumeMounts"]} == {state}


def test_the_extras_exist_and_cover_the_node_agent():
    extras = setting("extras").split(",")
    optional = PYPROJECT["project"]["optional-dependencies"]
    assert set(extras) <= set(optional)
    assert "kubernetes" in extras and "azure" in extras  # lightkube; managed identity sinks
    assert not {"report", "collector", "dev"} & set(extras)  # never on a node


@pytest.mark.parametrize(
    "lean",
    [
        "--variant=minbase",
        "path-exclude=/usr/share/doc/*",
        "path-exclude=/usr/share/man/*",
        "--no-cache-dir",
        "pip uninstall --quiet --yes pip setuptools",
        '"$1/var/lib/apt/lists"/*',
        "STORAGE_DRIVER=vfs",
        "oci-archive:",
    ],
)
def test_the_image_is_lean_and_built_without_a_registry(lean):
    assert lean in BUILD
