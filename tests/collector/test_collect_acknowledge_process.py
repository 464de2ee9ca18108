"""``se-forwarder collect --resource-graph`` as a process with ``[collector.preview_acknowledge]``:
the command's own path (the configuration read, the SDKs imported only then) approves the
agentless VM's event against the acknowledge stand-in, and leaves the agent's VM alone; stopped
by SIGTERM, its Approval rows delivered."""

from __future__ import annotations

import signal
import subprocess
import time

import pytest
from helpers.azure import AzureWorld, _toml
from helpers.collector import SUB, scheduled, vm_parent

from se_forwarder.clock import SYSTEM
from se_forwarder.timefmt import format_ms
from se_forwarder_testbed.agentproc import se_forwarder_cmd
from se_forwarder_testbed.standins.log_query import LogQueryStandIn
from se_forwarder_testbed.standins.maintenance import MaintenanceStandIn
from se_forwarder_testbed.standins.resource_graph import ResourceGraphStandIn
from se_forwarder_testbed.standins.tls import generate

pytestmark = [pytest.mark.e2e, pytest.mark.tls, pytest.mark.process]

WORKSPACE = "11111111-2222-3333-4444-555555555555"


def _vm(name: str) -> dict:
    return {
        "id": vm_parent(name),
        "name": name,
        "type": "microsoft.compute/virtualmachines",
        "subscriptionId": SUB,
        "tags": {"service": "batch"},
        "properties": {"vmId": f"id-{name}"},
    }


def _event(event_id: str, vm: str) -> dict:
    import email.utils

    nb = email.utils.formatdate(time.time() + 900, usegmt=True)
    info = scheduled(
        event_id, "Scheduled", "2026-01-01T00:00:00Z", parent=vm_parent(vm), not_before=nb
    )["data"]["resourceInfo"]
    return {**info, "type": "microsoft.maintenance/scheduledevents"}


def test_collect_approves_the_agentless_vm_and_not_the_agents(tmp_path):
    with AzureWorld(tmp_path, eventhubs=False) as world:
        arg = ResourceGraphStandIn(generate(tmp_path / "tls-arg"), world.authority).start()
        ack = MaintenanceStandIn(generate(tmp_path / "tls-ack"), world.authority, arg).start()
        beats = [
            {
                "TimeGenerated": format_ms(SYSTEM.wall_ms()),
                "SubscriptionId": SUB,
                "ResourceGroup": "rg-app",
                "VmName": "with-agent",
            }
        ]
        logs = LogQueryStandIn(
            generate(tmp_path / "tls-logs"), world.authority, WORKSPACE, lambda: beats
        ).start()
        try:
            ack.grant("system-assigned", f"/subscriptions/{SUB}")
            arg.tables = {
                "resources": [_vm("no-agent"), _vm("with-agent")],
                "maintenanceresources": [
                    _event("E-FREE", "no-agent"),
                    _event("E-AGENT", "with-agent"),
                ],
            }
            cfg = {
                "agent": {"state_dir": str(tmp_path / "c"), "stop_flush_seconds": 5.0},
                "sinks": {"log_analytics": world.la_section()},
                "collector": {
                    "resource_graph_endpoint": arg.endpoint,
                    "resource_graph_ca_file": str(arg.tls.ca_cert),
                    "resource_graph_interval": 2,
                    "preview_acknowledge": {
                        "enabled": True,
                        "endpoint": ack.endpoint,
                        "ca_file": str(ack.tls.ca_cert),
                        "agents_workspace_id": WORKSPACE,
                        "logs_endpoint": logs.endpoint,
                        "logs_ca_file": str(logs.tls.ca_cert),
                        "interval": 0.5,
                    },
                },
            }
            path = tmp_path / "c.toml"
            path.write_text(
                _toml(cfg) + '\n[[collector.preview_acknowledge.rules]]\nevent_types = ["Reboot"]\n'
            )
            with open(tmp_path / "c.log", "wb") as out:
                proc = subprocess.Popen(
                    [*se_forwarder_cmd(), "collect", "--config", str(path), "--resource-graph"],
                    env=world.agent_env(),
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                )
            deadline = time.monotonic() + 90
            while not ack.acknowledged and time.monotonic() < deadline and proc.poll() is None:
                time.sleep(0.2)
            time.sleep(2)  # a few more rounds: the agent's VM must stay alone
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(60) == 0, (tmp_path / "c.log").read_text()[-3000:]
        finally:
            for s in (logs, ack, arg):
                s.stop()
        assert ack.acknowledged == ["E-FREE"], (tmp_path / "c.log").read_text()[-3000:]
        rows = [
            r
            for r in world.la.records("Custom-ScheduledEventsPlatform")
            if r["RecordType"] == "Approval"
        ]
        assert sorted((r["EventId"], r["ApprovedBy"]) for r in rows) == [
            ("E-AGENT", None),  # decided once too: left to its agent
            ("E-FREE", "Collector"),
        ]
        assert "PREVIEW acknowledge API" in (tmp_path / "c.log").read_text()
