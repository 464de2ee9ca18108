#!/usr/bin/env python3
"""The image's entry point, run as the DaemonSet runs it, in a chroot of the image's root file
system (containers cannot run here), against the test bed's IMDS simulator and Kubernetes API
stand-in on loopback: one Reboot drained within a PodDisruptionBudget, approved early, recorded
and uncordoned by the agent inside the chroot.

    sudo bash deploy/kubernetes/image/build.sh build/image
    sudo .venv/bin/python deploy/kubernetes/image/smoke.py build/image

Everything the chroot's process is given is what a pod gets: the entry point and the user read
from the OCI image's own configuration (not from this file), the DaemonSet's arguments and
environment (deploy/kubernetes/daemonset.yaml: the node's name, the state directory), the
ConfigMap's config.toml with one drain rule added, the service account's ``token``, ``ca.crt``
and ``namespace`` in ``/var/run/secrets/kubernetes.io/serviceaccount`` and
``KUBERNETES_SERVICE_HOST``/``_PORT``. Exit status 0 when every step was recorded and the
stand-in saw the drain done within the budget; 1 with the reason otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import yaml

from se_forwarder_testbed.simulator.scenario import Scenario
from se_forwarder_testbed.simulator.server import Simulator
from se_forwarder_testbed.standins.kubernetes import KubernetesApi

DEPLOY = Path(__file__).resolve().parent.parent
NODE = "aks-nodepool1-0"
OTHER = "aks-nodepool1-1"
SA_DIR = "run/secrets/kubernetes.io/serviceaccount"  # /var/run is a link to /run
STEPS = ["FirstSeen", "NodeCordoned", "NodeDrained", "Approved", "Started", "Removed"]
RULE = """
[[kubernetes.drain]]
name = "reboots (smoke)"
event_types = ["Reboot"]
action = "drain"
approve_when_drained = true
"""


def inside(rootfs: Path, relative: str) -> Path:
    """``rootfs/relative``, refused if any part of it is a link: the root file system's absolute
    links (``/var/run -> /run``) point at this machine's own files outside the chroot."""
    path = rootfs
    for part in Path(relative).parts:
        path = path / part
        if path.is_symlink():
            raise SystemExit(f"smoke.py: {path} is a link; refusing to write through it")
    return path


def image_config(archive: Path) -> dict[str, Any]:
    """The ``config`` of the one image in an ``oci-archive`` (index -> manifest -> config)."""
    with tarfile.open(archive) as tar:

        def blob(digest: str) -> Any:
            algo, hexa = digest.split(":", 1)
            f = tar.extractfile(f"blobs/{algo}/{hexa}")
            assert f is not None
            return json.load(f)

        f = tar.extractfile("index.json")
        assert f is not None
        (manifest,) = json.load(f)["manifests"]
        config: dict[str, Any] = blob(blob(manifest["digest"])["config"]["digest"])["config"]
        return config


def daemonset_container() -> dict[str, Any]:
    docs = yaml.safe_load_all((DEPLOY / "daemonset.yaml").read_text())
    (ds,) = [d for d in docs if d and d["kind"] == "DaemonSet"]
    (container,) = ds["spec"]["template"]["spec"]["containers"]
    return dict(container)


def cluster(api: KubernetesApi) -> None:
    """Two nodes of nodepool1; web-1 and web-2 on ours, web-3 on the other, under a budget of
    minAvailable 2 (the second eviction waits for web-1's replacement); a DaemonSet's pod."""
    c = api.cluster
    for name in (NODE, OTHER):
        c.add_node(name, labels={"kubernetes.azure.com/cluster": "MC_rg_aks1_westeurope"})
    for name, where in (("web-1", NODE), ("web-2", NODE), ("web-3", OTHER)):
        c.add_pod(name, where, labels={"app": "web"}, owner=("ReplicaSet", "web-7d4"))
    c.add_pod("kube-proxy-x1", NODE, namespace="kube-system", owner=("DaemonSet", "kube-proxy"))
    c.add_pdb("web", {"app": "web"}, minAvailable=2)


def scenario() -> Scenario:
    return Scenario.model_validate(
        {
            "name": "image-smoke",
            "vm": {"name": "aks-nodepool1-0-vmss_0"},
            "events": [
                {
                    "type": "Reboot",
                    "resources": ["$vm"],
                    "source": "Platform",
                    "appear": 2.0,
                    "not_before": 300.0,
                    "approval_delay": 2.0,
                    "remove_after_start": 4.0,
                }
            ],
        }
    )


