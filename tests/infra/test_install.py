"""infra/scripts/install.sh, run for real in an isolated prefix.

What is real: bash runs the installer; it finds Python, checks IMDS (the simulator) with proxies
disabled, builds a virtualenv, pip-installs a wheel built from this repository (from an offline
bundle with no package index at all, or with a hash-checked lock from a local wheelhouse),
writes and validates the config, stores credentials, switches the `current` symlink, writes the
systemd unit and its drop-in, and verifies health with `se-forwarder status`. The installed
agent runs against the IMDS simulator, as the unit's unprivileged user when the tests run as
root, and is stopped with SIGTERM.

What is not: systemd is not PID 1 here, so SE_FORWARDER_SYSTEMCTL points at a stand-in
(tests/helpers/fake_systemctl.py) that starts the unit's ExecStart= as systemd would for this
unit (Environment=, WorkingDirectory=, UMask=, DynamicUser= as `nobody`, LoadCredential= into
$CREDENTIALS_DIRECTORY) and stops it with KillSignal= within TimeoutStopSec=. The sandboxing
directives are checked statically in test_systemd.py.

The wheel, the bundle and the wheelhouse are built once per session (tests/infra/conftest.py).
"""

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
from bicep_eval import Evaluator
from helpers.installer import DEAD_INDEX, INSTALL_SH, BlobStandIn, Env, free_port, reachable_dir

from se_forwarder_testbed.simulator import Simulator

pytestmark = [pytest.mark.e2e, pytest.mark.external]

AS_ROOT = os.geteuid() == 0
EVENT_ID = "C7061BAC-AFDC-4513-B24B-AA5F13A16123"
WEBHOOK_SECRET = "T0/B0/c2VjcmV0LXdlYmhvb2s"
EXTRAS = "azure,webhook,collector"  # the agent's and the collector's: one virtualenv serves both


@pytest.fixture
def sim():
    s = Simulator("live-migration-freeze", first_call_delay=0.0, speed=20.0)
    s.start()
    yield s
    s.stop()


@pytest.fixture
def inst(wheelhouse):
    base = reachable_dir()
    e = Env(base, wheelhouse)
    yield e
    e.kill_agent()  # only the agent this test started, by its pid
    shutil.rmtree(base, ignore_errors=True)


def out(r: subprocess.CompletedProcess) -> str:
    return f"exit {r.returncode}\n--- stdout\n{r.stdout}\n--- stderr\n{r.stderr}"


def read_status(state: Path) -> dict:
    return json.loads((state / "status.json").read_text())


def wait_healthy(inst: Env, timeout: float = 60) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        st = inst.status("--json")
        if st.returncode == 0 or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert st.returncode == 0, out(st)
    return json.loads(st.stdout)


# -- failures: clear message, non-zero exit, nothing half-installed ---------------------------

def test_usage_errors(inst, tmp_path):
    r = inst.install("--file-sink", "/tmp/x.jsonl")
    assert r.returncode == 2 and "--package" in r.stderr and "--index-url" in r.stderr, out(r)
    r = inst.install("--bogus")
    assert r.returncode == 2 and "unknown argument: --bogus" in r.stderr, out(r)
    r = inst.install("--version", "0.1.0", "--index-url", DEAD_INDEX)
    assert r.returncode == 2 and "no configuration" in r.stderr, out(r)
    r = inst.install("--version", "latest", "--stdout-sink")
    assert r.returncode == 2 and "exact version" in r.stderr, out(r)
    r = inst.install("--version", "0.1.0", "--index-url", DEAD_INDEX, "--logs-endpoint",
                     "https://x.ingest.monitor.azure.com")
    assert r.returncode == 2 and "--dcr-id" in r.stderr, out(r)
    r = inst.install("--package", "x.whl", "--package-sha256", "abc", "--stdout-sink")
    assert r.returncode == 2 and "64 hex digits" in r.stderr, out(r)
    r = inst.install("--package", "http://example.org/x.whl", "--stdout-sink")
    assert r.returncode == 2 and "must be https://" in r.stderr, out(r)
    r = inst.install("--package", "b.tar.gz", "--lock", "x.lock", "--stdout-sink")
    assert r.returncode == 2 and "a bundle carries one lock per" in r.stderr, out(r)
    secret = tmp_path / "url"
    secret.write_text("https://hooks.example/x\n")
    r = inst.install("--package", "b.tar.gz", "--webhook-url-file", str(secret))
    assert r.returncode == 2 and "needs the webhook extra" in r.stderr, out(r)
    r = inst.install("--package", "b.tar.gz", "--stdout-sink", "--credential", "../x=" + str(secret))
    assert r.returncode == 2 and "--credential takes NAME=FILE" in r.stderr, out(r)
    r = inst.install("--package", "b.tar.gz", "--stdout-sink", "--credential", "x=/nonexistent")
    assert r.returncode == 2 and "credential x: cannot read /nonexistent" in r.stderr, out(r)
    assert not inst.opt.exists()


