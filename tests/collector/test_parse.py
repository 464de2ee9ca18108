"""What the channels say → platform rows (pure)."""

from __future__ import annotations

import dataclasses
import json

from helpers.collector import annotation, scheduled, vm_parent

from se_forwarder import contract
from se_forwarder.collector.eventgrid import parse_body
from se_forwarder.collector.graphrows import rows_of
from se_forwarder.collector.record import PlatformRecord


def rows(*events, array=True):
    parsed = parse_body(json.dumps(list(events) if array else events[0]), 0)
    return parsed, [r for _, rs in parsed.notifications for r in rs]


def test_the_row_type_has_the_contract_columns_in_order():
    fields = [f.name for f in dataclasses.fields(PlatformRecord)]
    assert fields == list(contract.table("platform").column_names)
    assert PlatformRecord.columns == contract.table("platform").column_names


def test_both_spellings_and_both_schemas_give_the_same_row():
    a = scheduled("E1", "Scheduled", "2026-01-01T00:00:00Z")
    b = scheduled(
        "E1",
        "Scheduled",
        "2026-01-01T00:00:00Z",
        cloud=True,
        spelling="microsoft.maintenance/scheduledevents/write",
    )
    (ra,), (rb,) = rows(a)[1], rows(b, array=False)[1]
    assert ra.RecordId == rb.RecordId and ra.VmResourceId == rb.VmResourceId
    assert ra.EventStatus == "Scheduled" and ra.NotBefore == "2025-09-19T18:29:47.000Z"


def test_a_status_change_and_a_reschedule_are_new_rows():
    base = rows(scheduled("E1", "Scheduled", "2026-01-01T00:00:00Z"))[1][0]
    started = rows(scheduled("E1", "Started", "2026-01-01T00:10:00Z"))[1][0]
    moved = rows(
        scheduled(
            "E1", "Scheduled", "2026-01-01T00:01:00Z", not_before="Tue, 20 Sep 2025 18:29:47 GMT"
        )
    )[1][0]
    assert len({base.RecordId, started.RecordId, moved.RecordId}) == 3


def test_scale_set_events_expand_to_their_vms_and_ids_are_lower_case_names_as_given():
    parent = vm_parent("x").replace("virtualMachines/x", "virtualMachineScaleSets/Web")
    parsed, rs = rows(
        scheduled(
            "E9",
            "Started",
            "2026-01-01T00:00:00Z",
            parent=parent,
            resources=["Web_1", "web_2", "web_1"],
        )
    )
    # one row per VM whatever the casing; the name as Azure first gave it (the contract's VmName)
    assert [r.VmName for r in rs] == ["Web_1", "web_2"]
    assert all(r.VmResourceId == r.VmResourceId.lower() and r.ScaleSetName == "web" for r in rs)
    assert parsed.unexpanded == 0
    parsed, (only,) = rows(
        scheduled("E9", "Started", "2026-01-01T00:00:00Z", parent=parent, resources=[""])
    )
    assert only.VmResourceId.endswith("/virtualmachinescalesets/web") and parsed.unexpanded == 1


def test_annotations_keep_impact_times_only_when_degraded():
    (freeze,) = rows(
        annotation(
            "LiveMigrationSucceeded",
            "vm-1",
            "2026-01-01T00:00:00Z",
            impact="Downtime Freeze",
            start="2026-01-01T00:00:00Z",
            end="2026-01-01T00:00:05Z",
        )
    )[1]
    (degraded,) = rows(
        annotation(
            "VirtualMachinePossiblyDegradedDueToHardwareFailure",
            "vm-1",
            "2026-01-01T00:00:00Z",
            impact="Degraded",
            start="2026-01-01T00:00:00Z",
            end="2026-01-02T00:00:00Z",
        )
    )[1]
    assert freeze.ImpactStartTime is None and freeze.ImpactEndTime is None
    assert degraded.ImpactEndTime == "2026-01-02T00:00:00.000Z"
    assert freeze.AnnotationContext == "Platform Initiated" and freeze.EventId is None


def test_bad_input_is_a_problem_line_not_an_exception():
    parsed = parse_body(b"\xff not json", 0)
    assert parsed.problems and not parsed.notifications
    bad = scheduled("E1", "Scheduled", "2026-01-01T00:00:00Z")
    bad["data"]["resourceInfo"]["properties"]["DurationInSeconds"] = "soon"
    other = {
        **scheduled("E2", "Scheduled", "2026-01-01T00:00:00Z"),
        "eventType": "Microsoft.ResourceNotifications.HealthResources.AvailabilityStatusChanged",
    }
    parsed, rs = rows(bad, other, scheduled("E3", "Started", "2026-01-01T00:00:00Z"))
    assert len(parsed.problems) == 1 and "DurationInSeconds" in parsed.problems[0]
    assert parsed.ignored == 1 and [r.EventId for r in rs] == ["E3"]


def test_resource_graph_rows_give_the_event_grid_record_ids():
    eg = rows(scheduled("E1", "Completed", "2026-01-01T00:00:00Z"))[1][0]
    info = scheduled("E1", "Completed", "2026-01-01T00:00:00Z")["data"]["resourceInfo"]
    arg = {**info, "type": "microsoft.maintenance/scheduledevents"}
    ann = annotation("VirtualMachineHostCrashed", "vm-3", "2026-01-01T00:00:00Z")
    health = {**ann["data"]["resourceInfo"], "type": "microsoft.resourcehealth/resourceannotations"}
    parsed = rows_of(
        "maintenanceresources",
        [
            arg,
            {"type": "other"},
            {"type": "microsoft.maintenance/scheduledevents", "id": "/nope", "properties": {}},
        ],
        5,
    )
    (r,) = parsed.notifications[0][1]
    assert r.RecordId == eg.RecordId and r.Channel == "resource-graph"
    assert parsed.ignored == 1 and len(parsed.problems) == 1
    (h,) = rows_of("healthresources", [health], 5).notifications[0][1]
    assert h.AnnotationName == "VirtualMachineHostCrashed" and h.TimeGenerated.startswith("2026")
