"""The real thing: day one and day two from an offline bundle under a hardened umask, and a bundle
checked before anything is installed. Split from test_install.py;
what is real and what is not: conftest.py."""

from __future__ import annotations

import hashlib
import io
import json
import os
import pwd
import re
import shutil
import stat
import subprocess
import tarfile
import time
from pathlib import Path

import pytest
from helpers.install_runs import collector_toml, out, wait_healthy
from helpers.installer import INSTALL_SH, free_port

pytestmark = [pytest.mark.e2e, pytest.mark.external]

AS_ROOT = os.geteuid() == 0
EVENT_ID = "C7061BAC-AFDC-4513-B24B-AA5F13A16123"
WEBHOOK_SECRET = "T0/B0/c2VjcmV0LXdlYmhvb2s"
EXTRAS = "azure,webhook,collector"  # the agent's and the collector's: one virtualenv serves both


def read_status(state: Path) -> dict:
    return json.loads((state / "status.json").read_text())


def modes_every_user_can_read(root: Path) -> list[str]:
    """Files and directories under ``root`` that others may not read (or traverse)."""
    bad = []
    for p in [root, *root.rglob("*")]:
        if p.is_symlink():
            continue
        mode = p.stat().st_mode
        need = stat.S_IROTH | (stat.S_IXOTH if p.is_dir() else 0)
        if mode & need != need:
            bad.append(f"{p.relative_to(root)} {stat.S_IMODE(mode):04o}")
    return bad