def collector_toml(state: Path | str, **collector: str) -> str:
    """A collector's configuration as docs/collector.md writes it (the Bicep's [identity] and
    [collector], plus [agent] and a sink that takes its rows)."""
    section = {"namespace": "ns.servicebus.windows.net", "hub": "platform-events",
               "checkpoint_account_url": "https://account.blob.core.windows.net", **collector}
    return (f'[agent]\nstate_dir = "{state}"\n\n[identity]\nkind = "managed"\n\n[collector]\n'
            + "".join(f'{k} = "{v}"\n' for k, v in section.items())
            + f'\n[sinks.file]\npath = "{state}/records.jsonl"\n'
            f'platform_path = "{state}/platform.jsonl"\n')


def test_collector_usage_errors(inst, tmp_path):
    """--collector: its configuration from a file only, and the collector extra; refused before
    anything is installed."""
    given = tmp_path / "collector.toml"
    given.write_text(collector_toml(tmp_path))
    r = inst.install("--collector", "--package", "b.tar.gz", "--stdout-sink")
    assert r.returncode == 2 and "--collector takes its configuration from --config-file" in r.stderr, out(r)
    r = inst.install("--collector", "--package", "b.tar.gz")
    assert r.returncode == 2 and "--collector needs --config-file" in r.stderr, out(r)
    r = inst.install("--collector", "--package", "b.tar.gz", "--config-file", str(given),
                     "--extras", "azure")
    assert r.returncode == 2 and "needs the collector extra" in r.stderr, out(r)
    r = inst.install("--collector", "--package", "b.tar.gz", "--config-file", str(given),
                     "--wait-delivery", "300")
    assert r.returncode == 2 and "--wait-delivery is the agent's" in r.stderr, out(r)
    assert not inst.opt.exists()


def test_version_never_comes_from_an_index_nobody_named(inst):
    """se-forwarder is not on the public index: a name anyone can register there is never
    installed as root."""
    r = inst.install("--version", "0.1.0", "--stdout-sink")
    assert r.returncode == 2 and "--version needs --index-url" in r.stderr, out(r)
    assert not inst.opt.exists()


def test_no_python(inst, tmp_path):
    r = inst.install("--version", "0.1.0", "--index-url", DEAD_INDEX, "--stdout-sink",
                     python=str(tmp_path / "nope"))
    assert r.returncode == 10 and "Python not found" in r.stderr, out(r)
    old = tmp_path / "python-old"
    old.write_text("#!/bin/sh\necho 'Python 2.7.18' >&2\nexit 1\n")
    old.chmod(0o755)
    r = inst.install("--version", "0.1.0", "--index-url", DEAD_INDEX, "--stdout-sink",
                     python=str(old))
    assert r.returncode == 10 and "needs Python 3.11+" in r.stderr, out(r)
    assert not inst.opt.exists()


@pytest.mark.parametrize("os_release,says", [
    ('ID=debian\nVERSION_ID="12"\n', "on this system, apt-get install python3 python3-venv"),
    ('ID=ubuntu\nVERSION_ID="22.04"\nID_LIKE=debian\n', "Ubuntu 22.04 ships a Python older than 3.11"),
    ('ID="rhel"\nVERSION_ID="9.4"\nID_LIKE="fedora"\n', "dnf install python3.11"),
    ('ID=azurelinux\nVERSION_ID="3.0"\n', "tdnf install python3"),
])
def test_without_a_usable_python_it_says_what_to_install_here(inst, tmp_path, os_release, says):
    """No python3 on PATH with venv: install.sh looks for one and names this distribution's
    package (read from os-release), instead of a generic hint."""
    bin_dir = tmp_path / "bin"  # this system's commands, but no Python at all
    bin_dir.mkdir()
    for tool in Path("/usr/bin").iterdir():
        if not tool.name.startswith("python") and not (bin_dir / tool.name).exists():
            (bin_dir / tool.name).symlink_to(tool)
    release = tmp_path / "os-release"
    release.write_text(os_release)
    r = inst.install("--version", "0.1.0", "--index-url", DEAD_INDEX, "--stdout-sink",
                     python=None, PATH=str(bin_dir), SE_FORWARDER_OS_RELEASE=str(release))
    assert r.returncode == 10 and "no Python 3.11+ with venv found" in r.stderr, out(r)
    assert says in r.stderr, out(r)


