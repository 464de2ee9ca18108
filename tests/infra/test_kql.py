"""Every KQL query (library, alerts, DCR transforms, workbook items) analyzed by Kusto's own
language service (npm @kusto/language-service-next, driven through Node: tools/kql/check.js) against
the two
tables generated from src/se_forwarder/contract.json. Zero errors allowed. Workbook queries are
analyzed from the dashboards/queries/workbook/ files the workbooks are generated from.

Setup: `npm ci --prefix tools/kql`. Without it these tests fail (they do not skip).
"""

from __future__ import annotations

import re

import bicep_eval as bicep
import pytest
from helpers.infra import catalog, kql, workbooks
from helpers.infra.paths import INFRA, QUERIES, WORKBOOK_QUERIES, WORKBOOKS, contract

pytestmark = pytest.mark.e2e

ENTRIES = catalog.entries()
BY_KIND = {
    k: [e for e in ENTRIES if e.kind == k] for k in ("library", "alert", "transform", "workbook")
}
OUR_TABLES = {spec["table"] for spec in contract()["tables"].values()}


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    return catalog.results_or_fail(tmp_path_factory)


@pytest.mark.external
def test_language_service_is_installed():
    try:
        kql.ensure_tool()
    except kql.KqlToolMissing as exc:
        pytest.fail(str(exc), pytrace=False)


def test_there_is_something_to_check():
    assert len(BY_KIND["library"]) >= 10
    assert len(BY_KIND["alert"]) == 8
    assert {e.transform_key for e in BY_KIND["transform"]} == set(contract()["tables"])
    assert len(BY_KIND["workbook"]) >= 30


@pytest.mark.external
@pytest.mark.parametrize("entry", ENTRIES, ids=[e.id for e in ENTRIES])
def test_query_has_no_errors(entry, results):
    r = results[entry.id]
    assert r.errors == [], f"{entry.id}: {r.describe_errors()}\n--- query ---\n{entry.query.text}"


@pytest.mark.external
@pytest.mark.parametrize(
    "entry",
    [e for e in ENTRIES if e.kind != "transform"],
    ids=[e.id for e in ENTRIES if e.kind != "transform"],
)
def test_query_reads_the_contract_tables_only(entry, results):
    referenced = set(results[entry.id].tables_referenced)
    assert referenced, f"{entry.id} reads no table"
    assert referenced <= OUR_TABLES, referenced - OUR_TABLES


def test_library_queries_are_commented():
    for e in BY_KIND["library"] + BY_KIND["alert"]:
        header = kql.header_comment(e.query.text)
        assert len(header.splitlines()) >= 1 and len(header) > 40, (
            f"{e.id}: start with a comment saying what it shows"
        )
    for e in BY_KIND["workbook"]:
        header = kql.header_comment(e.query_file.read_text("utf-8"))
        assert len(header) > 40, f"{e.query_file}: start with a comment saying what it shows"


def test_library_and_alert_queries_can_be_pasted_as_they_are():
    """Only the files that feed workbooks may hold workbook {Param} placeholders."""
    for e in BY_KIND["library"] + BY_KIND["alert"] + BY_KIND["transform"]:
        assert workbooks.placeholders(e.query.text) == set(), f"{e.id}: workbook placeholder"
        assert WORKBOOK_QUERIES not in e.source.parents, e.id


def test_every_workbook_query_file_is_analyzed_exactly_once():
    """The workbook entries come from dashboards/queries/workbook/*.kql, one entry per file; the
    only files left out are Azure Resource Graph queries (not Log Analytics tables)."""
    gen = workbooks.generator()
    files = [e.query_file for e in BY_KIND["workbook"]]
    assert len(files) == len(set(files)), "a file analyzed twice"
    resource_graph = set()
    for path in WORKBOOKS:
        for s in gen.slots(workbooks.load(path), path, WORKBOOK_QUERIES):
            if s.query_type == gen.RESOURCE_GRAPH:
                resource_graph.add(s.file)
    all_files = set(WORKBOOK_QUERIES.rglob("*.kql"))
    assert set(files) == all_files - resource_graph
    assert resource_graph and resource_graph <= all_files
    for e in BY_KIND["workbook"]:
        expected = workbooks.substitute(
            gen.query_of(e.query_file), workbooks.parameters(workbooks.load(e.source))
        )
        assert e.query.text == expected, e.id


