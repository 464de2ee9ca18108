"""The agent that runs on every VM carries nothing of the test bed: ``se-forwarder run`` is
started for real (polling a simulator that lives in another process) and its ``sys.modules``
read at the end."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from se_forwarder_testbed.agentproc import write_config

pytestmark = pytest.mark.e2e

DRIVER = textwrap.dedent("""
    import json, os, signal, sys, threading, time
    from pathlib import Path
    from se_forwarder import cli

    status = Path(sys.argv[2])

    def stop_after_polls():
        deadline = time.monotonic() + 40
        while time.monotonic() < deadline:
            try:
                if json.loads(status.read_text()).get("polls", 0) >= 3:
                    break
            except (OSError, ValueError):
                pass
            time.sleep(0.1)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=stop_after_polls, daemon=True).start()
    rc = cli.main(["run", "--config", sys.argv[1]])
    print(json.dumps({"rc": rc, "modules": sorted(sys.modules)}))
""")


def test_run_imports_nothing_of_the_test_bed_nor_what_the_file_sink_does_not_need(
    tmp_path, simulator
):
    sim = simulator(vm_name="vm-run-path", first_call_delay=0.0)
    state = tmp_path / "state"
    cfg = write_config(tmp_path / "c.toml", sim.url, state, file_sink=tmp_path / "r.jsonl")
    r = subprocess.run(
        [sys.executable, "-c", DRIVER, str(cfg), str(state / "status.json")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    out = json.loads(r.stdout.splitlines()[-1])
    assert out["rc"] == 0
    modules = out["modules"]
    assert "se_forwarder.agent" in modules and "se_forwarder.sinks.file.sink" in modules
    assert [m for m in modules if m.startswith("se_forwarder_testbed")] == []
    assert [
        m
        for m in modules
        if m.split(".")[0]
        in (
            "azure",
            "proton",
            "httpx",
            "cryptography",
            "prometheus_client",
            "duckdb",
            "duckdb_kql",
            "matplotlib",
            "numpy",
            "jinja2",
            "markupsafe",
            "markdown_it",
        )
    ] == []
    assert [
        m for m in modules if m.startswith(("se_forwarder.report", "se_forwarder.commands.report"))
    ] == []
    # the collector runs in one place of the fleet, never on a VM: nothing of it, its config
    # model included (the agent's Config keeps [collector] as an opaque table)
    assert [
        m
        for m in modules
        if m.startswith(("se_forwarder.collector", "se_forwarder.commands.collect"))
    ] == []
    # the default policy observes: the hook runner, the approver and subprocess stay unloaded;
    # sections the file does not have are not validated, so nothing of them is imported, their
    # models included (config_types.section_of): no [policy], no [kubernetes], no other sink
    assert [
        m
        for m in modules
        if m.startswith(
            (
                "se_forwarder.hooks",
                "se_forwarder.approvals",
                "se_forwarder.actions.controller",
                "se_forwarder.policy",
                "se_forwarder.kube",
                "se_forwarder.sinks.stdout",
                "se_forwarder.sinks.log_analytics",
                "se_forwarder.sinks.event_hubs",
                "se_forwarder.sinks.webhook",
            )
        )
    ] == []
    # nor the standard library's statistics for one median (imds.azure_clock)
    assert [m for m in modules if m in ("statistics", "_statistics")] == []
    assert "subprocess" not in modules
    # IMDS is plain HTTP on a link-local address, read on a socket: no TLS, no http.client and
    # its header parsing through the email package, no idna codec (1.5 MB) for an IP address;
    # what the Azure sinks need (requests, urllib3) only when they are configured
    assert [
        m
        for m in modules
        if m
        in (
            "ssl",
            "_ssl",
            "http.client",
            "email.parser",
            "email.feedparser",
            "encodings.idna",
            "unicodedata",
        )
        or m.split(".")[0] in ("requests", "urllib3", "charset_normalizer", "msal")
    ] == []
    assert json.loads((state / "status.json").read_text())["polls"] >= 3  # it really ran
