"""What the installer tests (tests/infra/install/) share besides fixtures."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

from helpers.installer import Env, free_port


def no_index() -> dict[str, str]:
    """pip's environment with an index nobody answers on and no other source: an install from
    the offline bundle must need none."""
    dead = f"http://127.0.0.1:{free_port()}"
    return {"PIP_INDEX_URL": dead + "/simple", "PIP_NO_INDEX": "", "PIP_FIND_LINKS": ""}


def out(r: subprocess.CompletedProcess) -> str:
    return f"exit {r.returncode}\n--- stdout\n{r.stdout}\n--- stderr\n{r.stderr}"


def wait_healthy(inst: Env, timeout: float = 60) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        st = inst.status("--json")
        if st.returncode == 0 or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert st.returncode == 0, out(st)
    return json.loads(st.stdout)


def collector_toml(state: Path | str, **collector: str) -> str:
    """A collector's configuration as docs/collector.md writes it (the Bicep's [identity] and
    [collector], plus [agent] and a sink that takes its rows)."""
    section = {
        "namespace": "ns.servicebus.windows.net",
        "hub": "platform-events",
        "checkpoint_account_url": "https://account.blob.core.windows.net",
        **collector,
    }
    return (
        f'[agent]\nstate_dir = "{state}"\n\n[identity]\nkind = "managed"\n\n[collector]\n'
        + "".join(f'{k} = "{v}"\n' for k, v in section.items())
        + f'\n[sinks.file]\npath = "{state}/records.jsonl"\n'
        f'platform_path = "{state}/platform.jsonl"\n'
    )
