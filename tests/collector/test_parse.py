"""What the channels say → platform rows (pure)."""

from __future__ import annotations

import dataclasses
import json

from helpers.collector import annotation, scheduled, vm_parent

from se_forwarder import contract
from se_forwarder.collector.eventgrid import MAX_BODY_BYTES, MAX_DEPTH, MAX_NAMES, parse_body
from se_forwarder.collector.graphrows import rows_of
from se_forwarder.collector.record import PlatformRecord
from se_forwarder.textcap import MAX_VALUE_BYTES


def rows(*events, array=True):
    parsed = parse_body(json.dumps(list(events) if array else events[0]), 0)
    return parsed, [r for _, rs in parsed.notifications for r in rs]


def test_the_row_type_has_the_contract_columns_in_order():
    fields = [f.name for f in dataclasses.fields(PlatformRecord)]
    assert fields == list(contract.table("platform").column_names)
    assert PlatformRecord.columns == contract.table("platform").column_names


def test_a_row_as_a_dict_is_dataclasses_asdict_with_its_list_and_dict_its_own():
    """as_dict reads the fields without asdict's recursion (millions of rows in the benchmarks):
    the same dict, in the same order, and the row's list and dict are copies, as asdict's are."""
    row = PlatformRecord(
        TimeGenerated="2026-01-01T00:00:00.000Z",
        RecordId="r",
        RecordType="Inventory",
        Channel="resource-graph",
        VmResourceId="/subscriptions/s/resourcegroups/g/providers/microsoft.compute/vm/a",
        VmName="a",
        SubscriptionId="s",
        ResourceGroup="g",
        ScaleSetName=None,
        Resources=["a", "b"],
        Tags={"service": "pay"},
        FaultDomain=1,
    )
    out = row.as_dict()
    assert out == dataclasses.asdict(row)
    assert list(out) == [f.name for f in dataclasses.fields(PlatformRecord)]
    out["Resources"].append("c")
    out["Tags"]["service"] = "other"
    assert row.Resources == ["a", "b"] and row.Tags == {"service": "pay"}
    bare = dataclasses.replace(row, Resources=None, Tags=None)
    assert bare.as_dict() == dataclasses.asdict(bare)


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


# -- hostile bodies (issue 33): bounded before parsing, every event cut to its limits -----------


def test_a_body_of_nested_arrays_is_refused_before_parsing_not_a_recursion_error():
    parsed = parse_body(b"[" * 100_000 + b"]" * 100_000, 0)
    assert parsed.unreadable_body and "deeper than" in parsed.problems[0]
    nested = {"deep": []}
    for _ in range(MAX_DEPTH):  # a good event with a deep value in it: the whole body refused
        nested = {"deep": [nested]}
    event = scheduled("E1", "Scheduled", "2026-01-01T00:00:00Z")
    event["data"]["extra"] = nested
    assert parse_body(json.dumps([event]), 0).unreadable_body
    event["data"]["extra"] = {"a": [[{"b": 1}]]}
    assert len(rows(event)[1]) == 1


def test_a_body_not_utf8_or_too_large_is_unreadable():
    bad = json.dumps([scheduled("E1", "Scheduled", "2026-01-01T00:00:00Z")]).encode()
    parsed = parse_body(bad.replace(b"Host server", b"Host \xff\xfe server"), 0)
    assert parsed.unreadable_body and "not UTF-8" in parsed.problems[0]
    parsed = parse_body(b" " * (MAX_BODY_BYTES + 1) + bad, 0)
    assert parsed.unreadable_body and "limit" in parsed.problems[0]


def test_a_lone_surrogate_is_replaced_so_the_row_can_be_written():
    event = scheduled("E1", "Scheduled", "2026-01-01T00:00:00Z")
    event["data"]["resourceInfo"]["properties"]["Description"] = "a\ud800b"
    event["data"]["resourceInfo"]["properties"]["Resources"] = ["vm-1\udfff"]
    (row,) = rows(event)[1]
    assert row.Description == "a\ufffdb"
    row.to_row()  # UnicodeEncodeError before


def test_a_long_description_is_cut_and_counted_not_refused():
    event = scheduled("E1", "Scheduled", "2026-01-01T00:00:00Z")
    event["data"]["resourceInfo"]["properties"]["Description"] = "x" * 1_000_000  # 1 MB
    parsed, (row,) = rows(event)
    assert len(row.Description.encode()) <= MAX_VALUE_BYTES
    assert row.Description.endswith("[truncated: 1000000 bytes]")
    assert (
        parsed.truncated_values == 1
        and "Description (1000000 bytes, limit 32768)" in parsed.notes[0]
    )
    assert row.to_row().size < 2 * MAX_VALUE_BYTES


def test_names_are_capped_per_event_and_resources_kept_once():
    parent = vm_parent("x").replace("virtualMachines/x", "virtualMachineScaleSets/web")
    names = [f"web_{i}" for i in range(20_000)]
    event = scheduled("E1", "Scheduled", "2026-01-01T00:00:00Z", parent=parent, resources=names)
    parsed, rs = rows(event)
    assert len(rs) == MAX_NAMES and parsed.names_cut == 20_000 - MAX_NAMES
    assert [r.VmName for r in rs] == names[:MAX_NAMES]
    assert "names 20000 VMs" in parsed.notes[0]
    first, *others = rs
    assert first.Resources == names[: len(first.Resources)] and parsed.truncated_values == 1
    assert all(r.Resources is None for r in others)
    payload = sum(r.to_row().size for r in rs)
    # linear in the names, not n x n: about 1 KB a row (1,088 B with ApprovedBy and Acted,
    # appended for the collector's Approval rows: null elsewhere)
    assert payload < MAX_NAMES * 1088 + 2 * MAX_VALUE_BYTES
    parsed, rs = rows(
        scheduled("E2", "Scheduled", "2026-01-01T00:00:00Z", parent=parent, resources=names[:3])
    )
    assert [r.Resources for r in rs] == [names[:3], None, None] and not parsed.notes


def test_an_undocumented_status_is_recorded_counted_and_named():
    parsed, (row,) = rows(scheduled("E1", "Exploded", "2026-01-01T00:00:00Z"))
    assert row.EventStatus == "Exploded" and parsed.unknown_statuses == 1
    assert "'Exploded' is not one of Scheduled, Started, Completed, Canceled" in parsed.notes[0]
    assert not rows(scheduled("E1", "Canceled", "2026-01-01T00:00:00Z"))[0].unknown_statuses


def test_any_exception_in_one_event_is_a_problem_and_the_others_go_on():
    bad = scheduled("E1", "Scheduled", "2026-01-01T00:00:00Z")
    bad["data"]["resourceInfo"]["properties"]["Resources"] = [{"not": "a name"}]
    weird = scheduled("E2", "Scheduled", "2026-01-01T00:00:00Z")
    weird["data"]["operationalInfo"] = {"resourceEventTime": ["not", "a", "time"]}
    parsed, rs = rows(bad, weird, scheduled("E3", "Started", "2026-01-01T00:00:00Z"))
    assert [r.EventId for r in rs] == ["E3"] and len(parsed.problems) == 2
    assert [item["id"] for _, item in parsed.rejected] == [bad["id"], weird["id"]]
