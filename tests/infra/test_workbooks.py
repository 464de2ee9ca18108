"""The workbooks: schema, parameters, columns the visuals refer to, and how Bicep deploys them.

Their KQL lives in dashboards/queries/workbook/ and is copied into the JSON by
tools/build_workbooks.py (held here: no drift, no inline-only query). It is analyzed in
test_kql.py; here the visuals are held to the columns each query really returns (from the same
Kusto analysis), so a renamed column cannot silently blank a chart.
"""

from __future__ import annotations

import json
import re
import shutil

import bicep_eval as bicep
import jsonschema
import pytest
from helpers.infra import catalog, workbooks
from helpers.infra.paths import (
    DASHBOARDS,
    INFRA,
    REPO,
    WORKBOOK_QUERIES,
    WORKBOOK_SCHEMA,
    WORKBOOKS,
)

FLEET = DASHBOARDS / "scheduled-events.workbook.json"
AGENTS = DASHBOARDS / "agent-health.workbook.json"
IDS = [p.name for p in WORKBOOKS]
LA = workbooks.LOG_ANALYTICS


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    return catalog.results_or_fail(tmp_path_factory)


def test_both_workbooks_exist():
    assert set(WORKBOOKS) == {FLEET, AGENTS}


@pytest.mark.parametrize("path", WORKBOOKS, ids=IDS)
def test_validates_against_the_workbook_schema(path):
    schema = json.loads(WORKBOOK_SCHEMA.read_text("utf-8"))
    errors = sorted(jsonschema.Draft7Validator(schema).iter_errors(workbooks.load(path)), key=str)
    assert errors == [], "\n".join(
        f"{list(e.absolute_path)}: {e.message[:300]}" for e in errors[:20]
    )


def test_schema_check_is_real():
    schema = json.loads(WORKBOOK_SCHEMA.read_text("utf-8"))
    wb = workbooks.load(FLEET)
    wb["items"][0]["content"]["json"] = None  # the schema rejects nulls, as the issue says
    assert list(jsonschema.Draft7Validator(schema).iter_errors(wb))


@pytest.mark.parametrize("path", WORKBOOKS, ids=IDS)
def test_every_placeholder_names_a_parameter(path):
    wb = workbooks.load(path)
    params = workbooks.parameters(wb)
    for q in workbooks.queries(wb, path.name):
        assert workbooks.placeholders(q.text) <= set(params), q.name
    assert "Workspace" in params and params["Workspace"]["type"] == 5


def test_unknown_placeholder_is_refused():
    with pytest.raises(workbooks.UnknownParameter):
        workbooks.substitute(
            "ScheduledEvents_CL | where Zone in ({Zon})", {"Zone": {"type": 2, "multiSelect": True}}
        )


def test_fleet_view_has_the_parameters_the_issue_asks_for():
    params = workbooks.parameters(workbooks.load(FLEET))
    assert {"TimeRange", "Subscription", "ResourceGroup", "EventType", "Zone"} <= set(params)
    assert params["TimeRange"]["type"] == 4
    for name in ("Subscription", "ResourceGroup", "EventType", "Zone"):
        p = params[name]
        # default: everything selected ('*' is what the queries test for)
        assert (
            p["multiSelect"]
            and p["defaultValue"] == "value::all"
            and p["typeSettings"]["selectAllValue"] == "*"
        )
        assert p.get("description"), f"{name}: parameters carry an explanation"


@pytest.mark.parametrize("path", WORKBOOKS, ids=IDS)
def test_queries_target_the_chosen_workspace(path):
    for q in workbooks.queries(workbooks.load(path), path.name):
        assert q.content.get("resourceType") == LA, q.name
        assert q.content.get("crossComponentResources") == ["{Workspace}"], q.name


# one row per RecordId: its latest copy, or distinct rows that hold the RecordId (the copies of a
# heartbeat are one row but for their ingestion time, which a distinct on other columns leaves out)
DEDUPE = re.compile(
    r"summarize arg_max\(TimeGenerated, \*\) by RecordId\b|\| distinct [^|;\n]*\bRecordId\b"
)
# aggregations that count, add up or rank rows: a duplicate (at-least-once delivery) changes them
ROW_COUNTING = re.compile(r"\b(count|countif|sum|sumif|percentile)\(")
# a reduction to one row per VM or event first (its latest row) makes duplicates harmless
PER_ENTITY = re.compile(
    r"summarize [^|]*arg_max\(TimeGenerated, [^)]*\)[^|]* by (VmId|VmResourceId|EventId)\b"
)