# --- the DCR transformations ---------------------------------------------------------------------


@pytest.mark.external
@pytest.mark.parametrize("entry", BY_KIND["transform"], ids=[e.id for e in BY_KIND["transform"]])
def test_transform_stays_in_the_transformation_subset(entry, results):
    assert kql.transform_violations(results[entry.id]) == []


@pytest.mark.external
@pytest.mark.parametrize("entry", BY_KIND["transform"], ids=[e.id for e in BY_KIND["transform"]])
def test_transform_outputs_exactly_the_table_columns(entry, results):
    spec = contract()["tables"][entry.transform_key]
    assert results[entry.id].result_columns == [c["name"] for c in spec["columns"]]


def test_dcr_loads_the_transforms_by_contract_key():
    path = INFRA / "modules" / "dcr.bicep"
    tree = bicep.parse(path.read_bytes())
    transforms = bicep.literal_value(bicep.variables(tree)["transforms"], path.parent)
    assert set(transforms) == set(contract()["tables"])
    for key, loaded in transforms.items():
        assert isinstance(loaded, bicep.Loaded) and loaded.function == "loadTextContent"
        assert loaded.path == (QUERIES / "transforms" / f"{key}.kql").resolve()
    assert "transformKql: transforms[t.key]" in path.read_text("utf-8")


# --- alert rules ---------------------------------------------------------------------------------


ALERTS_BICEP = INFRA / "modules" / "alerts.bicep"


def _rules():
    tree = bicep.parse(ALERTS_BICEP.read_bytes())
    return bicep.literal_value(bicep.variables(tree)["allRules"], ALERTS_BICEP.parent)


def _alert_query(key: str) -> str:
    rule = next(r for r in _rules() if r["key"] == key)
    return rule["query"].path.read_text("utf-8")


def _code(text: str) -> str:
    """KQL without its // comments (so a comment cannot satisfy a check)."""
    return "\n".join(line.split("//", 1)[0] for line in text.splitlines())


def _duration(iso: str) -> float:
    """Seconds of an ISO 8601 duration like PT15M, P1D, P2D (what the rules use)."""
    m = re.fullmatch(r"P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?)?", iso)
    assert m and iso not in ("P", "PT"), iso
    d, h, mi = (int(x or 0) for x in m.groups())
    return d * 86400 + h * 3600 + mi * 60


def test_alert_rules_load_every_alert_query_and_nothing_else():
    loaded = {r["query"].path for r in _rules()}
    assert all(isinstance(r["query"], bicep.Loaded) for r in _rules())
    assert loaded == {e.source.resolve() for e in BY_KIND["alert"]}


def test_alert_rules_match_the_issue():
    rules = {r["key"]: r for r in _rules()}
    expected = {  # key: (severity, resource-centric)
        "impactful-event-scheduled": (2, True),
        "impactful-events-fleet": (2, False),
        "started-without-notice": (1, True),
        "agent-silent": (2, True),
        "many-vms-hit": (1, False),
        "delivery-trouble": (3, True),
        "service-concurrency-risk": ("serviceRiskSeverity", False),  # a parameter (issue 20)
        # one alert per event, not per VM: Azure keeps at most 300 alerts per evaluation (issue 28)
        "impactful-event-unwatched": (2, False),
    }
    assert {
        k: (getattr(r["severity"], "source", r["severity"]), bool(r["resourceIdColumn"]))
        for k, r in rules.items()
    } == expected
    assert rules["many-vms-hit"]["windowSize"] == "PT10M"
    assert rules["impactful-event-scheduled"]["dimensions"][:2] == ["EventId", "EventType"]
    assert "NotBefore" in rules["impactful-event-scheduled"]["dimensions"]