def run(out: Path, timeout: float) -> list[str]:
    """The problems seen (empty: passed)."""
    rootfs = out / "rootfs"
    (archive,) = sorted(out.glob("se-forwarder-*.oci.tar"))
    cfg = image_config(archive)
    user = cfg.get("User", "")
    entry = list(cfg["Entrypoint"])
    container = daemonset_container()
    args = list(container["args"])
    problems: list[str] = []
    if not user or user.split(":")[0] in ("0", "root"):
        problems.append(f"the image's user is {user!r}, not a non-root user")
    with tempfile.TemporaryDirectory(prefix="se-image-smoke-") as tmp:
        api = KubernetesApi(Path(tmp) / "kube").start()
        sim = Simulator(scenario(), speed=1.0, first_call_delay=0.0, rate_limit=None).start()
        cluster(api)
        # what the kubelet mounts: the service account, the ConfigMap, the hostPath
        sa = inside(rootfs, SA_DIR)
        shutil.rmtree(inside(rootfs, "run/secrets"), ignore_errors=True)
        sa.mkdir(parents=True)
        for name in ("token", "ca.crt", "namespace"):
            shutil.copy(api.service_account_dir / name, sa / name)
        conf = inside(rootfs, "etc/se-forwarder/config.toml")
        conf.write_text((DEPLOY / "config.toml").read_text() + RULE)
        state = inside(rootfs, "var/lib/se-forwarder")
        for child in state.iterdir():
            shutil.rmtree(child) if child.is_dir() else child.unlink()
        env = {
            "PATH": "/opt/se-forwarder/bin:/usr/bin:/bin",
            "KUBERNETES_SERVICE_HOST": "127.0.0.1",
            "KUBERNETES_SERVICE_PORT": str(api.port),
            "SE_FORWARDER_IMDS__ENDPOINT": sim.url,  # the simulator stands for 169.254.169.254
        }
        for var in container["env"]:
            env[var["name"]] = var.get("value") or NODE  # fieldRef spec.nodeName: the node
        for e in cfg.get("Env", []):
            k, _, v = e.partition("=")
            env.setdefault(k, v)
        chroot = shutil.which("chroot") or "/usr/sbin/chroot"
        cmd = [chroot, f"--userspec={user}", str(rootfs), *entry, *args]
        print("$", " ".join(cmd), flush=True)
        # what a container runtime mounts: /proc (the agent reads the boot id there)
        subprocess.run(["mount", "-t", "proc", "proc", str(rootfs / "proc")], check=True)
        try:
            proc = subprocess.Popen(
                cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd="/"
            )
            records, logs, code, c = _watch(proc, api, timeout)
        finally:
            subprocess.run(["umount", "-l", str(rootfs / "proc")], check=False)
            sim.stop()
            api.stop()
        phases = [r["Phase"] for r in records if r.get("EventId") == sim.event_id(0)]
        print("records:", " ".join(phases))
        print("kubernetes events:", " ".join(c.event_reasons(NODE)))
        print("evictions:", " ".join(f"{p}={code}" for _, p, code in c.evictions))
        if code != 0:
            problems.append(f"the entry point exited with status {code}")
        missing = [s for s in [*STEPS, "NodeUncordoned"] if s not in phases]
        if missing:
            problems.append(f"steps never recorded: {missing}")
        if [s for s in phases if s in STEPS] != STEPS:
            problems.append(f"steps out of order: {phases}")
        if ("web-2", 429) not in [(p, code) for _, p, code in c.evictions]:
            problems.append("the budget never held an eviction back")
        if {p for _, p, code in c.evictions if code == 201} != {"web-1", "web-2"}:
            problems.append("not exactly web-1 and web-2 evicted")
        node = c.get_node(NODE)
        if node["spec"].get("unschedulable"):
            problems.append("the node was left cordoned")
        for r in records:
            if r.get("EventId") and r.get("NodeName") != NODE:
                problems.append(f"a record without the node's name: {r.get('Phase')}")
                break
        owners = {p.stat().st_uid for p in state.rglob("*")}
        if owners and owners != {int(user.split(":")[0])}:
            problems.append(f"state files owned by {owners}, not the image's user")
        if problems:
            print("\n".join(logs[-30:]), file=sys.stderr)
    return problems


def _watch(
    proc: subprocess.Popen[str], api: KubernetesApi, timeout: float
) -> tuple[list[dict[str, Any]], list[str], int, Any]:
    """Read its output until the node is uncordoned (or the timeout), then stop it."""
    records: list[dict[str, Any]] = []
    logs: list[str] = []
    readers = [
        threading.Thread(target=lambda: _read(proc.stdout, records, logs), daemon=True),
        threading.Thread(target=lambda: _read(proc.stderr, records, logs), daemon=True),
    ]
    for t in readers:
        t.start()
    c = api.cluster
    deadline = time.monotonic() + timeout
    released = False
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            evictions = [(p, code) for _, p, code in c.evictions]
            if not released and ("web-2", 429) in evictions:
                c.ready_replacements()  # the budget allows the next one now
                released = True
            if "NodeUncordoned" in [r.get("Phase") for r in records]:
                break
            time.sleep(0.2)
    finally:
        if proc.poll() is None:
            proc.terminate()
        try:
            code = proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            code = proc.wait()
        for t in readers:
            t.join(5)
    return records, logs, code, c


def _read(stream: Any, records: list[dict[str, Any]], logs: list[str]) -> None:
    for line in stream:
        try:
            obj = json.loads(line)
        except ValueError:
            logs.append(line.rstrip())
            continue
        # a row of the stdout sink (the agent's log lines about a record have a level)
        if isinstance(obj, dict) and "Phase" in obj and "RecordId" in obj and "level" not in obj:
            records.append(obj)
        else:
            logs.append(line.rstrip())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path, help="build.sh's output folder (rootfs/, *.oci.tar)")
    ap.add_argument("--timeout", type=float, default=120.0)
    a = ap.parse_args()
    if os.geteuid() != 0:
        print("smoke.py: chroot needs root", file=sys.stderr)
        return 2
    started = time.monotonic()
    problems = run(a.out, a.timeout)
    for p in problems:
        print("FAIL:", p, file=sys.stderr)
    print(f"{'FAILED' if problems else 'passed'} in {time.monotonic() - started:.1f} s")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