def test_install_prerequisites_installs_the_distributions_python(inst, tmp_path):
    """--install-prerequisites (what the Run Command and the extension pass): with no usable
    Python, the distribution's package manager installs it, then the install goes on (here to
    the IMDS check). apt-get is a stand-in that records its arguments and provides python3."""
    from helpers.installer import system_python

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in Path("/usr/bin").iterdir():
        if not tool.name.startswith(("python", "apt")) and not (bin_dir / tool.name).exists():
            (bin_dir / tool.name).symlink_to(tool)
    calls = tmp_path / "apt-calls"
    (bin_dir / "apt-get").write_text(
        f'#!/bin/sh\necho "$@" >> {calls}\n'
        f'case " $* " in *" install "*) ln -sf {system_python()} {bin_dir}/python3 ;; esac\n')
    (bin_dir / "apt-get").chmod(0o755)
    release = tmp_path / "os-release"
    release.write_text('ID=debian\nVERSION_ID="12"\n')
    r = inst.install("--version", "0.1.0", "--index-url", DEAD_INDEX, "--stdout-sink",
                     "--install-prerequisites", "--imds-endpoint", f"http://127.0.0.1:{free_port()}",
                     python=None, PATH=str(bin_dir), SE_FORWARDER_OS_RELEASE=str(release))
    assert "installing the distribution's (debian 12)" in r.stdout, out(r)
    assert "install -y -q python3 python3-venv" in calls.read_text()
    assert r.returncode == 12 and "installed Python 3." in r.stdout, out(r)


def test_imds_unreachable(inst):
    port = free_port()  # nothing listens there
    r = inst.install("--version", "0.1.0", "--index-url", DEAD_INDEX, "--stdout-sink",
                     "--imds-endpoint", f"http://127.0.0.1:{port}")
    assert r.returncode == 12, out(r)
    assert "IMDS unreachable" in r.stderr and "proxy" in r.stderr
    assert not inst.opt.exists(), "nothing may be installed when IMDS is unreachable"


def test_no_network_to_index_and_imds_check_ignores_proxy(inst, sim):
    dead = f"http://127.0.0.1:{free_port()}"
    r = inst.install("--version", "0.1.0", "--stdout-sink", "--imds-endpoint", sim.url,
                     "--index-url", dead + "/simple",
                     http_proxy=dead, HTTP_PROXY=dead, https_proxy=dead, HTTPS_PROXY=dead,
                     PIP_RETRIES="0", PIP_TIMEOUT="3", timeout=180,
                     PIP_EXTRA_INDEX_URL="file:///opt/elsewhere/simple")
    # IMDS passed although every proxy variable points at a dead proxy ...
    assert "IMDS reachable" in r.stdout, out(r)
    # ... and the package index failed cleanly
    assert r.returncode == 11 and "could not install se-forwarder[azure]==0.1.0" in r.stderr, out(r)
    # only the named index was asked, not one from pip's environment or configuration
    looked = [line for line in (inst.opt / "install.log").read_text().splitlines()
              if line.startswith("Looking in indexes:")]
    assert looked == [f"Looking in indexes: {dead}/simple"], looked
    assert list((inst.opt / "versions").iterdir()) == [], "failed virtualenv left behind"
    assert not (inst.opt / "current").exists()
    assert not inst.config.exists()


def test_missing_wheel_file(inst, sim, tmp_path):
    r = inst.install("--package", str(tmp_path / "se_forwarder-9.9.9-py3-none-any.whl"),
                     "--stdout-sink", "--imds-endpoint", sim.url)
    assert r.returncode == 11 and "no such file" in r.stderr, out(r)


# -- the real thing: day one and day two from a bundle, under a hardened umask ----------------

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


