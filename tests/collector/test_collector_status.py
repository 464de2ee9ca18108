"""How ``se-forwarder status`` judges a collector's status.json (collector/status.py): what
makes it unhealthy, read back from the JSON the collector writes."""

from __future__ import annotations

import json
from dataclasses import replace

from se_forwarder.collector.health import CollectorSnapshot, PartitionHealth
from se_forwarder.collector.status import STALL_AFTER, StallWatch, evaluate, read_snapshot
from se_forwarder.health import HealthState

NOW = 1_800_000_000.0


def judged(**fields):
    """A snapshot as a running collector writes it (JSON round trip), judged at NOW."""
    base = {
        "channel": "event-hub",
        "pid": 1,
        "started_at": NOW - 600,
        "written_at": NOW - 2,
        "checkpoint_store_ok_at": NOW - 3,
        "partitions": {"0": PartitionHealth(owned=True, last_batch_at=NOW - 1)},
    }
    data = json.loads(json.dumps(CollectorSnapshot(**(base | fields)).to_json()))
    snap, problems = read_snapshot(data)
    assert problems == []
    return evaluate(snap, now=NOW, process_alive=lambda _pid: True)


def test_a_running_collector_holding_a_partition_is_healthy():
    v = judged()
    assert (v.state, v.problems, v.warnings) == ("healthy", [], [])


def test_a_failing_commit_is_cannot_persist():
    v = judged(persist_failures=3, persist_error="OperationalError: disk I/O error")
    # the health state itself (a member, as the agent's verdicts carry), not a string that reads
    # the same: `status` renders and exits from it
    assert v.state is HealthState.CANNOT_PERSIST and not v.healthy
    assert "3 failed commits" in v.problems[0]


def test_no_partition_after_startup_with_an_error_is_unhealthy_without_one_a_warning():
    v = judged(partitions={}, last_receive_error="AuthenticationError: 401")
    assert v.state == "unhealthy" and "AuthenticationError: 401" in v.problems[0]
    v = judged(partitions={"0": PartitionHealth(owned=False)})  # other collectors hold them
    assert v.state == "healthy" and v.warnings == [
        "holds no partition of the hub (other collectors hold them all)"
    ]
    v = judged(partitions={}, started_at=NOW - 5)
    assert v.state == "starting"


def test_stalled_or_failed_resource_graph_passes():
    v = judged(
        channel="resource-graph",
        partitions={},
        graph_interval=60.0,
        last_pass_at=NOW - 10,
        last_pass_ok=False,
        last_pass_error="HTTP 403: denied",
    )
    assert v.state == "healthy"
    assert v.warnings == ["last Resource Graph pass failed: HTTP 403: denied"]
    v = judged(
        channel="resource-graph",
        partitions={},
        graph_interval=60.0,
        last_pass_at=NOW - 3600,
        last_pass_ok=True,
    )
    assert v.state == "unhealthy" and "passes stalled" in v.problems[0]


def test_a_dead_process_and_a_stale_file():
    snap, _ = read_snapshot(
        json.loads(
            json.dumps(
                CollectorSnapshot(
                    channel="event-hub", pid=42, started_at=NOW - 600, written_at=NOW - 2
                ).to_json()
            )
        )
    )
    assert evaluate(snap, now=NOW, process_alive=lambda _pid: False).state == "dead"
    v = judged(written_at=NOW - 3600)
    assert v.state == "unhealthy" and "not refreshed" in v.problems[0]


def test_the_prometheus_metrics_of_a_collector_snapshot():
    """[metrics] on the collector: the same exporter, every metric its health declares."""
    from prometheus_client import CollectorRegistry, generate_latest

    from se_forwarder.health import SinkHealth
    from se_forwarder.metrics.exporter import AgentCollector

    snap = CollectorSnapshot(
        channel="event-hub",
        committed=7,
        duplicate_notifications=1,
        partitions={"0": PartitionHealth(owned=True), "1": PartitionHealth(owned=False)},
        last_event_at=NOW,
        sinks={"log_analytics": SinkHealth()},
    )
    registry = CollectorRegistry(auto_describe=False)
    registry.register(AgentCollector(lambda: snap))
    text = generate_latest(registry).decode()
    values = {
        k: float(v)
        for k, v in (line.rsplit(" ", 1) for line in text.splitlines() if not line.startswith("#"))
    }
    assert values["se_forwarder_collector_committed_records_total"] == 7
    assert values["se_forwarder_collector_duplicate_notifications_total"] == 1
    assert values["se_forwarder_collector_partitions_owned"] == 1
    assert values["se_forwarder_collector_last_event_timestamp_seconds"] == NOW
    assert "lifecycle_records" not in text  # the agent's, not the collector's


def test_a_stalled_partition_or_checkpoint_store_is_unhealthy_after_the_stated_time():
    held = {"owned": True, "last_batch_at": NOW - 1}
    busy = PartitionHealth(**held | {"busy_since": NOW - STALL_AFTER - 1})
    v = judged(partitions={"0": PartitionHealth(**held), "7": busy})
    assert v.state == "unhealthy" and v.problems[0].startswith("partition 7 stalled: one batch")
    assert judged(partitions={"7": replace(busy, busy_since=NOW - STALL_AFTER + 1)}).healthy
    quiet = PartitionHealth(owned=True, last_batch_at=NOW - STALL_AFTER - 5)
    v = judged(partitions={"3": quiet})
    assert not v.healthy and v.problems == [
        "partition 3 stalled: nothing from the client for 25s (limit 20s)"
    ]
    assert judged(partitions={"3": replace(quiet, owned=False)}).healthy  # not ours any more
    v = judged(checkpoint_store_ok_at=NOW - 30, checkpoint_store_error="ServiceRequestError: x")
    assert v.problems == [
        "checkpoint store not answering for 30s (limit 20s): ServiceRequestError: x"
    ]
    assert not judged(checkpoint_store_ok_at=None).healthy  # never answered since the start
    assert judged(checkpoint_store_ok_at=None, started_at=NOW - 10).healthy
    v = judged(checkpoint_failing_since=NOW - 40, checkpoint_error="HttpResponseError: 503")
    assert v.problems == ["checkpoints failing for 40s: HttpResponseError: 503"]


def test_stalls_are_logged_when_they_start_and_end(caplog):
    watch = StallWatch()
    with caplog.at_level("INFO", logger="se_forwarder"):
        watch.update([("partition 1", "partition 1 stalled: x")])
        watch.update([("partition 1", "partition 1 stalled: y")])  # still: no new line
        watch.update([])
    assert [(r.getMessage(), r.fields["what"]) for r in caplog.records] == [
        ("collector stalled", "partition 1"),
        ("collector moving again", "partition 1"),
    ]
