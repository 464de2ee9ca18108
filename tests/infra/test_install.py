"""infra/scripts/install.sh, run for real in an isolated prefix.

What is real: bash runs the installer; it finds Python, checks IMDS (the simulator) with proxies
disabled, builds a virtualenv, pip-installs a wheel built from this repository (its dependencies
come from the package index), writes and validates the config, switches the `current` symlink,
writes the systemd unit, and verifies health with `se-forwarder status`. The installed agent runs
against the IMDS simulator and is stopped with SIGTERM.

What is not: systemd is not PID 1 here, so SE_FORWARDER_SYSTEMCTL points at a small fake
`systemctl` (below) that starts the unit's ExecStart= as a background process with its
Environment= and WorkingDirectory=, and stops it with KillSignal= waiting TimeoutStopSec=. The
sandboxing directives are checked statically in test_systemd.py.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from helpers import REPO

pytestmark = pytest.mark.e2e

INSTALL_SH = REPO / "infra" / "scripts" / "install.sh"
LOCK_TOOL = REPO / "infra" / "scripts" / "lock-dependencies.py"
DEAD_INDEX = "http://127.0.0.1:9/simple"  # nothing listens on the discard port

FAKE_SYSTEMCTL = textwrap.dedent(
    r'''
    #!PYTHON
    """A stand-in for systemctl: enough of it for install.sh, for one unit."""
    import os, shlex, signal, subprocess, sys, time
    from pathlib import Path

    unit_dir = Path(os.environ["FAKE_UNIT_DIR"])
    run = Path(os.environ["FAKE_RUN_DIR"])
    run.mkdir(parents=True, exist_ok=True)
    with open(run / "calls.log", "a") as f:
        f.write(" ".join(sys.argv[1:]) + "\n")
    words = [a for a in sys.argv[1:] if not a.startswith("-")]
    flags = [a for a in sys.argv[1:] if a.startswith("-")]
    cmd = words[0]
    pidfile = run / "agent.pid"

    def unit():
        out = {}
        for line in (unit_dir / "se-forwarder.service").read_text().splitlines():
            line = line.strip()
            if line and not line.startswith(("#", "[")) and "=" in line:
                k, v = line.split("=", 1)
                out.setdefault(k, []).append(v)
        return out

    def seconds(v):
        return float(v.rstrip("s"))

    def alive(pid):
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, IndexError):
            return False
        return state not in ("Z", "X")

    def current_pid():
        try:
            pid = int(pidfile.read_text())
        except (FileNotFoundError, ValueError):
            return None
        return pid if alive(pid) else None

    def stop():
        pid = current_pid()
        if pid is None:
            return
        u = unit()
        os.kill(pid, getattr(signal, u.get("KillSignal", ["SIGTERM"])[0]))
        limit = seconds(u.get("TimeoutStopSec", ["90"])[0])
        t0 = time.monotonic()
        while alive(pid) and time.monotonic() - t0 < limit:
            time.sleep(0.05)
        with open(run / "stops.log", "a") as f:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
                f.write(f"killed {pid}\n")
            else:
                f.write(f"graceful {pid} {time.monotonic() - t0:.2f}\n")
        pidfile.unlink()

    def start():
        if current_pid() is not None:
            return
        u = unit()
        env = dict(os.environ)
        for item in u.get("Environment", []):
            for kv in shlex.split(item):
                k, v = kv.split("=", 1)
                env[k] = v
        argv = shlex.split(u["ExecStart"][0])
        cwd = u.get("WorkingDirectory", [None])[0]
        out = open(run / "agent.log", "ab")
        p = subprocess.Popen(argv, env=env, cwd=cwd, stdout=out, stderr=subprocess.STDOUT,
                             stdin=subprocess.DEVNULL, start_new_session=True)
        pidfile.write_text(str(p.pid))

    if cmd in ("daemon-reload",):
        pass
    elif cmd == "enable":
        (run / "enabled").touch()
    elif cmd == "disable":
        (run / "enabled").unlink(missing_ok=True)
        if "--now" in flags:
            stop()
    elif cmd == "start":
        start()
    elif cmd == "restart":
        stop()
        start()
    elif cmd == "stop":
        stop()
    elif cmd == "is-active":
        sys.exit(0 if current_pid() else 3)
    else:
        print(f"fake systemctl: unsupported {cmd}", file=sys.stderr)
        sys.exit(1)
    '''
).lstrip()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """A wheel of this repository, built from a clean copy (the tree is not written to)."""
    work = tmp_path_factory.mktemp("wheel")
    proj = work / "proj"
    proj.mkdir()
    shutil.copy(REPO / "pyproject.toml", proj)
    for extra in ("README.md", "LICENSE"):
        if (REPO / extra).exists():
            shutil.copy(REPO / extra, proj)
    shutil.copytree(REPO / "src", proj / "src",
                    ignore=shutil.ignore_patterns("*.egg-info", "__pycache__"))
    out = work / "dist"
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out),
                        str(proj)], capture_output=True, text=True, timeout=300, check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    wheels = list(out.glob("se_forwarder-*.whl"))
    assert len(wheels) == 1
    return wheels[0]


def write_lock(wheel: Path, extras: str, out: Path) -> Path:
    """The wheel's dependency lock, written by lock-dependencies.py from this machine's package
    index: pinned versions and the sha256 of every file."""
    r = subprocess.run([sys.executable, str(LOCK_TOOL), str(wheel), "--extras", extras, "-o",
                        str(out)], capture_output=True, text=True, timeout=300, check=False)
    assert r.returncode == 0, r.stderr
    return out


@pytest.fixture(scope="module")
def lock(wheel, tmp_path_factory) -> Path:
    return write_lock(wheel, "none", tmp_path_factory.mktemp("lock") / "se_forwarder.lock")


@pytest.fixture(scope="module")
def azure_lock(wheel, tmp_path_factory) -> Path:
    """With the azure extra: what the Run Command and cloud-init install."""
    return write_lock(wheel, "azure", tmp_path_factory.mktemp("lock") / "se_forwarder-azure.lock")


class BlobStandIn:
    """Blob storage as the installer meets it: GET of a blob with a Bearer token for
    https://storage.azure.com (from the IMDS simulator's token endpoint) and x-ms-version;
    401 without a token, 403 for a blob the identity may not read, 404 for none."""

    def __init__(self, authority, blobs: dict[str, bytes], forbidden: set[str] = frozenset()):
        import http.server
        import threading

        from se_forwarder_testbed.standins.tokens import InvalidToken

        stand_in = self
        self.requests: list[tuple[str, str | None]] = []

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                auth = self.headers.get("Authorization", "")
                stand_in.requests.append((self.path, auth or None))
                if not auth.startswith("Bearer ") or not self.headers.get("x-ms-version"):
                    return self._answer(401, b"NoAuthenticationInformation")
                try:
                    authority.verify(auth[7:], "https://storage.azure.com")
                except InvalidToken as exc:  # the stand-in's own refusal, as Azure's 401
                    return self._answer(401, str(exc).encode())
                if self.path in forbidden:
                    return self._answer(403, b"AuthorizationPermissionMismatch")
                if self.path not in blobs:
                    return self._answer(404, b"BlobNotFound")
                return self._answer(200, blobs[self.path])

            def _answer(self, code, body):
                self.send_response(code)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def blob(sim, wheel, azure_lock):
    b = BlobStandIn(sim.token_authority, {
        f"/se-forwarder/{wheel.name}": wheel.read_bytes(),
        "/se-forwarder/se_forwarder.lock": azure_lock.read_bytes(),
    }, forbidden={"/se-forwarder/secret.whl"})
    yield b
    b.close()


@pytest.fixture
def sim():
    from se_forwarder_testbed.simulator import Simulator

    s = Simulator("live-migration-freeze", first_call_delay=0.0, speed=20.0)
    s.start()
    yield s
    s.stop()


@pytest.fixture(scope="module")
def pip_cache(tmp_path_factory) -> Path:
    """One pip cache for this module's installs (not the user's)."""
    return tmp_path_factory.mktemp("pip-cache")


class Env:
    def __init__(self, tmp: Path, pip_cache: Path):
        self.prefix = tmp / "root"
        self.run_dir = tmp / "run"
        self.fake = tmp / "systemctl"
        self.fake.write_text(FAKE_SYSTEMCTL.replace("#!PYTHON", "#!" + sys.executable, 1))
        self.fake.chmod(0o755)
        self.env = dict(os.environ)
        self.env.update(
            SE_FORWARDER_SYSTEMCTL=str(self.fake),
            FAKE_UNIT_DIR=str(self.prefix / "etc/systemd/system"),
            FAKE_RUN_DIR=str(self.run_dir),
            PIP_RETRIES="1",
            PIP_TIMEOUT="20",
            PIP_CACHE_DIR=str(pip_cache),
        )
        self.env.pop("VIRTUAL_ENV", None)

    @property
    def state(self) -> Path:
        return self.prefix / "var/lib/se-forwarder"

    @property
    def opt(self) -> Path:
        return self.prefix / "opt/se-forwarder"

    @property
    def config(self) -> Path:
        return self.prefix / "etc/se-forwarder/config.toml"

    def install(self, *args: str, timeout: float = 600, **extra_env) -> subprocess.CompletedProcess:
        env = dict(self.env, **extra_env)
        # this interpreter by default (a later --python in args wins): the venv tool is known here
        argv = ["bash", str(INSTALL_SH), "--prefix", str(self.prefix), "--python", sys.executable]
        return subprocess.run([*argv, *args],
                              capture_output=True, text=True, timeout=timeout, env=env, check=False)

    def agent_pid(self) -> int | None:
        try:
            return int((self.run_dir / "agent.pid").read_text())
        except (FileNotFoundError, ValueError):
            return None

    def kill_agent(self) -> None:
        pid = self.agent_pid()
        if pid:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def status(self, *args: str) -> subprocess.CompletedProcess:
        exe = self.prefix / "usr/local/bin/se-forwarder"
        return subprocess.run([str(exe), "status", "--state-dir", str(self.state), *args],
                              capture_output=True, text=True, timeout=60, check=False)


@pytest.fixture
def inst(tmp_path, pip_cache):
    e = Env(tmp_path, pip_cache)
    yield e
    e.kill_agent()  # only the agent this test started, by its pid


def out(r: subprocess.CompletedProcess) -> str:
    return f"exit {r.returncode}\n--- stdout\n{r.stdout}\n--- stderr\n{r.stderr}"


# -- failures: clear message, non-zero exit, nothing half-installed ---------------------------

def test_usage_errors(inst):
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
    assert not inst.opt.exists()


def test_version_never_comes_from_an_index_nobody_named(inst):
    """se-forwarder is not on the public index: a name anyone can register there is never
    installed as root."""
    r = inst.install("--version", "0.1.0", "--stdout-sink")
    assert r.returncode == 2 and "--version needs --index-url" in r.stderr, out(r)
    assert not inst.opt.exists()


def test_no_python(inst, tmp_path):
    r = inst.install("--version", "0.1.0", "--index-url", DEAD_INDEX, "--stdout-sink",
                     "--python", str(tmp_path / "nope"))
    assert r.returncode == 10 and "Python not found" in r.stderr, out(r)
    old = tmp_path / "python-old"
    old.write_text("#!/bin/sh\necho 'Python 2.7.18' >&2\nexit 1\n")
    old.chmod(0o755)
    r = inst.install("--version", "0.1.0", "--index-url", DEAD_INDEX, "--stdout-sink",
                     "--python", str(old))
    assert r.returncode == 10 and "needs Python 3.11+" in r.stderr, out(r)
    assert not inst.opt.exists()


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


# -- the real thing ---------------------------------------------------------------------------

def read_status(state: Path) -> dict:
    return json.loads((state / "status.json").read_text())


def test_install_upgrade_stop_uninstall(inst, sim, wheel, lock):
    records = inst.state / "records.jsonl"
    r = inst.install("--package", str(wheel), "--lock", str(lock), "--extras", "none",
                     "--file-sink", str(records),
                     "--imds-endpoint", sim.url, "--client-id", "00000000-0000-0000-0000-000000000001",
                     "--verify-timeout", "120")
    assert r.returncode == 0, out(r)
    assert "installed and polling" in r.stdout
    assert "(hash-checked)" in r.stdout and "not pinned" not in r.stderr
    assert "HEALTHY" in r.stdout  # the status output the installer waited for

    # layout
    current = inst.opt / "current"
    assert current.is_symlink() and os.readlink(current).startswith("versions/")
    first_version_dir = current.resolve()
    unit = (inst.prefix / "etc/systemd/system/se-forwarder.service").read_text()
    assert f"ExecStart={inst.opt}/current/bin/se-forwarder run --config {inst.config}" in unit
    assert "DynamicUser=yes" in unit
    cfg = inst.config.read_text()
    assert f'endpoint = "{sim.url}"' in cfg and f'state_dir = "{inst.state}"' in cfg
    assert f'path = "{records}"' in cfg
    assert (inst.run_dir / "enabled").exists()

    # the agent is really polling the simulator, and `se-forwarder status` says so
    st = inst.status("--json")
    assert st.returncode == 0, out(st)
    doc = json.loads(st.stdout)
    assert doc["healthy"] and doc["status"]["polls"] >= 1
    assert doc["status"]["pid"] == inst.agent_pid()
    polls_before = doc["status"]["polls"]
    # ... and it tracked the simulator's event into the file sink
    event_id = "C7061BAC-AFDC-4513-B24B-AA5F13A16123"
    assert [e["EventId"] for e in doc["status"]["open_events"]] == [event_id]
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not (records.exists() and event_id in records.read_text()):
        time.sleep(0.5)
    first = json.loads(records.read_text().splitlines()[0])
    assert first["EventId"] == event_id and first["Phase"] == "FirstSeen"

    # the state directory survives an upgrade; the agent is restarted on the new version
    marker = inst.state / "keep-me"
    marker.write_text("x")
    pid_before = inst.agent_pid()
    cfg_before = inst.config.read_text()
    r = inst.install("--package", str(wheel), "--extras", "none", "--imds-endpoint", sim.url,
                     "--verify-timeout", "120")
    assert r.returncode == 0, out(r)
    assert "keeping the existing configuration" in r.stdout
    assert inst.config.read_text() == cfg_before
    assert marker.exists() and (inst.state / "status.json").exists()
    assert inst.agent_pid() != pid_before
    assert current.resolve() != first_version_dir
    assert len(list((inst.opt / "versions").iterdir())) <= 2
    stops = (inst.run_dir / "stops.log").read_text().split("\n")
    assert stops[0].startswith(f"graceful {pid_before}"), stops
    st = json.loads(inst.status("--json").stdout)
    assert st["healthy"] and st["status"]["pid"] == inst.agent_pid()

    # graceful stop on SIGTERM within TimeoutStopSec: status.json says stopped, status fails
    pid = inst.agent_pid()
    subprocess.run([str(inst.fake), "stop", "se-forwarder.service"], env=inst.env, check=True,
                   timeout=120)
    last = (inst.run_dir / "stops.log").read_text().strip().splitlines()[-1]
    assert last.startswith(f"graceful {pid}"), last
    assert read_status(inst.state)["stopped"] is True
    st = inst.status()
    assert st.returncode == 1 and "STOPPED" in st.stdout, out(st)
    assert read_status(inst.state)["polls"] >= polls_before

    # uninstall keeps config and state; --purge removes them
    r = inst.install("--uninstall")
    assert r.returncode == 0, out(r)
    assert not inst.opt.exists() and not (inst.prefix / "usr/local/bin/se-forwarder").exists()
    assert not (inst.prefix / "etc/systemd/system/se-forwarder.service").exists()
    assert not (inst.run_dir / "enabled").exists()
    assert marker.exists() and inst.config.exists()
    r = inst.install("--uninstall", "--purge")
    assert r.returncode == 0, out(r)
    assert not inst.state.exists() and not inst.config.parent.exists()


# -- the installers as Azure calls them (Run Command, Custom Script extension) ---------------------

INSTALL_PS1 = REPO / "infra" / "scripts" / "install.ps1"
SHARED_BICEP = REPO / "infra" / "modules" / "shared.bicep"


def _settings(**over) -> dict:
    base = {"packageUri": "https://a.blob.core.windows.net/c/se_forwarder-0.1.0-py3-none-any.whl",
            "lockUri": "https://a.blob.core.windows.net/c/se_forwarder-0.1.0.lock",
            "logsIngestionEndpoint": "https://x.ingest.monitor.azure.com", "dcrImmutableId": "dcr-0123",
            "recordsStream": "Custom-ScheduledEvents", "heartbeatsStream": "Custom-ScheduledEventsAgent",
            "clientId": ""}
    return {**base, **over}


def _shared():
    from bicep_eval import Evaluator

    return Evaluator(SHARED_BICEP)


def test_extension_command_for_linux_is_accepted_by_install_sh():
    import shlex

    command = _shared().call("linuxInstallCommand", "install.sh", _settings())
    argv = shlex.split(command)
    assert argv[:2] == ["bash", "install.sh"] and "--client-id" in argv
    # every option parses (an unknown one would exit 2 before --help is reached)
    r = subprocess.run(["bash", str(INSTALL_SH), *argv[2:], "--help"], capture_output=True,
                       text=True, timeout=30, check=False)
    assert r.returncode == 0 and "Usage: install.sh" in r.stdout, out(r)


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


def test_run_command_installs_from_blob_storage_with_the_managed_identity(inst, sim, wheel, blob):
    """The Run Command path end to end: the parameters vm-agent.bicep gives the run command
    (shared.bicep's linuxRunCommandParameters), passed the way the handler passes them, make
    install.sh download the wheel and the lock from blob storage with a managed-identity token,
    check both, and install the agent with the DCR's streams in its config."""
    params = _shared().call("linuxRunCommandParameters", _settings(
        packageUri=f"{blob.url}/se-forwarder/{wheel.name}",
        lockUri=f"{blob.url}/se-forwarder/se_forwarder.lock",
        logsIngestionEndpoint=f"https://127.0.0.1:{free_port()}",  # nothing listens: warnings
        recordsStream="Custom-MyRecords"), "run-1")
    args, env = run_command_invocation(params)
    assert args == ["--from-env"]
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


def test_failed_upgrade_rolls_back(inst, sim, wheel, tmp_path):
    r = inst.install("--package", str(wheel), "--extras", "none", "--stdout-sink",
                     "--imds-endpoint", sim.url, "--verify-timeout", "120")
    assert r.returncode == 0, out(r)
    good_target = os.readlink(inst.opt / "current")
    good_config = inst.config.read_text()

    # an "upgrade" whose config points the agent at an IMDS that never answers: the installer's
    # own IMDS check passes (the simulator), the agent never gets a good poll
    dead = f"http://127.0.0.1:{free_port()}"
    bad = tmp_path / "bad.toml"
    bad.write_text(f'[agent]\nstate_dir = "{inst.state}"\n\n[imds]\nendpoint = "{dead}"\n\n'
                   "[sinks.stdout]\n")
    r = inst.install("--package", str(wheel), "--extras", "none", "--config-file", str(bad),
                     "--imds-endpoint", sim.url, "--verify-timeout", "8")
    assert r.returncode == 13, out(r)
    assert "rolling back" in r.stderr and "did not become healthy" in r.stderr
    assert os.readlink(inst.opt / "current") == good_target
    assert inst.config.read_text() == good_config
    assert len(list((inst.opt / "versions").iterdir())) == 1, "the failed version is removed"
    # the previous version runs again and becomes healthy
    deadline = time.monotonic() + 60
    while True:
        st = inst.status("--json")
        if st.returncode == 0 or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert st.returncode == 0, out(st)
    assert json.loads(st.stdout)["status"]["pid"] == inst.agent_pid()


# -- review findings: secrets in output, concurrent runs, Windows installer ------------------------

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

    lock = inst.prefix / "run/lock/se-forwarder-install.lock"
    lock.parent.mkdir(parents=True)
    with open(lock, "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # as a running install.sh holds it
        r = inst.install("--uninstall", SE_FORWARDER_INSTALL_LOCK_WAIT="1", timeout=60)
        assert r.returncode == 1 and "another install.sh is still running" in r.stderr, out(r)
    r = inst.install("--uninstall", SE_FORWARDER_INSTALL_LOCK_WAIT="1", timeout=60)
    assert r.returncode == 0, out(r)


def test_wait_delivery_needs_a_number(inst):
    r = inst.install("--version", "0.1.0", "--stdout-sink", "--wait-delivery", "soon")
    assert r.returncode == 2 and "--wait-delivery must be a whole number" in r.stderr, out(r)


def test_install_ps1_checks_every_sc_exe_call():
    text = INSTALL_PS1.read_text()
    calls = [line for line in text.splitlines() if "sc.exe" in line and not line.lstrip().startswith("#")]
    bare = [c for c in calls if re.search(r"&\s*sc\.exe", c) and "@args" not in c]
    assert bare == [], f"sc.exe calls whose exit code is not checked: {bare}"
    body = re.search(r"function Invoke-Sc.*?\n}", text, re.DOTALL).group(0)
    assert "$LASTEXITCODE -ne 0" in body and "Fail 14" in body
    assert len(re.findall(r"Invoke-Sc '", text)) >= 5


def test_install_ps1_rollback_restores_the_previous_config():
    text = INSTALL_PS1.read_text()
    assert re.search(r"Copy-Item -Force \$ConfigPath \$previousConfig", text)
    rollback = text[text.index("rolling back"):text.index("Fail 13")]
    assert "Move-Item -Force $previousConfig $ConfigPath" in rollback


def test_install_ps1_refuses_a_per_user_python():
    text = INSTALL_PS1.read_text()
    assert "sys.base_prefix" in text and "--scope machine" in text
    check = text[text.index("$usersRoot"):text.index("Say \"using $Python")]
    assert "Fail 10" in check


def test_wait_delivery(inst, sim, wheel):
    # a sink that cannot deliver (its directory is a file): exit 15 after the wait, with the
    # sink's warning
    inst.prefix.mkdir(parents=True)
    (inst.prefix / "blocked").write_text("not a directory")
    r = inst.install("--package", str(wheel), "--extras", "none", "--imds-endpoint", sim.url,
                     "--file-sink", str(inst.prefix / "blocked" / "records.jsonl"),
                     "--verify-timeout", "120", "--wait-delivery", "8")
    assert r.returncode == 15, out(r)
    assert "not every sink delivered within 8s (delivered 0/1)" in r.stderr, out(r)
    assert "warning: sink file: cannot write" in r.stderr, out(r)
    assert (inst.opt / "current").is_symlink(), "the install itself stays in place"
    # a file sink delivers at once: the wait ends as soon as it has
    records = inst.state / "records.jsonl"
    r = inst.install("--package", str(wheel), "--extras", "none", "--imds-endpoint", sim.url,
                     "--file-sink", str(records), "--verify-timeout", "120", "--wait-delivery", "90")
    assert r.returncode == 0, out(r)
    assert "every sink delivered (1/1)" in r.stdout, out(r)


def test_install_ps1_registers_a_module_that_exists():
    """The service's binPath names the module the SCM starts; a rename must not leave it dangling."""
    import importlib.util

    modules = re.findall(r"python\.exe`\"\s+-m\s+([\w.]+)", INSTALL_PS1.read_text())
    assert modules, "install.ps1 no longer registers `python.exe -m <module>`"
    for name in modules:
        assert importlib.util.find_spec(name) is not None, name