def test_install_from_a_bundle_with_no_index_under_umask_027_then_day_two(inst, sim, bundle,
                                                                          tmp_path):
    """The first install on a hardened image (umask 027) from an offline bundle, with no package
    index reachable at all and a webhook URL handed over as a systemd credential; then a
    configuration change (the virtualenv reused), an upgrade, a clean stop and an uninstall."""
    records = inst.state / "records.jsonl"
    hook_host = "127.0.0.9"  # only the credential names it; nothing listens: the sink's error does
    url_file = tmp_path / "webhook.url"
    url_file.write_text(f"https://{hook_host}/services/{WEBHOOK_SECRET}\n")
    sha = hashlib.sha256(bundle.read_bytes()).hexdigest()
    dead = f"http://127.0.0.1:{free_port()}"
    no_index = {"PIP_INDEX_URL": dead + "/simple", "PIP_NO_INDEX": "", "PIP_FIND_LINKS": "",
                "HTTPS_PROXY": dead, "https_proxy": dead, "HTTP_PROXY": dead, "http_proxy": dead}
    r = inst.install("--package", str(bundle), "--package-sha256", sha,
                     "--extras", EXTRAS, "--file-sink", str(records),
                     "--webhook-url-file", str(url_file), "--webhook-format", "slack",
                     "--imds-endpoint", sim.url, "--verify-timeout", "120", umask=0o027,
                     **no_index)
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
    dropin = (inst.prefix / "etc/systemd/system/se-forwarder.service.d/credentials.conf").read_text()
    assert f"LoadCredential=webhook-url:{store}/webhook-url" in dropin
    cfg = inst.config.read_text()
    assert 'url_credential = "webhook-url"' in cfg and WEBHOOK_SECRET not in cfg
    # this systemd reads the unit and its drop-in as written (LoadCredential= included)
    unit = inst.prefix / "etc/systemd/system/se-forwarder.service"
    v = subprocess.run([shutil.which("systemd-analyze") or "systemd-analyze", "verify", str(unit)],
                       capture_output=True, text=True, timeout=60, cwd=unit.parent, check=False)
    assert v.returncode == 0 and v.stdout + v.stderr == "", v.stdout + v.stderr

    # the agent runs as the unit's user (nobody, as root), polls, and read its credential
    doc = wait_healthy(inst)
    pid = doc["status"]["pid"]
    if AS_ROOT:
        assert Path(f"/proc/{pid}").stat().st_uid == pwd.getpwnam("nobody").pw_uid
    assert [e["EventId"] for e in doc["status"]["open_events"]] == [EVENT_ID]
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and hook_host not in json.dumps(
            read_status(inst.state)["sinks"].get("webhook", {})):
        time.sleep(1)
    webhook = read_status(inst.state)["sinks"]["webhook"]
    assert f"https://{hook_host}/***" in webhook["last_error"], webhook  # the credential's URL
    everything = r.stdout + r.stderr + log + json.dumps(read_status(inst.state))
    assert WEBHOOK_SECRET not in everything + (inst.run_dir / "agent.log").read_text()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not (records.exists() and EVENT_ID in records.read_text()):
        time.sleep(0.5)
    assert json.loads(records.read_text().splitlines()[0])["EventId"] == EVENT_ID

    # day two, a configuration change (the notifications dropped), as a Run Command run again
    # with the same package would make it: the same bundle and Python, so the virtualenv is
    # reused; the spool stays, and so does the stored credential (still loaded by the unit)
    marker = inst.state / "keep-me"
    marker.write_text("x")
    pid_before = inst.agent_pid()
    r = inst.install("--package", str(bundle), "--package-sha256", sha,
                     "--extras", EXTRAS, "--file-sink", str(records),
                     "--imds-endpoint", sim.url, "--verify-timeout", "120", **no_index)
    assert r.returncode == 0, out(r)
    assert "reusing versions/" in r.stdout and current.resolve() == venv
    assert "[sinks.webhook]" not in inst.config.read_text() and (store / "webhook-url").exists()
    assert "LoadCredential=webhook-url" in (
        inst.prefix / "etc/systemd/system/se-forwarder.service.d/credentials.conf").read_text()
    assert inst.agent_pid() != pid_before and marker.exists()
    stops = (inst.run_dir / "stops.log").read_text().split("\n")
    assert stops[0].startswith(f"graceful {pid_before}"), stops

    # an upgrade (a new virtualenv), keeping the configuration
    cfg_before = inst.config.read_text()
    r = inst.install("--package", str(bundle), "--reinstall", "--extras", EXTRAS,
                     "--imds-endpoint", sim.url, "--verify-timeout", "120", **no_index)
    assert r.returncode == 0, out(r)
    assert "keeping the existing configuration" in r.stdout and inst.config.read_text() == cfg_before
    assert current.resolve() != venv and len(list((inst.opt / "versions").iterdir())) == 2
    doc = wait_healthy(inst)
    assert doc["status"]["pid"] == inst.agent_pid() and marker.exists()

    # the collector beside the agent (install.sh --collector): the same package, extras and
    # Python, so the virtualenv is reused; its own unit, configuration and state directory, its
    # configuration checked before anything is written; the agent left running as it was
    collector_state = inst.prefix / "var/lib/se-forwarder-collector"
    given = tmp_path / "collector.toml"
    agent_pid, agent_config, venv = inst.agent_pid(), inst.config.read_text(), current.resolve()
    collector = ["--collector", "--package", str(bundle), "--extras", EXTRAS,
                 "--config-file", str(given), "--imds-endpoint", sim.url, "--no-systemd"]
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
        "/etc/se-forwarder/", f"{inst.prefix}/etc/se-forwarder/").replace(
        "/var/lib/se-forwarder-collector", str(collector_state))
    v = subprocess.run([shutil.which("systemd-analyze") or "systemd-analyze", "verify", str(unit)],
                       capture_output=True, text=True, timeout=60, cwd=unit.parent, check=False)
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
    subprocess.run([str(inst.fake), "stop", "se-forwarder.service"], env=inst.env, check=True,
                   timeout=120)
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
    lock tests below)."""
    r = inst.install("--package", str(bundle), "--package-sha256", "0" * 64, "--stdout-sink",
                     "--imds-endpoint", sim.url)
    assert r.returncode == 11 and "not the expected" in r.stderr, out(r)
    # the same bundle, its manifest naming another Python only
    other = tmp_path / "other.tar.gz"
    rewrite_bundle(bundle, other, manifest=lambda m: {**m, "targets": {
        "cp399-x86_64": next(iter(m["targets"].values()))}})
    r = inst.install("--package", str(other), "--stdout-sink", "--imds-endpoint", sim.url)
    assert r.returncode == 10 and "has no wheels for Python 3." in r.stderr, out(r)
    assert "it has: cp399-x86_64" in r.stderr
    # a dependency's wheel replaced inside the bundle: pip's hash check refuses it
    tampered = tmp_path / "tampered.tar.gz"
    rewrite_bundle(bundle, tampered, wheel_filter=lambda name, data: (
        data + b"\0" if name.startswith("wheels/idna-") else data))
    r = inst.install("--package", str(tampered), "--stdout-sink", "--imds-endpoint", sim.url)
    assert r.returncode == 11, out(r)
    assert re.search(r"do not match its lock for cp3\d+-\w+: no file with the pinned sha256 "
                     r"for idna==", r.stderr), out(r)
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


# -- the installers as Azure calls them (Run Command, Custom Script extension) ---------------------

SHARED_BICEP = INSTALL_SH.parents[2] / "infra" / "modules" / "shared.bicep"


def _settings(**over) -> dict:
    base = {"packageUri": "https://a.blob.core.windows.net/c/se_forwarder-0.1.0-py3-none-any.whl",
            "packageSha256": "",
            "lockUri": "https://a.blob.core.windows.net/c/se_forwarder-0.1.0.lock",
            "logsIngestionEndpoint": "https://x.ingest.monitor.azure.com", "dcrImmutableId": "dcr-0123",
            "recordsStream": "Custom-ScheduledEvents", "heartbeatsStream": "Custom-ScheduledEventsAgent",
            "clientId": ""}
    return {**base, **over}


def _shared():
    return Evaluator(SHARED_BICEP)


def test_extension_command_for_linux_is_accepted_by_install_sh():
    import shlex

    command = _shared().call("linuxInstallCommand", "install.sh", _settings(packageSha256="a" * 64))
    argv = shlex.split(command)
    assert argv[:2] == ["sh", "-c"] and argv[3:5] == ["bash", "install.sh"]
    assert "--client-id" in argv and "--install-prerequisites" in argv
    # every option parses (an unknown one would exit 2 before --help is reached)
    r = subprocess.run(["bash", str(INSTALL_SH), *argv[5:], "--help"], capture_output=True,
                       text=True, timeout=30, check=False)
    assert r.returncode == 0 and "Usage: install.sh" in r.stdout, out(r)


def test_extension_command_retries_only_while_the_download_is_refused(tmp_path):
    """The loop around install.sh: exit 11 (a 403 while a new role assignment applies) and 12
    are retried, anything else ends it with install.sh's own status."""
    import shlex

    argv = shlex.split(_shared().call("linuxInstallCommand", "install.sh", _settings()))
    script = argv[2].replace("sleep 90", "sleep 0")
    assert script != argv[2]
    for codes, expected_calls, rc in (("11 11 0", 3, 0), ("11 2", 2, 2), ("13", 1, 13),
                                      ("12 " * 10, 10, 12)):
        stub = tmp_path / "install.sh"
        calls = tmp_path / "calls"
        calls.unlink(missing_ok=True)
        stub.write_text(f'echo x >> {calls}\nset -- {codes}\nn=$(wc -l < {calls})\n'
                        'eval "rc=\\${$n}"\nexit $rc\n')
        r = subprocess.run(["sh", "-c", script, "bash", str(stub)], capture_output=True,
                           text=True, timeout=60, check=False)
        assert r.returncode == rc and len(calls.read_text().split()) == expected_calls, (codes, r)


