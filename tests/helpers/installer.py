"""infra/scripts/install.sh as the tests run it: the package builds (one wheel, one offline bundle
and its wheelhouse per session), an install prefix the service's unprivileged user can reach, a
stand-in systemctl (tests/helpers/fake_systemctl.py) and Azure Storage as the installer meets it.
"""

from __future__ import annotations

import contextlib
import http.server
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tarfile
import tempfile
import threading
from functools import cache
from pathlib import Path

from helpers import REPO

INSTALL_SH = REPO / "infra" / "scripts" / "install.sh"
LOCK_TOOL = REPO / "infra" / "scripts" / "lock-dependencies.py"
BUNDLE_TOOL = REPO / "infra" / "scripts" / "build-bundle.py"
FAKE_SYSTEMCTL = Path(__file__).with_name("fake_systemctl.py")
DEAD_INDEX = "http://127.0.0.1:9/simple"  # nothing listens on the discard port


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(cmd: list[str], timeout: float = 600) -> subprocess.CompletedProcess:
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    assert r.returncode == 0, f"{cmd}\n{r.stdout}\n{r.stderr}"
    return r


def build_wheel(work: Path) -> Path:
    """A wheel of this repository, built from a clean copy (the tree is not written to)."""
    proj = work / "proj"
    proj.mkdir()
    shutil.copy(REPO / "pyproject.toml", proj)
    for extra in ("README.md", "LICENSE"):
        if (REPO / extra).exists():
            shutil.copy(REPO / extra, proj)
    shutil.copytree(
        REPO / "src", proj / "src", ignore=shutil.ignore_patterns("*.egg-info", "__pycache__")
    )
    run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "-q",
            "-w",
            str(work / "dist"),
            str(proj),
        ]
    )
    (wheel,) = (work / "dist").glob("se_forwarder-*.whl")
    return wheel


def build_bundle(wheel: Path, out: Path, extras: str = "azure,webhook") -> Path:
    """The offline bundle for this interpreter and machine (build-bundle.py --current): the
    only step that reads a package index."""
    run(
        [
            sys.executable,
            str(BUNDLE_TOOL),
            str(wheel),
            "--current",
            "--extras",
            extras,
            "-o",
            str(out),
        ]
    )
    return out


def unpack(bundle: Path, dest: Path) -> Path:
    with tarfile.open(bundle) as tar:
        tar.extractall(dest, filter="data")
    return dest


def write_lock(wheel: Path, extras: str, out: Path, wheelhouse: Path) -> Path:
    """The wheel's dependency lock (lock-dependencies.py), resolved from a local wheelhouse."""
    run(
        [
            sys.executable,
            str(LOCK_TOOL),
            str(wheel),
            "--extras",
            extras,
            "-o",
            str(out),
            "--pip-arg=--no-index",
            f"--pip-arg=--find-links={wheelhouse}",
        ]
    )
    return out


def runnable_by_others(path: str) -> bool:
    """Whether an unprivileged user can run ``path`` (its real file and every directory above)."""
    real = Path(os.path.realpath(path))
    if not real.stat().st_mode & stat.S_IXOTH:
        return False
    return all(p.stat().st_mode & stat.S_IXOTH for p in real.parents)


@cache
def system_python() -> str:
    """The interpreter the installs use: as on a VM, one the service's unprivileged user can
    run (the distribution's python3), of this interpreter's version (the bundle is built for
    it); else this interpreter (the agent then runs as the caller: see fake_systemctl.py)."""
    base = getattr(sys, "_base_executable", sys.executable)
    candidates = [shutil.which("python3") or "", "/usr/bin/python3", base, sys.executable]
    version = f"{sys.version_info[0]}.{sys.version_info[1]}"
    for c in candidates:
        if not c or not os.path.exists(c) or not runnable_by_others(c):
            continue
        r = subprocess.run(
            [c, "-c", "import venv, ensurepip, sys; print('%d.%d' % sys.version_info[:2])"],
            capture_output=True,
            text=True,
            check=False,
        )
        if r.returncode == 0 and r.stdout.strip() == version:
            return c
    return sys.executable


def reachable_dir() -> Path:
    """A fresh directory every user can traverse: the agent runs as an unprivileged user and
    pytest's own temporary directories are closed to it (0700)."""
    d = Path(tempfile.mkdtemp(prefix="se-install-", dir="/tmp"))
    d.chmod(0o755)
    return d


class Env:
    """One install prefix, its stand-in systemctl and the environment install.sh runs in. pip
    never reaches an index: packages come from the wheelhouse (a lock's) or a bundle."""

    def __init__(self, base: Path, wheelhouse: Path | None = None):
        self.base = base
        self.prefix = base / "root"
        self.run_dir = base / "run"
        self.fake = base / "systemctl"
        self.fake.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{FAKE_SYSTEMCTL}" "$@"\n')
        self.fake.chmod(0o755)
        self.env = dict(os.environ)
        self.env.update(
            SE_FORWARDER_SYSTEMCTL=str(self.fake),
            FAKE_UNIT_DIR=str(self.prefix / "etc/systemd/system"),
            FAKE_RUN_DIR=str(self.run_dir),
            PIP_RETRIES="0",
            PIP_TIMEOUT="5",
        )
        if wheelhouse is not None:
            self.env.update(PIP_NO_INDEX="1", PIP_FIND_LINKS=str(wheelhouse))
        self.env.pop("VIRTUAL_ENV", None)

    @property
    def state(self) -> Path:
        return self.prefix / "var/lib/se-forwarder"

    @property
    def opt(self) -> Path:
        return self.prefix / "opt/se-forwarder"

    @property
    def etc(self) -> Path:
        return self.prefix / "etc/se-forwarder"

    @property
    def config(self) -> Path:
        return self.etc / "config.toml"

    def install(
        self,
        *args: str,
        timeout: float = 600,
        umask: int | None = None,
        python: str | None = "",
        **extra_env,
    ) -> subprocess.CompletedProcess:
        """install.sh --prefix --python (system_python() unless given; ``None``: the installer
        looks for one itself)."""
        python = system_python() if python == "" else python
        env = dict(self.env, **extra_env)
        argv = ["bash", str(INSTALL_SH), "--prefix", str(self.prefix)]
        if python is not None:
            argv += ["--python", python]
        return subprocess.run(
            [*argv, *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
            check=False,
            umask=-1 if umask is None else umask,
        )

    def agent_pid(self) -> int | None:
        try:
            return int((self.run_dir / "agent.pid").read_text())
        except (FileNotFoundError, ValueError):
            return None

    def kill_agent(self) -> None:
        """The services this test started (the agent's and any other unit's), by their pids."""
        pids = [self.agent_pid()]
        for f in self.run_dir.glob("*.service.pid"):
            with contextlib.suppress(ValueError):
                pids.append(int(f.read_text()))
        for pid in pids:
            if pid:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)

    def status(self, *args: str) -> subprocess.CompletedProcess:
        exe = self.prefix / "usr/local/bin/se-forwarder"
        return subprocess.run(
            [str(exe), "status", "--state-dir", str(self.state), *args],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )


class BlobStandIn:
    """Blob storage as the installer meets it: GET of a blob with a Bearer token for
    https://storage.azure.com (from the IMDS simulator's token endpoint) and x-ms-version;
    401 without a token, 403 for a blob the identity may not read, 404 for none."""

    def __init__(self, authority, blobs: dict[str, bytes], forbidden: set[str] = frozenset()):
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
