"""Azurite, the Azure Storage emulator (npm package ``azurite``, installed into
``tools/azurite`` by ``npm ci --prefix tools/azurite``), run as the collector's checkpoint store.

Started on a free port with its own temporary directory, over HTTPS (the generated TLS of the
stand-ins) with ``--oauth basic``, so the product's own path is used: a managed-identity token
(from the IMDS simulator) as a bearer token to the account URL. Azurite's basic OAuth checks a
token's issuer, audience (``https://storage.azure.com``) and lifetime; it checks neither the
signature nor the role (Storage Blob Data Contributor): a wrong role is not caught here.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path
from typing import Self

from .tls import TlsFiles, generate

ACCOUNT = "devstoreaccount1"  # Azurite's one account (path-style URL on an IP address)
_REPO = Path(__file__).resolve().parents[4]


def executable() -> Path | None:
    """``azurite-blob`` from tools/azurite (or ``SE_FORWARDER_AZURITE``), None when absent."""
    env = os.environ.get("SE_FORWARDER_AZURITE")
    path = (
        Path(env) if env else _REPO / "tools" / "azurite" / "node_modules" / ".bin" / "azurite-blob"
    )
    return path if path.exists() else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class Azurite:
    def __init__(self, directory: Path, tls: TlsFiles | None = None) -> None:
        self.dir = Path(directory)
        self.tls = tls or generate(self.dir / "tls")
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def account_url(self) -> str:
        return f"https://127.0.0.1:{self.port}/{ACCOUNT}"

    @property
    def ca_cert(self) -> Path:
        return self.tls.ca_cert

    def start(self, timeout: float = 30.0) -> Self:
        exe = executable()
        if exe is None or shutil.which("node") is None:
            raise RuntimeError(
                "Azurite is not installed: run `npm ci --prefix tools/azurite` "
                "(Node 18+), as scripts/test.sh does"
            )
        self.port = _free_port()
        data = self.dir / "data"
        data.mkdir(parents=True, exist_ok=True)
        log = open(self.dir / "azurite.log", "ab")  # noqa: SIM115 - kept open for the process
        self.proc = subprocess.Popen(
            [
                str(exe),
                "--blobHost",
                "127.0.0.1",
                "--blobPort",
                str(self.port),
                "--location",
                str(data),
                "--cert",
                str(self.tls.cert),
                "--key",
                str(self.tls.key),
                "--oauth",
                "basic",
                "--silent",
                "--disableTelemetry",
                "--skipApiVersionCheck",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"Azurite exited: {(self.dir / 'azurite.log').read_text()[-500:]}"
                )
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return self
            except OSError:
                time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"Azurite did not listen on {self.port} within {timeout} s")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.proc = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
