"""What the installer tests (tests/infra/install/) share besides fixtures."""

from __future__ import annotations

import json
import subprocess
import time

from helpers.installer import Env


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