def run_command_invocation(parameters: list[dict]) -> tuple[list[str], dict[str, str]]:
    """What Azure's Linux Run Command handler does with the parameters (Azure/run-command-
    handler-linux, internal/exec): a named one becomes an environment variable, an unnamed one is
    appended to `bash -c "<script>"` unquoted; empty values are dropped."""
    args, env = [], {}
    for p in parameters:
        if p["value"]:
            if p["name"]:
                env[p["name"]] = p["value"]
            else:
                args.append(p["value"])
    return args, env


def test_unknown_run_command_variables_are_refused(inst):
    r = inst.install("--from-env", SE_INSTALL_PAKAGE="x")
    assert r.returncode == 2 and "unknown environment variable SE_INSTALL_PAKAGE" in r.stderr, out(r)
    # and without --from-env, the environment is not read at all
    r = inst.install("--stdout-sink", SE_INSTALL_PACKAGE="/nonexistent.whl")
    assert r.returncode == 2 and "give --package" in r.stderr, out(r)


@pytest.fixture
def blob(sim, wheel, azure_lock):
    b = BlobStandIn(sim.token_authority, {
        f"/se-forwarder/{wheel.name}": wheel.read_bytes(),
        "/se-forwarder/se_forwarder.lock": azure_lock.read_bytes(),
    }, forbidden={"/se-forwarder/secret.whl"})
    yield b
    b.close()


