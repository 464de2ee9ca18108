"""The workbooks: schema, parameters, columns the visuals refer to, and how Bicep deploys them.

Their KQL is analyzed in test_kql.py; here the visuals are held to the columns each query really
returns (from the same Kusto analysis), so a renamed column cannot silently blank a chart.
"""

from __future__ import annotations

import json

import jsonschema
import pytest
from infra_support import bicep, catalog, kql, workbooks
from infra_support.paths import DASHBOARDS, INFRA, REPO, WORKBOOK_SCHEMA, WORKBOOKS

FLEET = DASHBOARDS / "scheduled-events.workbook.json"
AGENTS = DASHBOARDS / "agent-health.workbook.json"
IDS = [p.name for p in WORKBOOKS]
LA = workbooks.LOG_ANALYTICS


@pytest.fixture(scope="module")
def results():
    try:
        return catalog.results()
    except kql.KqlToolMissing as exc:
        pytest.fail(f"KQL language service not installed: {exc}", pytrace=False)


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


@pytest.mark.parametrize("path", WORKBOOKS, ids=IDS)
def test_item_queries_deduplicate_on_record_id(path):
    for q in workbooks.queries(workbooks.load(path), path.name):
        if q.kind == "item":
            assert "summarize arg_max(TimeGenerated, *) by RecordId" in q.text, (
                f"{q.name}: delivery is at-least-once"
            )


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


def test_column_check_is_real(results):
    e = next(
        e
        for e in catalog.entries()
        if e.kind == "workbook" and e.workbook_query.name == "upcoming-impactful"
    )
    content = json.loads(json.dumps(e.workbook_query.content))
    content["gridSettings"]["formatters"][0]["columnMatch"] = "EventID"
    assert _columns_used(content) - set(results[e.id].result_columns) == {"EventID"}


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


def test_bicep_deploys_exactly_these_workbooks():
    path = INFRA / "modules" / "workbooks.bicep"
    tree = bicep.parse(path.read_bytes())
    entries = bicep.literal_value(bicep.variables(tree)["workbooks"], path.parent)
    loaded = {e["serializedData"].path for e in entries}
    assert all(e["serializedData"].function == "loadTextContent" for e in entries)
    assert loaded == {p.resolve() for p in WORKBOOKS}, [str(p.relative_to(REPO)) for p in loaded]
