"""One source of truth for the columns: record-contract.md, contract.json, the record model, the
Bicep tables and DCR stream declarations, and the Logs Ingestion stand-in must agree.

contract.json is the home; every other place either derives from it (Bicep via loadJsonContent,
the stand-in via contract.py) or is compared with it here (the markdown, the dataclasses), so a
change to one of them alone fails.
"""

from __future__ import annotations

import dataclasses
import re
import types
import typing
from pathlib import Path

import bicep_eval as bicep
import pytest
from helpers import REPO
from helpers.infra.paths import CONTRACT_JSON, CONTRACT_MD, INFRA, contract

PROJECT_CONTRACT_MD = REPO / "docs" / "record-contract.md"

KQL_TYPES = {"string", "datetime", "dynamic", "int", "long", "real", "bool"}
IDENTITY_COLUMNS = [
    "VmName",
    "VmId",
    "VmResourceId",
    "SubscriptionId",
    "ResourceGroup",
    "Location",
    "Zone",
    "ScaleSetName",
    "FaultDomain",
    "UpdateDomain",
]


# --- the markdown contract -----------------------------------------------------------------------


def parse_record_table(md: str) -> list[tuple[str, str]]:
    """(column, type) rows of the `| column | type | meaning |` table of section 2, in order."""
    section = md.split("## 2.", 1)[1].split("\n## ", 1)[0]
    rows = []
    in_table = False
    for line in section.splitlines():
        if line.startswith("| column | type |"):
            in_table = True
            continue
        if not in_table:
            continue
        if not line.startswith("|"):
            if rows:
                break
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if set(cells[0]) <= {"-", " "}:
            continue
        names = re.findall(r"`([A-Za-z]+)`", cells[0])
        assert names, f"no column name in {line!r}"
        rows += [(n, cells[1]) for n in names]
    return rows


def parse_heartbeat_minimum(md: str) -> list[str]:
    """The columns section 3 says every heartbeat carries at least."""
    section = md.split("## 3.", 1)[1].split("\n## ", 1)[0]
    at_least = section.split("At least:", 1)[1].split("one object per event", 1)[0]
    names = re.findall(r"`([A-Za-z]+)`", at_least)
    if "VM identity columns" in at_least:
        names += IDENTITY_COLUMNS
    return [n for n in names if n not in {"start", "periodic", "stop"}]


@pytest.fixture(scope="module")
def md() -> str:
    """The project's contract (docs/record-contract.md): it holds every line of its baseline,
    CONTRACT_MD (tests/infra/test_record_contract_doc.py), and the columns appended since."""
    assert CONTRACT_MD.is_file(), (
        f"{CONTRACT_MD} not found (the shared specs live next to the repository)"
    )
    return PROJECT_CONTRACT_MD.read_text("utf-8")


def _columns(key: str) -> list[tuple[str, str]]:
    return [(c["name"], c["type"]) for c in contract()["tables"][key]["columns"]]


def test_markdown_table_parser_reads_the_whole_table(md):
    rows = parse_record_table(md)
    assert rows[0] == ("TimeGenerated", "datetime") and rows[-1] == _columns("records")[-1]
    assert ("ScaleSetName", "string") in rows and ("UpdateDomain", "int") in rows
    assert len(rows) == len({n for n, _ in rows})


def test_records_columns_match_the_markdown_contract(md):
    assert _columns("records") == parse_record_table(md)


def test_heartbeats_carry_at_least_the_documented_columns(md):
    names = [n for n, _ in _columns("heartbeats")]
    missing = [n for n in parse_heartbeat_minimum(md) if n not in names]
    assert missing == []
    assert names[0] == "TimeGenerated"
    assert "RecordId" in names  # heartbeats are deduplicated on RecordId too


