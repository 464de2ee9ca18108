"""``se-forwarder standin webhook``: the Slack/Teams path tried on one machine, as a user would
(the command's own output, the agent's real webhook sink, the stand-in's log)."""

from __future__ import annotations

import json
import signal
import ssl
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from helpers import build_sinks

from se_forwarder.config import load
from se_forwarder.outbox import OutboxRow
from se_forwarder_testbed.standins.webhooks import TOKEN

pytestmark = pytest.mark.e2e

RECORD = {
    "TimeGenerated": "2026-01-01T00:00:00.000Z",
    "RecordId": "r-1",
    "Phase": "FirstSeen",
    "EventId": "e-1",
    "EventType": "Reboot",
    "EventStatus": "Scheduled",
    "EventSource": "User",
    "Resources": ["vm-a"],
    "DurationInSeconds": -1,
    "NotBefore": "2026-01-01T00:15:00.000Z",
    "AffectsThisVm": True,
    "VmName": "vm-a",
}


@pytest.mark.process
def test_the_stand_in_prints_what_a_config_needs_and_logs_what_it_receives(tmp_path):
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "se_forwarder.cli",
            "standin",
            "webhook",
            "--tls-dir",
            str(tmp_path / "tls"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        info = json.loads(proc.stdout.readline())
        assert info["service"] == "webhook" and set(info["urls"]) == {"slack", "teams", "json"}
        slack_file = Path(info["url_files"]["slack"])
        assert slack_file.read_text().strip() == info["urls"]["slack"]
        assert slack_file.stat().st_mode & 0o077 == 0
        config = tmp_path / "config.toml"
        config.write_text(
            f'[sinks.webhook]\nurl_file = "{slack_file}"\nformat = "slack"\n'
            f'ca_file = "{info["ca_cert"]}"\n'
        )
        [sink] = build_sinks(load(config, env={}))  # what the agent builds from it
        with sink:
            payload = json.dumps(RECORD)
            result = sink.send(
                [
                    OutboxRow.raw(
                        "records", "vm-a", payload, seq=1, phase="FirstSeen", event_type="Reboot"
                    )
                ]
            )
        assert result.delivered == 1
        ca = ssl.create_default_context(cafile=info["ca_cert"])
        received = httpx.get(info["received_url"], verify=ca).json()
        assert [(r["kind"], r["status"]) for r in received] == [("slack", 200)]
        assert received[0]["body"]["text"].startswith("Reboot e-1 on vm-a: announced")
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert 'slack answered 200: "Reboot e-1 on vm-a: announced' in err, err
    assert TOKEN not in err  # the log shows messages, never the URL