@pytest.mark.external
def test_alert_columns_exist_in_the_query_results(results):
    for rule in _rules():
        qid = next(e.id for e in BY_KIND["alert"] if e.source.resolve() == rule["query"].path)
        columns = results[qid].result_columns
        assert columns is not None, qid
        needed = list(rule["dimensions"])
        if rule["resourceIdColumn"]:
            needed.append(rule["resourceIdColumn"])
        if rule["metricMeasureColumn"]:
            needed.append(rule["metricMeasureColumn"])
        missing = [c for c in needed if c not in columns]
        assert missing == [], f"{rule['key']}: {missing} not among {columns}"
        if rule["resourceIdColumn"]:
            assert rule["resourceIdColumn"] == "VmResourceId"


# --- the analysis really checks (negative controls) -----------------------------------------------


@pytest.mark.external
@pytest.mark.parametrize("qid", sorted(catalog.NEGATIVE))
def test_analysis_reports_errors_for_broken_queries(qid, results):
    assert results[qid].errors, f"{qid} should have been rejected"


@pytest.mark.external
def test_unknown_column_is_named_in_the_error(results):
    messages = " ".join(e["message"] for e in results["negative:unknown-column"].errors)
    assert "NoSuchColumn" in messages


@pytest.mark.external
@pytest.mark.parametrize("qid", sorted(catalog.NEGATIVE_TRANSFORMS))
def test_transform_subset_check_rejects(qid, results):
    r = results[qid]
    assert r.errors or kql.transform_violations(r), f"{qid} should have been rejected"


@pytest.mark.external
def test_transform_subset_names_the_forbidden_operator(results):
    assert any(
        "SummarizeOperator" in v
        for v in kql.transform_violations(results["negative-transform:summarize"])
    )
    assert any(
        "MvExpandOperator" in v
        for v in kql.transform_violations(results["negative-transform:mv-expand"])
    )


@pytest.mark.external
def test_missing_language_service_is_a_clear_failure(tmp_path, monkeypatch):
    monkeypatch.setattr(kql, "KQL_TOOL", tmp_path)
    with pytest.raises(kql.KqlToolMissing, match=r"npm ci --prefix tools/kql"):
        kql.ensure_tool()


# --- alert semantics (review findings) --------------------------------------------------------


def _resource_properties(symbol: str) -> dict:
    tree = bicep.parse(ALERTS_BICEP.read_bytes())
    res = next(r for r in bicep.resources(tree) if r.symbol == symbol)
    props = {k: v for k, v, _ in bicep.object_properties(res.body)}["properties"]
    return {k: bicep.text(v) for k, v, _ in bicep.object_properties(props)}


def test_alert_rules_skip_query_validation():
    # a parameter, false unless a first deployment needs it
    # (tests/infra/test_bicep_deploy_rules.py):
    # the tables come from an earlier deployment, and validation catches a query Azure refuses
    props = _resource_properties("alertRules")
    assert props.get("skipQueryValidation") == "skipQueryValidation"
    tree = bicep.parse(ALERTS_BICEP.read_bytes())
    rule = next(r for r in bicep.resources(tree) if r.symbol == "alertRules")
    tf, body = bicep.resource_body_type(rule.type_and_version)
    props = tf.at(body["properties"]["properties"]["type"])
    assert "skipQueryValidation" in props["properties"], "not in this API version"


def test_alert_rules_auto_mitigate_per_rule():
    assert _resource_properties("alertRules").get("autoMitigate") == "rule.autoMitigate"
    assert all(isinstance(r["autoMitigate"], bool) for r in _rules())