def test_open_event_list_items_carry_the_documented_fields(md):
    """record-contract.md §3: each OpenEventList object has exactly these keys, in this order."""
    from se_forwarder.health import OpenEvent

    section = md.split("## 3.", 1)[1].split("\n## ", 1)[0]
    described = section.split("one object per event", 1)[1].split("in document order", 1)[0]
    assert [f.name for f in dataclasses.fields(OpenEvent)] == re.findall(
        r"`([A-Za-z]+)`", described
    )


def test_shared_columns_have_the_same_type_in_both_tables():
    records = dict(_columns("records"))
    for name, kind in _columns("heartbeats"):
        if name in records:
            assert kind == records[name], name


def test_table_and_stream_names():
    t = contract()["tables"]
    assert (t["records"]["table"], t["records"]["stream"]) == (
        "ScheduledEvents_CL",
        "Custom-ScheduledEvents",
    )
    assert (t["heartbeats"]["table"], t["heartbeats"]["stream"]) == (
        "ScheduledEventsAgent_CL",
        "Custom-ScheduledEventsAgent",
    )


def test_service_limits_on_columns():
    for key in ("records", "heartbeats"):
        names = [n for n, _ in _columns(key)]
        assert len(names) == len(set(names)) and len(names) <= 500
        assert all(re.fullmatch(r"[A-Za-z][A-Za-z0-9_]{0,44}", n) for n in names)
        assert "TimeGenerated" in names


# --- type maps: valid for Log Analytics tables and DCR stream declarations ------------------------


def _enum_values(type_and_version: str, *path: str) -> set[str]:
    tf, t = bicep.resource_body_type(type_and_version)
    for step in path:
        if step == "[]":
            t = tf.at(t["itemType"])
        elif step == "*":
            t = tf.at(t["additionalProperties"])
        else:
            t = tf.at(t["properties"][step]["type"])
    return {tf.at(e)["value"] for e in t["elements"] if tf.at(e)["$type"] == "StringLiteralType"}


def test_every_contract_type_is_a_kusto_type_and_is_mapped():
    used = {c["type"] for spec in contract()["tables"].values() for c in spec["columns"]}
    assert used <= KQL_TYPES
    assert set(contract()["typeMap"]["table"]) == KQL_TYPES
    assert set(contract()["typeMap"]["dcr"]) == KQL_TYPES


def test_type_maps_name_types_azure_accepts():
    table_types = _enum_values(
        "Microsoft.OperationalInsights/workspaces/tables@2023-09-01",
        "properties",
        "schema",
        "columns",
        "[]",
        "type",
    )
    dcr_types = _enum_values(
        "Microsoft.Insights/dataCollectionRules@2023-03-11",
        "properties",
        "streamDeclarations",
        "*",
        "columns",
        "[]",
        "type",
    )
    assert set(contract()["typeMap"]["table"].values()) <= table_types, table_types
    assert set(contract()["typeMap"]["dcr"].values()) <= dcr_types, dcr_types
    # a type must keep its meaning on the way: same Kusto type in the stream and in the table
    for kind in KQL_TYPES:
        assert (
            contract()["typeMap"]["table"][kind].lower()
            == contract()["typeMap"]["dcr"][kind].lower()
        )


# --- the record model in the code -----------------------------------------------------------------

PY_TYPES = {
    "string": {str},
    "datetime": {str},
    "dynamic": {list, dict},
    "int": {int},
    "long": {int},
    "real": {float},
    "bool": {bool},
}


def _base_types(hint) -> set:
    args = (
        typing.get_args(hint)
        if typing.get_origin(hint) in (typing.Union, types.UnionType)
        else (hint,)
    )
    out = set()
    for a in args:
        if a is type(None):
            continue
        out.add(typing.get_origin(a) or a)
    return out