def _kql_code(text: str) -> str:
    return "\n".join(line.split("//", 1)[0] for line in text.splitlines())


def needs_dedupe(text: str) -> bool:
    code = _kql_code(text)
    return bool(ROW_COUNTING.search(code)) and not PER_ENTITY.search(code)


def test_dedupe_rule_is_real():
    assert needs_dedupe("T | summarize n = count() by bin(TimeGenerated, 1h)")
    assert needs_dedupe("T | summarize n = countif(Phase == 'Started') by EventId")
    assert not needs_dedupe("T | summarize Agents = dcount(VmId) by bin(TimeGenerated, 1h)")
    assert not needs_dedupe("T | summarize arg_max(TimeGenerated, *) by VmId | summarize count()")
    assert not needs_dedupe("T | // count() in a comment\n summarize max(SpoolDepth)")
    assert not needs_dedupe(
        "T | summarize F = min(X), arg_max(TimeGenerated, Y) by EventId | summarize count()"
    )
    assert needs_dedupe("T | summarize I = max(P) - min(P) by VmId | summarize sum(I)")
    assert needs_dedupe("T | summarize percentile(L, 50) by bin(TimeGenerated, 1h)")
    assert DEDUPE.search("T | summarize arg_max(TimeGenerated, *) by RecordId | count")
    assert DEDUPE.search("T | distinct TimeGenerated, RecordId, PollErrors | count")
    assert not DEDUPE.search("T | distinct VmId, PollErrors | count")
    assert not DEDUPE.search("T | distinct VmId | join (U | project RecordId) on VmId")


@pytest.mark.parametrize("path", WORKBOOKS, ids=IDS)
def test_item_queries_deduplicate_where_they_count_rows(path):
    """Delivery is at-least-once: a query that counts or sums rows keeps one per RecordId first."""
    for q in workbooks.queries(workbooks.load(path), path.name):
        if q.kind == "item" and needs_dedupe(q.text):
            assert DEDUPE.search(_kql_code(q.text)), (
                f"{q.name}: counts rows without deduplicating on RecordId"
            )


def test_agent_health_does_not_dedupe_where_nothing_is_counted():
    """At 10k VMs the per-RecordId dedupe of every heartbeat is the expensive part of a chart:
    only where rows are counted, added up or ranked (percentiles)."""
    checked = 0
    for q in workbooks.queries(workbooks.load(AGENTS), AGENTS.name):
        if q.kind != "item":
            continue
        checked += 1
        if DEDUPE.search(_kql_code(q.text)):
            assert ROW_COUNTING.search(_kql_code(q.text)), (
                f"{q.name}: redundant dedupe (no row is counted)"
            )
    assert checked >= 8


def test_agent_health_charts_have_no_global_sort_with_prev():
    """Counter increases come from each heartbeat and the one before it (per VM, from a sorted
    list), never from a global sort with prev(), nor from max - min inside a bin."""
    for q in workbooks.queries(workbooks.load(AGENTS), AGENTS.name):
        code = _kql_code(q.text)
        assert "prev(" not in code, f"{q.name}: a global sort + prev() does not scale"
    for name in ("poll-errors", "delivery-trouble"):
        code = _kql_code(_item(AGENTS, name))
        assert "array_sort_asc(Times)" in code and "with_itemindex" in code, name
        assert not re.search(r"max\((\w+)\) - min\(\1\)", code), name


@pytest.mark.parametrize("path", WORKBOOKS, ids=IDS)
def test_items_have_titles_names_and_tooltips(path):
    wb = workbooks.load(path)
    names = [item.get("name") for _, item in workbooks.walk_items(wb["items"])]
    assert all(names) and len(names) == len(set(names)), "every item has a unique name"
    for q in workbooks.queries(wb, path.name):
        if q.kind != "item":
            continue
        assert q.content.get("title"), q.name
        for f in q.content.get("gridSettings", {}).get("formatters", []):
            assert f.get("tooltipFormat", {}).get("tooltip"), (
                f"{q.name}: column {f['columnMatch']} has no tooltip"
            )
        if q.content.get("visualization") == "tiles":
            assert q.content["tileSettings"]["subtitleContent"]["columnMatch"] == "Help"