def test_run_command_installs_from_blob_storage_with_the_managed_identity(inst, sim, wheel, blob):
    """The Run Command path end to end: the parameters vm-agent.bicep gives the run command
    (shared.bicep's linuxRunCommandParameters), passed the way the handler passes them, make
    install.sh download the wheel and the lock from blob storage with a managed-identity token,
    check both against the lock and the pinned sha256, and install the agent with the DCR's
    streams in its config. Run again with the same values, it reuses the virtualenv."""
    sha = hashlib.sha256(wheel.read_bytes()).hexdigest()
    params = _shared().call("linuxRunCommandParameters", _settings(
        packageUri=f"{blob.url}/se-forwarder/{wheel.name}", packageSha256=sha,
        lockUri=f"{blob.url}/se-forwarder/se_forwarder.lock",
        logsIngestionEndpoint=f"https://127.0.0.1:{free_port()}",  # nothing listens: warnings
        recordsStream="Custom-MyRecords"), "run-1")
    args, env = run_command_invocation(params)
    assert args == ["--from-env"]
    assert env["SE_INSTALL_PACKAGE_SHA256"] == sha and env["SE_INSTALL_PREREQUISITES"] == "yes"
    # the test's own options: a relocated install against the simulator (loopback URLs are not
    # blob host names, so the identity is asked for explicitly)
    r = inst.install(*args, "--imds-endpoint", sim.url, "--download-identity", "managed",
                     "--verify-timeout", "120", **env)
    assert r.returncode == 0, out(r)
    assert "downloaded with the managed identity" in (inst.opt / "install.log").read_text()
    assert [path for path, auth in blob.requests if auth] == [
        f"/se-forwarder/{wheel.name}", "/se-forwarder/se_forwarder.lock"]
    cfg = inst.config.read_text()
    assert 'records_stream = "Custom-MyRecords"' in cfg and 'client_id = ""' in cfg
    assert not list(inst.opt.glob("downloads.*")), "downloads are removed"
    # forceUpdateTag: the run command runs again, unchanged: nothing rebuilt
    r = inst.install(*args, "--imds-endpoint", sim.url, "--download-identity", "managed",
                     "--verify-timeout", "120", **dict(env, SE_INSTALL_RUN_ID="run-2"))
    assert r.returncode == 0 and "reusing versions/" in r.stdout, out(r)