@pytest.mark.parametrize("key", ["started-without-notice", "many-vms-hit"])
def test_started_alerts_select_by_ingestion_time(key):
    """A Started record often arrives only after the VM is back: TimeGenerated is old by then."""
    rule = next(r for r in _rules() if r["key"] == key)
    code = _code(_alert_query(key))
    assert re.search(r"ingestion_time\(\)\s*>\s*ago\(", code) or re.search(
        r"Ingested\s*>\s*ago\(", code
    ), f"{key}: select new records by ingestion_time()"
    assert "ingestion_time()" in code
    assert not re.search(r"TimeGenerated\s*>\s*ago\((\d+)m\)", code), (
        f"{key}: a short TimeGenerated window misses late records"
    )
    assert rule["overrideQueryTimeRange"], f"{key}: the query must read more than the window"
    assert _duration(rule["overrideQueryTimeRange"]) >= 86400


def test_no_alert_filters_started_records_on_a_short_time_generated_window():
    for rule in _rules():
        code = _code(rule["query"].path.read_text("utf-8"))
        if '"Started"' not in code:
            continue
        for m in re.finditer(r"TimeGenerated\s*>\s*ago\((\d+)([mh])\)", code):
            minutes = int(m.group(1)) * (60 if m.group(2) == "h" else 1)
            assert minutes >= 24 * 60, (
                f"{rule['key']}: TimeGenerated > ago({m.group(1)}{m.group(2)})"
            )


def test_many_vms_hit_counts_distinct_vm_ids_and_excludes_expected_churn():
    code = _code(_alert_query("many-vms-hit"))
    assert re.search(r"\b(dcount|dcountif|count_distinct|count_distinctif)\(VmId\b", code)
    assert "VmsHit" in code
    assert re.search(r'EventSource\s*==\s*"User"', code) and "excludeUserEvents" in code
    assert re.search(r"EventType\s*!in\s*\(excludedEventTypes\)", code)


def test_many_vms_hit_exclusions_are_wired_to_parameters():
    """alerts.bicep replaces the query's default lines: they must really be in the query."""
    tree = bicep.parse(ALERTS_BICEP.read_bytes())
    variables = bicep.variables(tree)
    query = _alert_query("many-vms-hit")
    for var in ("excludedTypesDefault", "excludeUserDefault"):
        default = bicep.string_value(variables[var])
        assert default and default in query, f"{var} {default!r} is not in many-vms-hit.kql"
    params = bicep.params(tree)
    assert {"manyVmsExcludedEventTypes", "manyVmsExcludeUserEvents"} <= set(params)
    src = ALERTS_BICEP.read_text("utf-8")
    assert (
        "replace(replace(rule.query, excludedTypesDefault, excludedTypesValue), "
        "excludeUserDefault, excludeUserValue)" in src
    )
    default_types = re.search(
        r"param manyVmsExcludedEventTypes array = \[(.*?)\]", src, re.DOTALL
    ).group(1)
    assert set(re.findall(r"'(\w+)'", default_types)) == {"Terminate", "Preempt"}


def test_fleet_level_impactful_alert_and_optional_per_vm_alert():
    rules = {r["key"]: r for r in _rules()}
    fleet = rules["impactful-events-fleet"]
    assert fleet["dimensions"][0] == "EventId" and not fleet["resourceIdColumn"]
    assert fleet["metricMeasureColumn"] == "VmsHit"
    code = _code(_alert_query("impactful-events-fleet"))
    # distinct VMs: dcount(VmId), or count() over one row per (EventId, VmId) (exact at any size)
    assert re.search(r"VmsHit\s*=\s*((dcount|count_distinct)\(VmId\)|count\(\))", code)
    # the last summarize (one row per event) is by EventId
    assert re.search(r"by EventId\b[^|]*$", code.rsplit("| project", 1)[0].strip(), re.MULTILINE)
    tree = bicep.parse(ALERTS_BICEP.read_bytes())
    assert "perVmImpactfulAlert" in bicep.params(tree)
    rules_expr = bicep.text(bicep.variables(tree)["rules"])
    assert "filter(allRules" in rules_expr and "perVmImpactfulAlert" in rules_expr
    assert "'impactful-event-scheduled'" in rules_expr
    main = (INFRA / "main.bicep").read_text("utf-8")
    assert "perVmImpactfulAlert: perVmImpactfulAlert" in main


