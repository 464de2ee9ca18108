"""Health is declared once (``health.Snapshot``): status.json, the heartbeat row, the metrics,
``status``'s warnings, the reading back of status.json and the docs all follow the declaration,
field by field, and a counter added to it reaches every one of them with nothing else written."""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, fields

from helpers import REPO
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from pydantic import BaseModel

from se_forwarder import contract, health
from se_forwarder.config import Config
from se_forwarder.health import OpenEvent, SinkHealth, Snapshot
from se_forwarder.health.fields import Metric, Time, by_name, counter, specs, value
from se_forwarder.health.read import document_model
from se_forwarder.health.snapshot import heartbeat_values
from se_forwarder.metrics.exporter import AgentCollector
from se_forwarder.model import IDENTITY_FIELDS, VmIdentity
from se_forwarder_testbed.fakeclock import FakeClock

ROW_COLUMNS = {"TimeGenerated", "RecordId", "Reason"}


def full() -> Snapshot:
    """A snapshot with every field away from its default."""
    return Snapshot(
        version="9.9.9",
        pid=4242,
        started_at=1_772_359_200.0,
        written_at=1_772_359_260.5,
        poll_interval=1.0,
        uptime_seconds=60.5,
        last_poll_at=1_772_359_260.0,
        last_poll_ok=False,
        last_poll_ok_at=1_772_359_250.0,
        last_poll_error="HTTP 500",
        last_poll_latency_ms=2.25,
        polls=61,
        poll_errors=3,
        last_incarnation=7,
        clock_skew_seconds=-3600.5,
        open_events=(
            OpenEvent(
                "E-1", "Reboot", "Scheduled", "Platform", "2026-03-01T10:15:00.000Z", -1, True
            ),
        ),
        open_events_not_listed=3,
        delivered=12,
        failed_deliveries=2,
        dropped=1,
        dropped_heartbeats=2,
        dead_lettered=4,
        dead_letters_dropped=3,
        lost=2,
        spool_depth=5,
        sinks={"file": SinkHealth(5, 1_772_359_259.0, "disk", 12, 2, 4)},
        malformed_events=1,
        truncated_values=2,
        held_records=6,
        persist_failures=3,
        persist_error="full",
        disk_full=True,
        read_only=True,
        stopped=True,
        runtime_copy="/run/se-forwarder/status.json",
        hooks_running=1,
        hooks_succeeded=2,
        hooks_failed=3,
        approvals_sent=4,
        approvals_failed=5,
        dry_run_decisions=6,
        dry_run=True,
        acted_events=("4f2a9c1e Reboot: rule 1: drain ok, approved by this VM",),
        hook_secrets_refused=1,
    )


def scrape(snap: Snapshot) -> dict[str, float]:
    reg = CollectorRegistry(auto_describe=False)
    reg.register(AgentCollector(lambda: snap, dict))
    text = generate_latest(reg).decode()
    return {
        s.name + (str(sorted(s.labels.items())) if s.labels else ""): s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
        if not s.name.endswith("_created")
    }


def test_every_field_is_fully_populated_in_the_fixture():
    default = Snapshot()
    assert [
        f.name for f in fields(Snapshot) if getattr(full(), f.name) == getattr(default, f.name)
    ] == []


def test_status_json_has_every_declared_field_and_reads_back_to_the_same_snapshot():
    snap = full()
    data = snap.to_json()
    assert list(data) == [f.name for f in fields(Snapshot)]
    back, problems = health.read(data)
    assert problems == [] and back == snap


def test_the_heartbeat_carries_exactly_the_contract_columns():
    declared = [col.name for _, spec in specs(Snapshot) for col in spec.columns]
    assert len(declared) == len(set(declared))
    columns = contract.table(contract.HEARTBEATS).column_names
    assert set(declared) == set(columns) - ROW_COLUMNS - IDENTITY_FIELDS
    row = full().heartbeat("periodic", VmIdentity(VmName="vm-a"), "t", "id").as_dict()
    assert list(row) == list(columns)
    assert (row["Polls"], row["OpenEvents"], row["DroppedRecords"], row["HooksFailed"]) == (
        61,
        1,
        1,
        3,
    )
    assert row["OpenEventList"][0]["EventId"] == "E-1" and row["LastPollLatencyMs"] == 2.25