@pytest.mark.parametrize(
    "cls_name,key", [("LifecycleRecord", "records"), ("Heartbeat", "heartbeats")]
)
def test_record_dataclasses_match_the_contract(cls_name, key):
    from se_forwarder import model

    cls = getattr(model, cls_name)
    assert list(cls.columns) == [n for n, _ in _columns(key)]
    # Every column is a field of the row or of its VmIdentity (the identity columns, written once),
    # or, for heartbeats, a column health.Snapshot declares (checked by the values it gives).
    own = [f.name for f in dataclasses.fields(cls) if f.name not in ("vm", "values")]
    declared = _heartbeat_values() if cls is model.Heartbeat else {}
    own += list(declared)
    identity = [f.name for f in dataclasses.fields(model.VmIdentity)]
    assert sorted(own + identity) == sorted(cls.columns) and not set(own) & set(identity)
    hints = {**typing.get_type_hints(model.VmIdentity), **typing.get_type_hints(cls)}
    wrong = {
        n: hints[n]
        for n, kind in _columns(key)
        if n not in declared
        and (
            not _base_types(hints[n]) or not _base_types(hints[n]) <= PY_TYPES[kind] | {typing.Any}
        )
    }
    wrong |= {
        n: type(v)
        for n, kind in _columns(key)
        if n in declared and type(v := declared[n]) not in PY_TYPES[kind]
    }
    assert wrong == {}, f"Python types that cannot hold the contract type: {wrong}"


def _heartbeat_values() -> dict:
    """The health columns of a heartbeat from a snapshot with every field set (none None)."""
    from se_forwarder.health import OpenEvent, SinkHealth, Snapshot
    from se_forwarder.health.fields import Time, specs
    from se_forwarder.health.snapshot import heartbeat_values

    sample = {
        int: 1,
        float: 1.5,
        Time: 1.5,
        bool: True,
        str: "x",
        tuple: (OpenEvent("E", "Reboot", "Scheduled"),),
        dict: {"file": SinkHealth()},
        list: ("a line",),
    }
    return heartbeat_values(Snapshot(**{n: sample[s.kind] for n, s in specs(Snapshot)}))


# --- the Logs Ingestion stand-in ------------------------------------------------------------------


@pytest.mark.tls
def test_logs_ingestion_standin_declares_the_contract_streams(tmp_path):
    from se_forwarder_testbed.standins.logs_ingestion import LogsIngestionStandIn
    from se_forwarder_testbed.standins.tokens import TokenAuthority

    standin = LogsIngestionStandIn(tmp_path / "tls", TokenAuthority())
    expected = {
        spec["stream"]: {c["name"]: c["type"] for c in spec["columns"]}
        for spec in contract()["tables"].values()
    }
    assert standin.streams == expected
    assert [*standin.streams["Custom-ScheduledEvents"]] == [n for n, _ in _columns("records")]


# --- Bicep: the tables and the DCR really derive from contract.json -------------------------------


def _var_chain(name: str, variables: dict, base: Path) -> list[str]:
    """Follow `var x = y.a.b` to a loadJsonContent call: ['<file>', 'a', 'b']."""
    node = variables[name]
    path: list[str] = []
    while node.type == "member_expression":
        path.insert(0, bicep.text(node.child_by_field_name("property")))
        node = node.child_by_field_name("object")
    if node.type == "identifier":
        return _var_chain(bicep.text(node), variables, base) + path
    value = bicep.literal_value(node, base)
    assert isinstance(value, bicep.Loaded) and value.function == "loadJsonContent", bicep.text(node)
    return [str(value.path), *path]


def _find_property(node, key: str):
    """Depth-first search for `key: value` in object literals (lambda bodies included)."""
    if node.type == "object_property" and bicep.property_key(node) == key:
        return bicep.property_value(node)
    for c in node.named_children:
        found = _find_property(c, key)
        if found is not None:
            return found
    return None