def test_install_from_a_bundle_with_no_index_under_umask_027_then_day_two(
    inst, sim, bundle, tmp_path
):
    """The first install on a hardened image (umask 027) from an offline bundle, with no package
    index reachable at all and a webhook URL handed over as a systemd credential; then a
    configuration change (the virtualenv reused), an upgrade, a clean stop and an uninstall."""
    records = inst.state / "records.jsonl"
    hook_host = "127.0.0.9"  # only the credential names it; nothing listens: the sink's error does
    url_file = tmp_path / "webhook.url"
    url_file.write_text(f"https://{hook_host}/services/{WEBHOOK_SECRET}\n")
    sha = hashlib.sha256(bundle.read_bytes()).hexdigest()
    dead = f"http://127.0.0.1:{free_port()}"
    no_index = {
        "PIP_INDEX_URL": dead + "/simple",
        "PIP_NO_INDEX": "",
        "PIP_FIND_LINKS": "",
        "HTTPS_PROXY": dead,
        "https_proxy": dead,
        "HTTP_PROXY": dead,
        "http_proxy": dead,
    }
    r = inst.install(
        "--package",
        str(bundle),
        "--package-sha256",
        sha,
        "--extras",
        EXTRAS,
        "--file-sink",
        str(records),
        "--webhook-url-file",
        str(url_file),
        "--webhook-format",
        "slack",
        "--imds-endpoint",
        sim.url,
        "--verify-timeout",
        "120",
        umask=0o027,
        **no_index,
    )
    assert r.returncode == 0, out(r)
    assert "(hash-checked, no package index)" in r.stdout and "installed and polling" in r.stdout
    assert f"sha256 {sha}" in r.stdout
    log = (inst.opt / "install.log").read_text()
    assert "Looking in indexes" not in log, log[-2000:]

    # modes: what the unprivileged service reads is readable by others, whatever the umask
    current = inst.opt / "current"
    venv = current.resolve()
    assert modes_every_user_can_read(venv) == []
    for d in (inst.prefix / "etc", inst.etc, inst.prefix / "opt", inst.opt, inst.opt / "versions"):
        assert stat.S_IMODE(d.stat().st_mode) == 0o755, d
    assert stat.S_IMODE(inst.config.stat().st_mode) == 0o644
    # the credential: root only, loaded by the unit, named (not written) in the config
    store = inst.etc / "credentials"
    assert stat.S_IMODE(store.stat().st_mode) == 0o700
    assert stat.S_IMODE((store / "webhook-url").stat().st_mode) == 0o600
    dropin = (
        inst.prefix / "etc/systemd/system/se-forwarder.service.d/credentials.conf"
    ).read_text()
    assert f"LoadCredential=webhook-url:{store}/webhook-url" in dropin
    cfg = inst.config.read_text()
    assert 'url_credential = "webhook-url"' in cfg and WEBHOOK_SECRET not in cfg
    # this systemd reads the unit and its drop-in as written (LoadCredential= included)
    unit = inst.prefix / "etc/systemd/system/se-forwarder.service"
    v = subprocess.run(
        [shutil.which("systemd-analyze") or "systemd-analyze", "verify", str(unit)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=unit.parent,
        check=False,
    )
    assert v.returncode == 0 and v.stdout + v.stderr == "", v.stdout + v.stderr

    # the agent runs as the unit's user (nobody, as root), polls, and read its credential
    doc = wait_healthy(inst)
    pid = doc["status"]["pid"]
    if AS_ROOT:
        assert Path(f"/proc/{pid}").stat().st_uid == pwd.getpwnam("nobody").pw_uid
    assert [e["EventId"] for e in doc["status"]["open_events"]] == [EVENT_ID]
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and hook_host not in json.dumps(
        read_status(inst.state)["sinks"].get("webhook", {})
    ):
        time.sleep(1)
    webhook = read_status(inst.state)["sinks"]["webhook"]
    assert f"https://{hook_host}/***" in webhook["last_error"], webhook  # the credential's URL
    everything = r.stdout + r.stderr + log + json.dumps(read_status(inst.state))
    assert WEBHOOK_SECRET not in everything + (inst.run_dir / "agent.log").read_text()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not (
        records.exists() and EVENT_ID in records.read_text()
    ):
        time.sleep(0.5)
    assert json.loads(records.read_text().splitlines()[0])["EventId"] == EVENT_ID

    # day two, a configuration change (the notifications dropped), as a Run Command run again
    # with the same package would make it: the same bundle and Python, so the virtualenv is
    # reused; the spool stays, and so does the stored credential (still loaded by the unit)
    marker = inst.state / "keep-me"
    marker.write_text("x")
    pid_before = inst.agent_pid()
    r = inst.install(
        "--package",
        str(bundle),
        "--package-sha256",
        sha,
        "--extras",
        EXTRAS,
        "--file-sink",
        str(records),
        "--imds-endpoint",
        sim.url,
        "--verify-timeout",
        "120",
        **no_index,
    )
    assert r.returncode == 0, out(r)
    assert "reusing versions/" in r.stdout and current.resolve() == venv
    assert "[sinks.webhook]" not in inst.config.read_text() and (store / "webhook-url").exists()
    assert (
        "LoadCredential=webhook-url"
        in (inst.prefix / "etc/systemd/system/se-forwarder.service.d/credentials.conf").read_text()
    )
    assert inst.agent_pid() != pid_before and marker.exists()
    stops = (inst.run_dir / "stops.log").read_text().split("\n")
    assert stops[0].startswith(f"graceful {pid_before}"), stops

    # an upgrade (a new virtualenv), keeping the configuration
    cfg_before = inst.config.read_text()
    r = inst.install(
        "--package",
        str(bundle),
        "--reinstall",
        "--extras",
        EXTRAS,
        "--imds-endpoint",
        sim.url,
        "--verify-timeout",
        "120",
        **no_index,
    )
    assert r.returncode == 0, out(r)
    assert (
        "keeping the existing configuration" in r.stdout and inst.config.read_text() == cfg_before
    )
    assert current.resolve() != venv and len(list((inst.opt / "versions").iterdir())) == 2
    doc = wait_healthy(inst)
    assert doc["status"]["pid"] == inst.agent_pid() and marker.exists()

    # the collector beside the agent (install.sh --collector): the same package, extras and
    # Python, so the virtualenv is reused; its own unit, configuration and state directory, its
    # configuration checked before anything is written; the agent left running as it was
    collector_state = inst.prefix / "var/lib/se-forwarder-collector"
    given = tmp_path / "collector.toml"
    agent_pid, agent_config, venv = inst.agent_pid(), inst.config.read_text(), current.resolve()
    collector = [
        "--collector",
        "--package",
        str(bundle),
        "--extras",
        EXTRAS,
        "--config-file",
        str(given),
        "--imds-endpoint",
        sim.url,
        "--no-systemd",
    ]
    given.write_text(collector_toml(inst.state))
    r = inst.install(*collector, **no_index)
    assert r.returncode == 2 and f'state_dir = "{collector_state}"' in r.stderr, out(r)
    given.write_text(collector_toml(collector_state, consumer_group="$Default"))
    r = inst.install(*collector, **no_index)
    assert r.returncode == 2 and "$Default" in r.stdout + r.stderr, out(r)
    given.write_text(collector_toml(f"{collector_state}/"))  # the same directory
    r = inst.install(*collector, **no_index)
    assert r.returncode == 0, out(r)
    assert "reusing versions/" in r.stdout and current.resolve() == venv
    unit = inst.prefix / "etc/systemd/system/se-forwarder-collector.service"
    shipped = (Path(INSTALL_SH).parents[1] / "systemd" / unit.name).read_text()
    assert unit.read_text() == shipped.replace("/opt/", f"{inst.prefix}/opt/").replace(
        "/etc/se-forwarder/", f"{inst.prefix}/etc/se-forwarder/"
    ).replace("/var/lib/se-forwarder-collector", str(collector_state))
    v = subprocess.run(
        [shutil.which("systemd-analyze") or "systemd-analyze", "verify", str(unit)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=unit.parent,
        check=False,
    )
    assert v.returncode == 0 and v.stdout + v.stderr == "", v.stdout + v.stderr
    assert (inst.etc / "collector.toml").read_text() == given.read_text()
    assert stat.S_IMODE((inst.etc / "collector.toml").stat().st_mode) == 0o644
    assert collector_state.is_dir() and not (collector_state / "status.json").exists()
    assert inst.agent_pid() == agent_pid and inst.config.read_text() == agent_config
    # removed alone (no service manager: the stand-in knows the agent's unit only): the package
    # stays for the agent; --purge takes the collector's configuration and state
    r = inst.install("--uninstall", "--collector", "--purge", "--no-systemd")
    assert r.returncode == 0 and "kept the package" in r.stdout, out(r)
    assert not unit.exists() and not (inst.etc / "collector.toml").exists()
    assert not collector_state.exists() and current.resolve() == venv and inst.config.exists()

    # graceful stop on SIGTERM within TimeoutStopSec: status.json says stopped, status fails
    pid = inst.agent_pid()
    subprocess.run(
        [str(inst.fake), "stop", "se-forwarder.service"], env=inst.env, check=True, timeout=120
    )
    last = (inst.run_dir / "stops.log").read_text().strip().splitlines()[-1]
    assert last.startswith(f"graceful {pid}"), last
    assert read_status(inst.state)["stopped"] is True
    st = inst.status()
    assert st.returncode == 1 and "STOPPED" in st.stdout, out(st)

    # uninstall keeps config, credentials and state; --purge removes them
    r = inst.install("--uninstall")
    assert r.returncode == 0, out(r)
    assert not inst.opt.exists() and not (inst.prefix / "usr/local/bin/se-forwarder").exists()
    assert not (inst.prefix / "etc/systemd/system/se-forwarder.service").exists()
    assert not (inst.run_dir / "enabled").exists()
    assert marker.exists() and inst.config.exists() and (store / "webhook-url").exists()
    r = inst.install("--uninstall", "--purge")
    assert r.returncode == 0, out(r)
    assert not inst.state.exists() and not inst.config.parent.exists()


def test_a_bundle_is_checked_before_anything_is_installed(inst, sim, bundle, tmp_path):
    """The pinned sha256, a target the bundle lacks, a wheel changed inside it: refused before a
    virtualenv is made (pip's hash-checking mode, which checks each file again, is proven by the
    lock tests, test_install_lock.py)."""
    r = inst.install(
        "--package",
        str(bundle),
        "--package-sha256",
        "0" * 64,
        "--stdout-sink",
        "--imds-endpoint",
        sim.url,
    )
    assert r.returncode == 11 and "not the expected" in r.stderr, out(r)
    # the same bundle, its manifest naming another Python only
    other = tmp_path / "other.tar.gz"
    rewrite_bundle(
        bundle,
        other,
        manifest=lambda m: {**m, "targets": {"cp399-x86_64": next(iter(m["targets"].values()))}},
    )
    r = inst.install("--package", str(other), "--stdout-sink", "--imds-endpoint", sim.url)
    assert r.returncode == 10 and "has no wheels for Python 3." in r.stderr, out(r)
    assert "it has: cp399-x86_64" in r.stderr
    # a dependency's wheel replaced inside the bundle: pip's hash check refuses it
    tampered = tmp_path / "tampered.tar.gz"
    rewrite_bundle(
        bundle,
        tampered,
        wheel_filter=lambda name, data: data + b"\0" if name.startswith("wheels/idna-") else data,
    )
    r = inst.install("--package", str(tampered), "--stdout-sink", "--imds-endpoint", sim.url)
    assert r.returncode == 11, out(r)
    assert re.search(
        r"do not match its lock for cp3\d+-\w+: no file with the pinned sha256 "
        r"for idna==",
        r.stderr,
    ), out(r)
    assert list((inst.opt / "versions").iterdir()) == []


def rewrite_bundle(src: Path, dest: Path, manifest=None, wheel_filter=None) -> None:
    with tarfile.open(src) as tin, tarfile.open(dest, "w:gz") as tout:
        for m in tin.getmembers():
            data = tin.extractfile(m).read()
            if m.name == "bundle.json" and manifest:
                data = json.dumps(manifest(json.loads(data))).encode()
            elif wheel_filter:
                data = wheel_filter(m.name, data)
            m.size = len(data)
            tout.addfile(m, io.BytesIO(data))