def test_blob_the_identity_may_not_read(inst, sim, blob):
    r = inst.install("--package", f"{blob.url}/se-forwarder/secret.whl", "--stdout-sink",
                     "--download-identity", "managed", "--imds-endpoint", sim.url,
                     "--client-id", "", timeout=120)
    assert r.returncode == 11, out(r)
    assert "HTTP 403" in r.stderr and "Storage Blob Data Reader" in r.stderr, out(r)
    assert "Bearer" not in r.stdout + r.stderr + (inst.opt / "install.log").read_text()


def test_a_wheel_the_lock_does_not_pin_is_refused(inst, sim, wheel, lock, tmp_path):
    other = tmp_path / wheel.name
    other.write_bytes(wheel.read_bytes() + b"\0")  # same name, other bytes
    r = inst.install("--package", str(other), "--lock", str(lock), "--stdout-sink",
                     "--imds-endpoint", sim.url)
    assert r.returncode == 11 and "is not the one in the lock" in r.stderr, out(r)
    r = inst.install("--package", str(wheel), "--package-sha256", "0" * 64, "--stdout-sink",
                     "--imds-endpoint", sim.url)
    assert r.returncode == 11 and "not the expected" in r.stderr, out(r)
    assert list((inst.opt / "versions").iterdir()) == []


@pytest.mark.parametrize("tamper", ["hash", "missing"])
def test_lock_refuses_a_tampered_or_missing_dependency(inst, sim, wheel, lock, tmp_path, tamper):
    lines = lock.read_text().splitlines()
    dep = next(i for i, line in enumerate(lines) if line.startswith("pydantic=="))
    if tamper == "hash":
        lines[dep] = re.sub(r"sha256:[0-9a-f]{64}", "sha256:" + "1" * 64, lines[dep])
    else:
        del lines[dep]
    bad = tmp_path / "bad.lock"
    bad.write_text("\n".join(lines) + "\n")
    r = inst.install("--package", str(wheel), "--lock", str(bad), "--extras", "none",
                     "--stdout-sink", "--imds-endpoint", sim.url, timeout=300)
    assert r.returncode == 11, out(r)
    log = (inst.opt / "install.log").read_text()
    assert ("THESE PACKAGES DO NOT MATCH THE HASHES" in log if tamper == "hash"
            else "In --require-hashes mode" in log), log[-1500:]
    assert list((inst.opt / "versions").iterdir()) == []


def test_wait_delivery_then_a_failed_upgrade_rolls_back(inst, sim, wheel, lock, tmp_path):
    """One installation, three runs: --wait-delivery with a sink that cannot deliver (exit 15,
    its warning, the install kept) and with one that can (the virtualenv reused); then an
    upgrade that never becomes healthy, rolled back to the version and config that were."""
    inst.prefix.mkdir(parents=True)
    (inst.prefix / "blocked").write_text("not a directory")
    r = inst.install("--package", str(wheel), "--lock", str(lock), "--extras", "none",
                     "--imds-endpoint", sim.url,
                     "--file-sink", str(inst.prefix / "blocked" / "records.jsonl"),
                     "--verify-timeout", "120", "--wait-delivery", "8")
    assert r.returncode == 15, out(r)
    assert "not every sink delivered within 8s (delivered 0/1)" in r.stderr, out(r)
    assert "warning: sink file: cannot write" in r.stderr, out(r)
    assert (inst.opt / "current").is_symlink(), "the install itself stays in place"
    # a file sink delivers at once: the wait ends as soon as it has
    records = inst.state / "records.jsonl"
    r = inst.install("--package", str(wheel), "--lock", str(lock), "--extras", "none",
                     "--imds-endpoint", sim.url, "--file-sink", str(records),
                     "--verify-timeout", "120", "--wait-delivery", "90")
    assert r.returncode == 0, out(r)
    assert "every sink delivered (1/1)" in r.stdout and "reusing versions/" in r.stdout, out(r)
    good_target = os.readlink(inst.opt / "current")
    good_config = inst.config.read_text()

    # an "upgrade" whose config points the agent at an IMDS that never answers: the installer's
    # own IMDS check passes (the simulator), the agent never gets a good poll
    dead = f"http://127.0.0.1:{free_port()}"
    bad = tmp_path / "bad.toml"
    bad.write_text(f'[agent]\nstate_dir = "{inst.state}"\n\n[imds]\nendpoint = "{dead}"\n\n'
                   "[sinks.stdout]\n")
    r = inst.install("--package", str(wheel), "--lock", str(lock), "--extras", "none",
                     "--reinstall", "--config-file", str(bad), "--imds-endpoint", sim.url,
                     "--verify-timeout", "8")
    assert r.returncode == 13, out(r)
    assert "rolling back" in r.stderr and "did not become healthy" in r.stderr
    assert os.readlink(inst.opt / "current") == good_target
    assert inst.config.read_text() == good_config
    assert len(list((inst.opt / "versions").iterdir())) == 1, "the failed version is removed"
    # the previous version runs again and becomes healthy
    doc = wait_healthy(inst)
    assert doc["status"]["pid"] == inst.agent_pid()