def test_hardware_failure_alert_requires_a_recent_previous_poll():
    code = _code(_alert_query("started-without-notice"))
    assert re.search(r"isnotnull\(UncertaintySeconds\)\s+and\s+UncertaintySeconds\s*<=\s*10", code)


def test_agent_silent_alert_does_not_resolve_after_a_day_and_skips_deleted_vms():
    rule = next(r for r in _rules() if r["key"] == "agent-silent")
    # the longest a log alert may query: a 1-day range resolved the alert after a day of silence
    assert _duration(rule["overrideQueryTimeRange"]) == 2 * 86400
    assert rule["autoMitigate"] is True  # stateless would raise a new alert every 5 minutes
    code = _code(_alert_query("agent-silent"))
    assert "ago(1d)" not in code
    days = {int(d) for d in re.findall(r"ago\((\d+)d\)", code)}
    assert days and {d * 86400 for d in days} == {_duration(rule["overrideQueryTimeRange"])}
    assert '"Terminate", "Preempt"' in code and "StartedAt" in code
    assert "GoneAt >= TimeGenerated - 30m" in code


@pytest.mark.parametrize(
    "qid",
    [
        "dashboards/queries/open-events.kql",
        "dashboards/queries/upcoming-impactful.kql",
    ],
)
def test_open_event_library_queries_close_terminate_preempt_and_orphans(qid):
    code = _code((INFRA.parent / qid).read_text("utf-8"))
    assert 'EventType in ("Terminate", "Preempt")' in code and "ago(15m)" in code
    assert "ScheduledEventsAgent_CL" in code and "LastHeartbeat" in code
    assert re.search(
        r"\b((dcountif|count_distinctif)\(VmId, AffectsThisVm\)|countif\(AffectsThisVm == true\))",
        code,
    )
    assert "make_set_if(VmName, AffectsThisVm, 100)" not in code


def test_hardware_failure_library_query_requires_a_recent_previous_poll():
    for name in ("hardware-failures.kql", "started-last-24h.kql"):
        code = _code((QUERIES / name).read_text("utf-8"))
        assert re.search(
            r"isnotnull\(UncertaintySeconds\)\s+and\s+UncertaintySeconds\s*<=\s*10", code
        ), name


def test_alert_query_ranges_stay_within_the_log_alert_limit():
    """A log alert's query time range is at most 2 days (Azure Monitor); a query that asks for
    more silently gets 2 days."""
    for rule in _rules():
        if rule["overrideQueryTimeRange"]:
            assert _duration(rule["overrideQueryTimeRange"]) <= 2 * 86400, rule["key"]
        for m in re.finditer(
            r"ago\((\d+)d\)|lookback = (\d+)d", _code(rule["query"].path.read_text("utf-8"))
        ):
            days = int(m.group(1) or m.group(2))
            assert days <= 2, f"{rule['key']}: {m.group(0)} reads more than a log alert can"


# --- Azure Resource Graph: maintenanceresources (the declared schema the report loads too) -------


def _resource_graph_queries() -> list[kql.Query]:
    """The library's Resource Graph files and every workbook Resource Graph item that reads
    maintenanceresources, with the workbook's parameters substituted as the portal would."""
    from se_forwarder.report.workbooks import argrows

    table, _ = argrows.schema()
    out = [
        kql.Query(p.relative_to(QUERIES).as_posix(), p.read_text("utf-8"))
        for p in kql.kql_files(QUERIES / "resource-graph")
    ]
    gen = workbooks.generator()
    for wb_path in WORKBOOKS:
        wb = workbooks.load(wb_path)
        params = workbooks.parameters(wb)
        for _, item in workbooks.walk_items(wb["items"]):
            c = item.get("content", {})
            if item.get("type") == 3 and c.get("queryType") == 1 and table in c.get("query", ""):
                f = (
                    WORKBOOK_QUERIES
                    / wb_path.name.removesuffix(".workbook.json")
                    / f"{item['name']}.kql"
                )
                out.append(
                    kql.Query(
                        f"workbook/{f.parent.name}/{f.name}",
                        workbooks.substitute(gen.query_of(f), params),
                    )
                )
    return out