def test_every_declared_metric_is_exported_and_the_metrics_doc_lists_exactly_them():
    got = scrape(full())
    declared = [m for _, spec in specs(Snapshot) for m in spec.metrics]
    per_sink = [m for _, spec in specs(SinkHealth) for m in spec.metrics]

    def exported(m: Metric) -> str:
        return "se_forwarder_" + m.name + ("_total" if m.kind == "counter" else "")

    for m in declared:
        assert exported(m) in got, m.name
    for m in per_sink:
        assert exported(m) + "[('sink', 'file')]" in got, m.name
    assert got["se_forwarder_last_poll_latency_seconds"] == 0.00225
    assert got["se_forwarder_hooks_failed_total"] == 3.0
    doc = (REPO / "docs" / "metrics.md").read_text()
    listed = set(re.findall(r"^\| `(se_forwarder_\w+)`", doc, re.MULTILINE))
    assert listed == {exported(m) for m in declared + per_sink} | {
        "se_forwarder_info",
        "se_forwarder_lifecycle_records_total",
    }


def test_the_architecture_doc_lists_the_status_fields_as_declared():
    doc = (REPO / "docs" / "architecture.md").read_text()
    [row] = [line for line in doc.splitlines() if line.startswith("| `status.json` |")]
    top = re.sub(r"\(`\{.*?\}`\)", "", row.split("):", 1)[1])
    assert re.findall(r"`([a-z_]+)`", top) == [f.name for f in fields(Snapshot)]
    [inner] = re.findall(r"\{name: \{(.*?)\}\}", row)
    assert [x.strip() for x in inner.split(",")] == [f.name for f in fields(SinkHealth)]


def test_warnings_of_status_come_from_the_declaration():
    verdict = health.evaluate(full(), now=1_772_359_261.0, limits=health.Limits())
    assert "1 record(s) dropped" in verdict.warnings
    assert "4 record(s) dead-lettered" in verdict.warnings


@dataclass(frozen=True, slots=True)
class WithWidgets(Snapshot):
    widgets: int = counter("Widgets made.", metric="widgets", warn="widgeted")


@dataclass(slots=True)
class WidgetStats:
    """A part of the agent that counts widgets (and something the snapshot does not know)."""

    widgets: int = 0
    internal: int = 0


def test_a_counter_added_to_the_declaration_reaches_every_shape_with_nothing_else_written():
    part = WidgetStats(widgets=3, internal=9)
    snap = WithWidgets(**by_name(WithWidgets, part))  # handed over by name, as the agent does
    assert snap.widgets == 3 and "internal" not in snap.to_json()
    assert snap.to_json()["widgets"] == 3  # status.json
    assert health.read({"widgets": 3}, cls=WithWidgets)[0].widgets == 3  # read back
    assert health.read({"widgets": "3"}, cls=WithWidgets)[0].widgets is None  # and checked
    assert scrape(snap)["se_forwarder_widgets_total"] == 3.0  # metrics
    verdict = health.evaluate(snap, now=0.0, limits=health.Limits())
    assert "3 record(s) widgeted" in verdict.warnings  # status
    with_column = dataclasses.make_dataclass(
        "WithColumn",
        [("widgets", int, counter("Widgets made.", column="Widgets"))],
        bases=(Snapshot,),
        frozen=True,
    )
    assert heartbeat_values(with_column(widgets=3))["Widgets"] == 3  # the heartbeat row


def test_the_running_agent_gives_every_declared_field_a_value(tmp_path):
    from se_forwarder.agent import Agent

    cfg = Config.model_validate(
        {
            "agent": {"state_dir": str(tmp_path / "state")},
            "imds": {"endpoint": "http://127.0.0.1:9"},
        }
    )
    agent = Agent(cfg, [], clock=FakeClock())
    try:
        assert set(agent.health.values()) == {f.name for f in fields(Snapshot)}
    finally:
        agent.store.close()


def test_status_json_is_read_through_a_pydantic_model_generated_from_the_declaration():
    model = document_model(Snapshot)
    assert issubclass(model, BaseModel) and list(model.model_fields) == [
        f.name for f in fields(Snapshot)
    ]
    with_time = dataclasses.make_dataclass(
        "WithTime",
        [("drained_at", float | None, value(Time, "When the spool was last empty."))],
        bases=(Snapshot,),
        frozen=True,
    )
    assert "drained_at" in document_model(with_time).model_fields  # a field added is read too
    snap, problems = health.read({"drained_at": "2026-03-01T10:00:00Z", "polls": 3}, cls=with_time)
    assert (snap.drained_at, snap.polls, problems) == (1_772_359_200.0, 3, [])
    snap, problems = health.read(
        {
            "drained_at": "yesterday",
            "polls": True,
            "sinks": {
                "file": {"delivered": "12", "failed": 2, "last_delivery_at": "soon"},
                "bad": 7,
            },
        },
        cls=with_time,
    )
    assert snap.drained_at is None and problems == ["drained_at is not a valid time: 'yesterday'"]
    assert snap.polls is None and snap.sinks == {"file": SinkHealth(failed=2)}
