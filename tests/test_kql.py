"""Every KQL query (library, alerts, DCR transforms, workbook items) analyzed by Kusto's own language
service (npm @kusto/language-service-next, driven through Node: tools/kql/check.js) against the two
tables generated from src/se_forwarder/contract.json. Zero errors allowed.

Setup: `npm ci --prefix tools/kql`. Without it these tests fail (they do not skip).
"""

from __future__ import annotations

import pytest
from infra_support import bicep, catalog, kql
from infra_support.paths import INFRA, QUERIES, contract

ENTRIES = catalog.entries()
BY_KIND = {
    k: [e for e in ENTRIES if e.kind == k] for k in ("library", "alert", "transform", "workbook")
}
OUR_TABLES = {spec["table"] for spec in contract()["tables"].values()}


@pytest.fixture(scope="module")
def results():
    try:
        return catalog.results()
    except kql.KqlToolMissing as exc:
        pytest.fail(f"KQL language service not installed: {exc}", pytrace=False)


def test_language_service_is_installed():
    try:
        kql.ensure_tool()
    except kql.KqlToolMissing as exc:
        pytest.fail(str(exc), pytrace=False)


def test_there_is_something_to_check():
    assert len(BY_KIND["library"]) >= 10
    assert len(BY_KIND["alert"]) == 6
    assert {e.transform_key for e in BY_KIND["transform"]} == set(contract()["tables"])
    assert len(BY_KIND["workbook"]) >= 30


@pytest.mark.parametrize("entry", ENTRIES, ids=[e.id for e in ENTRIES])
def test_query_has_no_errors(entry, results):
    r = results[entry.id]
    assert r.errors == [], f"{entry.id}: {r.describe_errors()}\n--- query ---\n{entry.query.text}"


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


# --- the DCR transformations ---------------------------------------------------------------------


@pytest.mark.parametrize("entry", BY_KIND["transform"], ids=[e.id for e in BY_KIND["transform"]])
def test_transform_stays_in_the_transformation_subset(entry, results):
    assert kql.transform_violations(results[entry.id]) == []


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


def _rules():
    path = INFRA / "modules" / "alerts.bicep"
    tree = bicep.parse(path.read_bytes())
    return bicep.literal_value(bicep.variables(tree)["rules"], path.parent)


def test_alert_rules_load_every_alert_query_and_nothing_else():
    loaded = {r["query"].path for r in _rules()}
    assert all(isinstance(r["query"], bicep.Loaded) for r in _rules())
    assert loaded == {e.source.resolve() for e in BY_KIND["alert"]}


def test_alert_rules_match_the_issue():
    rules = {r["key"]: r for r in _rules()}
    expected = {  # key: (severity, resource-centric)
        "impactful-event-scheduled": (2, True),
        "started-without-notice": (1, True),
        "agent-silent": (2, True),
        "many-vms-hit": (1, False),
        "delivery-trouble": (3, True),
    }
    assert {k: (r["severity"], bool(r["resourceIdColumn"])) for k, r in rules.items()} == expected
    assert rules["many-vms-hit"]["windowSize"] == "PT10M"
    assert rules["impactful-event-scheduled"]["dimensions"][:2] == ["EventId", "EventType"]
    assert "NotBefore" in rules["impactful-event-scheduled"]["dimensions"]


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


# --- the analysis really checks (negative controls) ------------------------------------------------


@pytest.mark.parametrize("qid", sorted(catalog.NEGATIVE))
def test_analysis_reports_errors_for_broken_queries(qid, results):
    assert results[qid].errors, f"{qid} should have been rejected"


def test_unknown_column_is_named_in_the_error(results):
    messages = " ".join(e["message"] for e in results["negative:unknown-column"].errors)
    assert "NoSuchColumn" in messages


@pytest.mark.parametrize("qid", sorted(catalog.NEGATIVE_TRANSFORMS))
def test_transform_subset_check_rejects(qid, results):
    r = results[qid]
    assert r.errors or kql.transform_violations(r), f"{qid} should have been rejected"


def test_transform_subset_names_the_forbidden_operator(results):
    assert any(
        "SummarizeOperator" in v
        for v in kql.transform_violations(results["negative-transform:summarize"])
    )
    assert any(
        "MvExpandOperator" in v
        for v in kql.transform_violations(results["negative-transform:mv-expand"])
    )


def test_missing_language_service_is_a_clear_failure(tmp_path, monkeypatch):
    monkeypatch.setattr(kql, "KQL_TOOL", tmp_path)
    with pytest.raises(kql.KqlToolMissing, match=r"npm ci --prefix tools/kql"):
        kql.ensure_tool()