def _columns_used(content: dict) -> set[str]:
    used = set()
    grid = content.get("gridSettings", {})
    used |= {f["columnMatch"] for f in grid.get("formatters", [])}
    used |= {lbl["columnId"] for lbl in grid.get("labelSettings", [])}
    used |= {s["itemKey"] for s in grid.get("sortBy", [])}
    chart = content.get("chartSettings", {})
    used |= {c for c in [chart.get("xAxis"), chart.get("group")] if c}
    used |= set(chart.get("yAxis", []))
    tiles = content.get("tileSettings", {})
    used |= {
        v["columnMatch"] for k, v in tiles.items() if isinstance(v, dict) and "columnMatch" in v
    }
    used |= {tiles[k] for k in ("sortCriteriaField",) if k in tiles}
    if "exportFieldName" in content:
        used.add(content["exportFieldName"])
    return used


@pytest.mark.external
@pytest.mark.parametrize("path", WORKBOOKS, ids=IDS)
def test_visuals_refer_to_columns_the_query_returns(path, results):
    checked = 0
    for e in catalog.entries():
        if e.kind != "workbook" or e.source != path or e.workbook_query.kind != "item":
            continue
        columns = results[e.id].result_columns
        assert columns is not None, e.id
        missing = _columns_used(e.workbook_query.content) - set(columns)
        assert missing == set(), f"{e.id}: {sorted(missing)} not among {columns}"
        checked += 1
    assert checked >= 10


@pytest.mark.external
def test_column_check_is_real(results):
    e = next(
        e
        for e in catalog.entries()
        if e.kind == "workbook" and e.workbook_query.name == "upcoming-impactful"
    )
    content = json.loads(json.dumps(e.workbook_query.content))
    content["gridSettings"]["formatters"][0]["columnMatch"] = "EventID"
    assert _columns_used(content) - set(results[e.id].result_columns) == {"EventID"}


def _item(path, name: str) -> str:
    return next(
        q.text for q in workbooks.queries(workbooks.load(path), path.name) if q.name == name
    )


def _item_content(path, name: str) -> dict:
    return next(
        it
        for _, it in workbooks.walk_items(workbooks.load(path)["items"])
        if it.get("name") == name
    )


@pytest.mark.parametrize("name", ["now-tiles", "upcoming-impactful", "open-events"])
def test_open_events_close_without_a_removed_record(name):
    """Terminate/Preempt: the VM is gone before its agent can see the event removed."""
    code = _kql_code(_item(FLEET, name))
    # open: event-state's Open, or event-vms' EventOpen (the same, for events Azure alone recorded)
    assert re.search(r"where (Event)?Open\b", code) and 'Phase != "Removed"' in code
    assert re.search(
        r'not\(EventType in \("Terminate", "Preempt"\) and (isnotnull\(Due\) and )?Due < '
        r"ago\(15m\)\)",
        code,
    )
    assert "ScheduledEventsAgent_CL" in code and re.search(r"LastHeartbeat < Due", code)
    assert "Due = coalesce(StartedAt, NotBefore)" in code


def test_due_soon_is_the_next_hour_only():
    code = _kql_code(_item(FLEET, "now-tiles"))
    assert "MinutesToNotBefore between (0 .. 60)" in code
    assert "MinutesToNotBefore <= 60" not in code


@pytest.mark.parametrize("name", ["upcoming-impactful", "open-events"])
def test_vms_hit_is_a_distinct_count_of_vm_ids(name):
    code = _kql_code(_item(FLEET, name))
    # dcountif(VmId, ...), or countif over one row per (EventId, VmId) (exact at any size)
    assert re.search(
        r"VmsHit = ((dcountif|count_distinctif)\(VmId, AffectsThisVm\)|countif\(AffectsThisVm == "
        r"true\))",
        code,
    )
    assert "array_length(VmNamesHit)" not in code
    m = re.search(r"make_set_if\(VmName, AffectsThisVm( == true)?, (\d+)\)", code)
    assert m and int(m.group(2)) <= 20, "the name list is for display only"


def test_hardware_failures_require_a_recent_previous_poll():
    rule = r"isnotnull\(UncertaintySeconds\)\s+and\s+UncertaintySeconds\s*<=\s*10"
    for name in ("hardware-failures", "range-tiles", "started-24h"):
        assert re.search(rule, _kql_code(_item(FLEET, name))), name


@pytest.mark.parametrize("name", ["started-24h", "many-vms"])
def test_start_times_come_from_the_started_at_column(name):
    code = _kql_code(_item(FLEET, name))
    assert "StartedAt = min(StartedAt)" in code
    assert 'minif(TimeGenerated, Phase == "Started")' not in code


