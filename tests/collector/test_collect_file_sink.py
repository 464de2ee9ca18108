"""The collector's rows through the file sink (``[sinks.file] platform_path``), where the report
reads them; and no silent loss when a sink does not take them: every row the collector writes is
of the platform table, so a sink that skips it is named in the log, and a configuration where no
sink takes it does not start."""

from __future__ import annotations

import json
import subprocess
from collections import Counter
from pathlib import Path

import pytest
from helpers.azure import AzureWorld, _toml
from helpers.collector import annotation, scheduled, vm_parent

from se_forwarder import contract
from se_forwarder.report import Engine
from se_forwarder_testbed.agentproc import se_forwarder_cmd
from se_forwarder_testbed.standins.resource_graph import ResourceGraphStandIn
from se_forwarder_testbed.standins.tls import generate


def _config(path: Path, sinks: dict, **collector: object) -> Path:
    path.write_text(
        _toml(
            {
                "agent": {
                    "state_dir": str(path.with_suffix("")),
                    "log_format": "json",
                    "stop_flush_seconds": 5.0,
                },
                "sinks": sinks,
                "collector": collector,
            }
        )
    )
    return path


def _logged(text: str, message: str) -> list[dict]:
    lines = [json.loads(x) for x in text.splitlines() if x.startswith("{")]
    return [x for x in lines if x.get("msg") == message]


@pytest.mark.process
def test_no_sink_taking_the_platform_table_is_refused_at_start(tmp_path):
    config = _config(
        tmp_path / "c.toml", {"stdout": {}, "file": {"path": str(tmp_path / "r.jsonl")}}
    )
    done = subprocess.run(
        [*se_forwarder_cmd(), "collect", "--config", str(config), "--resource-graph", "--once"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2, done.stderr[-2000:]
    refused = [
        x
        for x in (json.loads(line) for line in done.stderr.splitlines() if line.startswith("{"))
        if x.get("level") == "critical"
    ]
    assert len(refused) == 1 and "ScheduledEventsPlatform_CL" in refused[0]["msg"]
    assert "platform_path" in refused[0]["msg"]


@pytest.mark.e2e
@pytest.mark.tls
@pytest.mark.process
def test_resource_graph_pass_into_the_file_sink_is_what_the_report_reads(tmp_path):
    with (
        AzureWorld(tmp_path, eventhubs=False) as world,
        ResourceGraphStandIn(generate(tmp_path / "tls-arg"), world.authority) as arg,
    ):
        arg.tables["maintenanceresources"] = [
            {
                **scheduled(
                    f"F{i:03d}",
                    status,
                    "2026-01-01T00:00:00Z",
                    parent=vm_parent(f"no-agent-{i % 7}"),
                )["data"]["resourceInfo"],
                "type": "microsoft.maintenance/scheduledevents",
            }
            for i, status in enumerate(["Completed", "Canceled", "Scheduled"] * 10)
        ]
        arg.tables["healthresources"] = [
            {
                **annotation(
                    "LiveMigrationSucceeded",
                    "no-agent-1",
                    "2026-01-01T00:10:00Z",
                    impact="Downtime Freeze",
                )["data"]["resourceInfo"],
                "type": "microsoft.resourcehealth/resourceannotations",
            }
        ]
        platform = tmp_path / "out" / "platform.jsonl"
        config = _config(
            tmp_path / "c.toml",
            {
                "stdout": {},
                "file": {
                    "path": str(tmp_path / "out" / "records.jsonl"),
                    "platform_path": str(platform),
                },
            },
            resource_graph_endpoint=arg.endpoint,
            resource_graph_ca_file=str(arg.tls.ca_cert),
        )
        done = subprocess.run(
            [*se_forwarder_cmd(), "collect", "--config", str(config), "--resource-graph", "--once"],
            env=world.agent_env(),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [json.loads(line) for line in platform.read_text("utf-8").splitlines()]
    assert len(rows) == 31 and len({r["RecordId"] for r in rows}) == 31
    assert Counter(r["EventStatus"] for r in rows) == {
        "Completed": 10,
        "Canceled": 10,
        "Scheduled": 10,
        None: 1,
    }
    assert not (tmp_path / "out" / "records.jsonl").exists()
    skipped = _logged(
        done.stderr, "this sink does not take the collector's rows: none is written there"
    )
    assert [x["sink"] for x in skipped] == ["stdout"]
    with Engine(files=[platform]) as engine:
        assert engine.counts == {
            contract.table(k).table: n
            for k, n in ((contract.RECORDS, 0), (contract.HEARTBEATS, 0), (contract.PLATFORM, 31))
        }
        assert engine.loads[0].skipped_total == 0
