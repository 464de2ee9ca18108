"""The recipes of docs/troubleshooting.md ("Trying the sinks on one machine") run as written: the
commands and the config of the page (paths and ports moved into the test's own), the real agent,
its managed identity pointed at the simulator by ``[identity] token_endpoint``."""

from __future__ import annotations

import re
import shlex
import socket
import ssl
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

pytestmark = pytest.mark.e2e

PAGE = Path(__file__).resolve().parents[2] / "docs" / "troubleshooting.md"


def section() -> str:
    text = PAGE.read_text("utf-8")
    return text[text.index("## Trying the sinks on one machine") : text.index("## Proxy settings")]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.process
def test_the_local_recipes_deliver_to_the_stand_ins(tmp_path):
    ports = {p: str(free_port()) for p in ("8080", "8443", "8444")}

    def moved(text: str) -> str:
        text = text.replace("/tmp/se-try", str(tmp_path))
        return re.sub(r"\b(8080|8443|8444)\b", lambda m: ports[m.group(1)], text)

    body = moved(section())
    commands = [
        shlex.split(line)
        for block in re.findall(r"```sh\n(.*?)```", body, re.DOTALL)
        for line in block.splitlines()
        if line.startswith("se-forwarder ")
    ]
    webhook = re.search(r"`(se-forwarder standin webhook [^`]*)`", body.replace("\n", " "))
    commands.insert(2, shlex.split(webhook.group(1)))
    (tmp_path / "config.toml").write_text(
        "\n".join(re.findall(r"```toml\n(.*?)```", body, re.DOTALL))
    )
    assert [c[1] for c in commands] == ["simulate", "standin", "standin", "run"]
    procs = []
    try:
        for argv in commands:
            procs.append(
                subprocess.Popen(
                    [sys.executable, "-m", "se_forwarder.cli", *argv[1:]],
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                )
            )
            if argv[1] != "run":
                procs[-1].stdout.readline()  # each prints one line once it listens
        ca = ssl.create_default_context(cafile=str(tmp_path / "tls" / "ca.pem"))
        hook_ca = ssl.create_default_context(cafile=str(tmp_path / "hooks" / "ca.pem"))
        deadline, records, received = time.monotonic() + 90, [], []
        while time.monotonic() < deadline and not (records and received):
            time.sleep(0.5)
            assert procs[-1].poll() is None, procs[-1].communicate()
            records = httpx.get(
                f"https://localhost:{ports['8443']}/_standin/records", verify=ca
            ).json()
            received = httpx.get(
                f"https://127.0.0.1:{ports['8444']}/_standin/received", verify=hook_ca
            ).json()
    finally:
        for p in reversed(procs):
            p.terminate()
        outputs = [p.communicate(timeout=30) for p in reversed(procs)]
    assert records, outputs[0]
    assert any(r["kind"] == "slack" and r["status"] == 200 for r in received), received
    assert all(p.returncode == 0 for p in procs), [p.returncode for p in procs]