def test_hardware_failures_seen_at_is_first_seen_at():
    assert "SeenAt = min(FirstSeenAt)" in _kql_code(_item(FLEET, "hardware-failures"))


@pytest.mark.parametrize(
    "path,name",
    [(FLEET, "silent-agents"), (AGENTS, "tiles"), (AGENTS, "silent"), (AGENTS, "fleet")],
)
def test_silent_agents_exclude_deleted_vms_and_look_back_a_week(path, name):
    code = _kql_code(_item(path, name))
    assert "ago(1d)" not in code
    assert "ScheduledEventsAgent_CL\n    | where TimeGenerated > ago(7d)" in code or (
        "ScheduledEventsAgent_CL\n| where TimeGenerated > ago(7d)" in code
    )
    assert 'EventType in ("Terminate", "Preempt")' in code and "GoneAt" in code
    assert _item_content(path, name)["content"]["timeContext"]["durationMs"] >= 7 * 86400000


def test_vms_without_any_heartbeat_come_from_resource_graph():
    wb = workbooks.load(AGENTS)
    items = {it.get("name"): it for _, it in workbooks.walk_items(wb["items"])}
    hb = items["heartbeat-vms"]["content"]
    assert hb["queryType"] == 0 and "ScheduledEventsAgent_CL" in hb["query"]
    assert "VmId = tolower(VmId)" in hb["query"]
    # one single-table Resource Graph query per kind of VM (no cross-table union in Resource Graph)
    sources = {
        "arg-vms": ("resources", "microsoft.compute/virtualmachines", "never-reported"),
        "arg-scale-set-vms": (
            "computeresources",
            "microsoft.compute/virtualmachinescalesets/virtualmachines",
            "never-reported-scale-set-vms",
        ),
    }
    for source, (table, rtype, merge_name) in sources.items():
        arg = items[source]["content"]
        assert arg["queryType"] == 1 and arg["resourceType"] == "microsoft.resourcegraph/resources"
        code = _kql_code(arg["query"]).strip()
        assert code.startswith(table + "\n") and f'type =~ "{rtype}"' in code
        assert "union" not in code and "VmId = tolower(tostring(properties.vmId))" in code
        merge_item = items[merge_name]["content"]
        assert merge_item["queryType"] == 7
        merge = json.loads(merge_item["query"])
        assert merge["version"] == "Merge/1.0"
        (m,) = merge["merges"]
        assert (m["mergeType"], m["leftTable"], m["rightTable"]) == (
            "leftanti",
            source,
            "heartbeat-vms",
        )
        assert m["leftColumn"] == "VmId" and m["rightColumn"] == "VmId"
        assert all(r["originalName"].startswith(f"[{source}].") for r in merge["projectRename"])
    la_names = {q.name for q in workbooks.queries(wb, AGENTS.name)}
    assert "never-reported" not in la_names, "the merge is not a Log Analytics query"


def test_drill_down_is_wired():
    wb = workbooks.load(FLEET)
    params = workbooks.parameters(wb)
    assert params["EventId"]["type"] == 1
    exporters = [
        q
        for q in workbooks.queries(wb, FLEET.name)
        if q.content.get("exportParameterName") == "EventId"
    ]
    assert len(exporters) >= 3
    drill = next(q for q in workbooks.queries(wb, FLEET.name) if q.name == "drilldown-records")
    assert "{EventId}" in drill.text


def test_drill_down_event_id_cannot_break_out_of_its_string():
    """A quote in a pasted EventId must not end the string literal (it is pasted text)."""
    drill = _item(FLEET, "drilldown-records")
    assert "'{EventId}'" not in drill and '"{EventId}"' not in drill
    assert "```{EventId}```" in drill
    prm = workbooks.parameters(workbooks.load(FLEET))["EventId"]
    (rule,) = prm["typeSettings"]["paramValidationRules"]
    pattern = re.compile(rule["regExp"])
    assert rule["match"] is True
    assert pattern.match("C7061BAC-AFDC-4513-B24B-AA5F13A16123")
    assert pattern.match(" C7061BAC-AFDC-4513-B24B-AA5F13A16123 ")
    for bad in ("x' or 1==1 or '", "a```b", 'a"b', "a\nb"):
        assert not pattern.match(bad), bad