@pytest.mark.external
def test_resource_graph_queries_check_against_the_declared_schema():
    from se_forwarder.report.workbooks import argrows

    table, schema = argrows.schema()
    queries = _resource_graph_queries()
    assert {q.id for q in queries} >= {
        "resource-graph/platform-events.kql",
        "resource-graph/platform-status-counts.kql",
        "workbook/scheduled-events/platform-events.kql",
    }
    queries.append(kql.Query("negative:arg-column", f"{table} | where nosuchcolumn == 1"))
    res = kql.analyze(queries, tables={table: [list(c) for c in schema]})
    for q in queries[:-1]:
        r = res[q.id]
        assert r.errors == [], f"{q.id}: {r.describe_errors()}"
        assert r.tables_referenced == [table]
        assert "PlatformStatus" in (r.result_columns or [])
    assert res["negative:arg-column"].errors, "the analysis must see an unknown column"


def test_service_concurrency_risk_is_wired_to_parameters():
    """Issue 20: tag, K, X and severity are parameters; alerts.bicep replaces the query's default
    lines (they must really be in the query) and the rule's severity is the parameter."""
    tree = bicep.parse(ALERTS_BICEP.read_bytes())
    query = _alert_query("service-concurrency-risk")
    defaults = bicep.literal_value(bicep.variables(tree)["riskDefaults"], ALERTS_BICEP.parent)
    assert len(defaults) == 3
    for d in defaults:
        assert any(line.startswith(d) for line in query.splitlines()), f"{d!r} is not in the query"
    assert {"serviceTag", "serviceRiskVms", "serviceRiskPercent", "serviceRiskSeverity"} <= set(
        bicep.params(tree)
    )
    src = ALERTS_BICEP.read_text("utf-8")
    assert all(f"riskDefaults[{k}], riskValues[{k}]" in src for k in range(3))
    rule = next(r for r in _rules() if r["key"] == "service-concurrency-risk")
    assert rule["dimensions"] == ["Service"] and rule["metricMeasureColumn"] == "VmsAtOnce"


def test_every_rule_that_can_raise_many_alerts_is_capped_below_azures_limit():
    """Issue 28: Azure keeps at most 300 alerts per evaluation. Every rule with more than one row
    carries the cap (dashboards/definitions/alert-cap.kql) whose lines alerts.bicep replaces with
    maxAlertsPerRule (at most 300) and, for a rule raised on resources, the workspace's id (its
    row beyond the cap is raised there); many-vms-hit returns one row at most (top 1)."""
    tree = bicep.parse(ALERTS_BICEP.read_bytes())
    variables = bicep.variables(tree)
    limit, workspace = bicep.literal_value(variables["capDefaults"], ALERTS_BICEP.parent)
    src = ALERTS_BICEP.read_text("utf-8")
    assert "capDefaults[0], capValues[0]), capDefaults[1], capValues[1])" in src
    assert re.search(r"@maxValue\(300\)\nparam maxAlertsPerRule int = (\d+)", src)
    assert int(re.search(r"param maxAlertsPerRule int = (\d+)", src).group(1)) == int(
        re.search(r"\d+", limit).group(0)
    )
    main = (ALERTS_BICEP.parent.parent / "main.bicep").read_text("utf-8")
    assert "maxAlertsPerRule: maxAlertsPerRule" in main
    for rule in _rules():
        query = _alert_query(rule["key"])
        if rule["key"] == "many-vms-hit":
            assert "| top 1 by" in query and limit not in query
            continue
        lines = [line.split("   //")[0] for line in query.splitlines()]
        assert limit in lines, rule["key"]
        assert "// ---- end of alert-cap ----" in query, rule["key"]
        assert (workspace in lines) == bool(rule["resourceIdColumn"]), rule["key"]