def _assert_column_mapping(
    columns_expr, type_map_var: str, variables: dict, base: Path, typemap: str
):
    """columns_expr must be `map(<x>.columns, c => { name: c.name, type: <typeMapVar>[c.type], ...
    })`."""
    assert columns_expr.type == "call_expression", bicep.text(columns_expr)
    assert bicep.text(columns_expr.child_by_field_name("function")) == "map"
    args = columns_expr.child_by_field_name("arguments").named_children
    assert bicep.text(args[0]).endswith(".columns"), bicep.text(args[0])
    lam = args[1]
    assert lam.type == "lambda_expression", bicep.text(lam)
    param = bicep.text(lam.named_children[0])
    body = lam.named_children[-1]
    props = {k: bicep.text(v) for k, v, _ in bicep.object_properties(body)}
    assert props["name"] == f"{param}.name"
    assert props["type"] == f"{type_map_var}[{param}.type]", props["type"]
    chain = _var_chain(type_map_var, variables, base)
    assert chain == [str(CONTRACT_JSON.resolve()), "typeMap", typemap], chain


def _source_of(rel: str):
    path = INFRA / rel
    tree = bicep.parse(path.read_bytes())
    return path, tree, bicep.variables(tree)


def test_bicep_tables_derive_from_contract_json():
    path, tree, variables = _source_of("modules/tables.bicep")
    (tables,) = [
        r
        for r in bicep.resources(tree)
        if r.type == "Microsoft.OperationalInsights/workspaces/tables"
    ]
    assert tables.loop, "one table per contract entry"
    loop = tables.node.named_children[-1]
    assert loop.type == "for_statement"
    assert "items(contract.tables)" in bicep.text(loop).split(":", 1)[0]
    assert _var_chain("contract", variables, path.parent) == [str(CONTRACT_JSON.resolve())]
    assert bicep.text(_find_property(tables.body, "name")) == "t.value.table"
    assert bicep.string_value(_find_property(tables.body, "plan")) == "Analytics"
    _assert_column_mapping(
        _find_property(tables.body, "columns"), "tableTypes", variables, path.parent, "table"
    )


def test_bicep_dcr_streams_derive_from_contract_json():
    path, tree, variables = _source_of("modules/dcr.bicep")
    dcr = next(
        r for r in bicep.resources(tree) if r.type == "Microsoft.Insights/dataCollectionRules"
    )
    decl = _find_property(dcr.body, "streamDeclarations")
    assert (
        decl.type == "call_expression"
        and bicep.text(decl.child_by_field_name("function")) == "toObject"
    )
    args = decl.child_by_field_name("arguments").named_children
    assert bicep.text(args[0]) == "items(contract.tables)"
    assert bicep.text(args[1]).replace(" ", "") == "t=>t.value.stream"
    _assert_column_mapping(
        _find_property(args[2], "columns"), "dcrTypes", variables, path.parent, "dcr"
    )
    flows = _find_property(dcr.body, "dataFlows")
    flows_text = bicep.text(flows)
    assert flows_text.startswith("map(items(contract.tables)")
    assert "t.value.stream" in flows_text and "'Custom-${t.value.table}'" in flows_text


def test_bicep_derivation_check_is_real():
    """Hard-coding a column list in the table schema must fail the derivation check."""
    path = INFRA / "modules" / "tables.bicep"
    src = path.read_text("utf-8").replace("type: tableTypes[c.type]", "type: 'string'")
    bad = bicep.parse(src)
    (tables,) = [
        r
        for r in bicep.resources(bad)
        if r.type == "Microsoft.OperationalInsights/workspaces/tables"
    ]
    with pytest.raises(AssertionError):
        _assert_column_mapping(
            _find_property(tables.body, "columns"),
            "tableTypes",
            bicep.variables(bad),
            path.parent,
            "table",
        )


def test_markdown_check_is_real(md):
    """Changing a type in the markdown alone must break the comparison."""
    changed = md.replace("| `DurationInSeconds` | int |", "| `DurationInSeconds` | long |")
    assert changed != md
    assert _columns("records") != parse_record_table(changed)