def test_bicep_deploys_exactly_these_workbooks():
    path = INFRA / "modules" / "workbooks.bicep"
    tree = bicep.parse(path.read_bytes())
    entries = bicep.literal_value(bicep.variables(tree)["workbooks"], path.parent)
    loaded = {e["content"].path for e in entries}
    assert all(e["content"].function == "loadJsonContent" for e in entries)
    assert loaded == {p.resolve() for p in WORKBOOKS}, [str(p.relative_to(REPO)) for p in loaded]


# --- the workbooks' KQL comes from dashboards/queries/workbook/ (tools/build_workbooks.py) -------


def test_workbooks_are_generated_from_their_kql_files(capsys):
    """Edit the .kql, run `python tools/build_workbooks.py`, commit both: the JSON may not drift."""
    code = workbooks.generator().main(["--check"])
    out = capsys.readouterr()
    assert code == 0, out.out + out.err


def test_every_workbook_query_has_a_source_file():
    """No inline-only query: every query item and query-backed parameter is fed by a .kql file;
    only Merge items (JSON, not KQL) stay in the workbook. No .kql file is left unused."""
    gen = workbooks.generator()
    for path in WORKBOOKS:
        wb = workbooks.load(path)
        fed = {s.where: s for s in gen.slots(wb, path, WORKBOOK_QUERIES)}
        for where, item in workbooks.walk_items(wb["items"]):
            c = item.get("content", {})
            holders = [(where, c)] if "query" in c else []
            holders += [
                (f"{where}.content.parameters[{j}]", prm)
                for j, prm in enumerate(c.get("parameters", []) if item.get("type") == 9 else [])
                if "query" in prm
            ]
            for w, holder in holders:
                if holder.get("queryType", 0) == 7:  # a merge of other items' results
                    json.loads(holder["query"])
                    continue
                assert w in fed, f"{path.name}#{w} ({item.get('name')}): an inline-only query"
                assert fed[w].file.is_file(), f"{fed[w].file} is missing"
        assert {q.path for q in workbooks.queries(wb, path.name)} <= set(fed)
    assert gen.orphans(WORKBOOKS, WORKBOOK_QUERIES) == []


def test_drift_check_is_real(tmp_path, capsys):
    gen = workbooks.generator()
    dash, sources = tmp_path / "dashboards", tmp_path / "dashboards" / "queries" / "workbook"
    shutil.copytree(WORKBOOK_QUERIES, sources)
    for p in WORKBOOKS:
        shutil.copy(p, dash / p.name)
    assert gen.main(["--check"], dash, sources) == 0
    kql_file = sources / "scheduled-events" / "hardware-failures.kql"
    kql_file.write_text(kql_file.read_text("utf-8") + "\n| take 10\n", "utf-8")
    capsys.readouterr()
    assert gen.main(["--check"], dash, sources) == 1
    out = capsys.readouterr().out
    assert "scheduled-events.workbook.json is stale" in out and "hardware-failures" in out
    assert gen.main([], dash, sources) == 0
    assert gen.main(["--check"], dash, sources) == 0
    assert _item(dash / FLEET.name, "hardware-failures").endswith("\n| take 10")
    # the header is documentation: it is not copied into the workbook
    assert not _item(dash / FLEET.name, "hardware-failures").startswith("//")
    # an unused file and a missing file are errors, not silently skipped
    (sources / "scheduled-events" / "no-such-item.kql").write_text("// x\n\nT\n", "utf-8")
    assert gen.main(["--check"], dash, sources) == 2
    (sources / "scheduled-events" / "no-such-item.kql").unlink()
    kql_file.unlink()
    assert gen.main(["--check"], dash, sources) == 2
    assert "hardware-failures.kql" in capsys.readouterr().err


def test_source_files_need_a_header_and_a_blank_line():
    gen = workbooks.generator()
    assert gen.split_source("// what it shows\n\nT\n| take 1\n") == (
        "// what it shows",
        "T\n| take 1",
    )
    assert gen.split_source("// a\n// b\n\n// kept\nT\n\n")[1] == "// kept\nT"
    for bad in ("T | take 1\n", "// header\nT\n", "// header\n\n\n"):
        with pytest.raises(gen.SourceError):
            gen.split_source(bad)


@pytest.mark.parametrize("path", WORKBOOKS, ids=IDS)
def test_workbook_fits_load_json_content(path):
    """Bicep's loadJsonContent reads at most 1,048,576 characters."""
    assert len(path.read_text("utf-8")) <= 1_048_576