# -- secrets in output, concurrent runs ---------------------------------------------------------

def test_package_url_query_string_is_never_printed_or_logged(inst, sim):
    """A --package URL may carry a SAS token: neither the output nor install.log may show it."""
    dead = f"http://127.0.0.1:{free_port()}"
    url = f"{dead}/se_forwarder-0.1.0-py3-none-any.whl?sv=2024&sig=TOPSECRETSIG"
    r = inst.install("--package", url, "--extras", "none", "--stdout-sink",
                     "--imds-endpoint", sim.url, PIP_RETRIES="0", PIP_TIMEOUT="3", timeout=180)
    assert r.returncode == 11, out(r)
    assert "TOPSECRETSIG" not in r.stdout + r.stderr, out(r)
    assert f"{dead}/se_forwarder-0.1.0-py3-none-any.whl?***" in r.stdout + r.stderr, out(r)
    log = (inst.opt / "install.log").read_text()
    assert "TOPSECRETSIG" not in log and "?***" in log, log[-2000:]
    assert list((inst.opt / "versions").iterdir()) == [], "failed virtualenv left behind"


def test_concurrent_runs_are_serialized(inst):
    """A second install.sh waits for the lock (cloud-init retries, extension re-runs)."""
    import fcntl

    lock_dir = inst.prefix / "run/se-forwarder-install"
    r = inst.install("--uninstall", SE_FORWARDER_INSTALL_LOCK_WAIT="1", timeout=60)
    assert r.returncode == 0, out(r)
    assert stat.S_IMODE(lock_dir.stat().st_mode) == 0o700  # not /run/lock, nobody else writes
    assert not (inst.prefix / "run/lock").exists()
    with open(lock_dir / "lock") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # as a running install.sh holds it
        r = inst.install("--uninstall", SE_FORWARDER_INSTALL_LOCK_WAIT="1", timeout=60)
        assert r.returncode == 1 and "another install.sh is still running" in r.stderr, out(r)
    r = inst.install("--uninstall", SE_FORWARDER_INSTALL_LOCK_WAIT="1", timeout=60)
    assert r.returncode == 0, out(r)


def test_the_install_lock_never_follows_a_symbolic_link(inst, tmp_path):
    """A symlink where the lock goes (planted before the directory was made root-only) makes
    install.sh stop: the file it points at is neither created nor truncated."""
    victim = tmp_path / "victim"
    victim.write_text("precious")
    lock_dir = inst.prefix / "run/se-forwarder-install"
    lock_dir.mkdir(parents=True)
    (lock_dir / "lock").symlink_to(victim)
    r = inst.install("--uninstall", timeout=60)
    assert r.returncode == 1 and "is a symbolic link" in r.stderr, out(r)
    assert victim.read_text() == "precious"
    (lock_dir / "lock").unlink()
    lock_dir.rmdir()
    lock_dir.symlink_to(tmp_path)  # the directory itself
    r = inst.install("--uninstall", timeout=60)
    assert r.returncode == 1 and "symbolic link" in r.stderr, out(r)
    assert not (tmp_path / "lock").exists()


def test_wait_delivery_needs_a_number(inst):
    r = inst.install("--version", "0.1.0", "--stdout-sink", "--wait-delivery", "soon")
    assert r.returncode == 2 and "--wait-delivery must be a whole number" in r.stderr, out(r)
