"""Offline checks of every Bicep file under infra/ (no Bicep compiler on these machines).

Syntax with tree-sitter-bicep; resource types, API versions, property paths, read-only and
required properties against ../shared/azure-types (the data the Bicep compiler itself uses).
The negative tests prove the checker reports what it must.
"""

from __future__ import annotations

import re

import pytest
from infra_support import bicep
from infra_support.paths import INFRA, REPO

BICEP_FILES = sorted(INFRA.rglob("*.bicep"))
IDS = [str(p.relative_to(REPO)) for p in BICEP_FILES]


def test_there_are_bicep_files():
    names = {p.relative_to(INFRA).as_posix() for p in BICEP_FILES}
    for expected in (
        "main.bicep",
        "modules/tables.bicep",
        "modules/dcr.bicep",
        "modules/event-hubs.bicep",
        "modules/alerts.bicep",
        "modules/workbooks.bicep",
    ):
        assert expected in names


@pytest.mark.parametrize("path", BICEP_FILES, ids=IDS)
def test_parses_without_error_or_missing_nodes(path):
    assert bicep.syntax_problems(bicep.parse(path.read_bytes())) == []


@pytest.mark.parametrize("path", BICEP_FILES, ids=IDS)
def test_resources_modules_and_loaded_files_check_out(path):
    problems = bicep.check_file(path)
    assert problems == [], "\n".join(problems)


def _all_resources():
    out = []
    for path in BICEP_FILES:
        for r in bicep.resources(bicep.parse(path.read_bytes())):
            out.append((path, r))
    return out


def test_every_resource_type_and_version_exists_in_azure_types():
    missing = [
        f"{p.name}: {r.type_and_version}"
        for p, r in _all_resources()
        if bicep.resource_body_type(r.type_and_version) is None
    ]
    assert missing == []


def test_the_deployment_declares_the_resources_the_issue_asks_for():
    types = {
        r.type.lower() for p, r in _all_resources() if not r.existing and "examples" not in p.parts
    }
    for t in (
        "Microsoft.OperationalInsights/workspaces",
        "Microsoft.OperationalInsights/workspaces/tables",
        "Microsoft.Insights/dataCollectionRules",
        "Microsoft.Insights/dataCollectionEndpoints",
        "Microsoft.Authorization/roleAssignments",
        "Microsoft.ManagedIdentity/userAssignedIdentities",
        "Microsoft.EventHub/namespaces",
        "Microsoft.EventHub/namespaces/eventhubs",
        "Microsoft.EventHub/namespaces/eventhubs/consumergroups",
        "Microsoft.Insights/actionGroups",
        "Microsoft.Insights/scheduledQueryRules",
        "Microsoft.Insights/workbooks",
    ):
        assert t.lower() in types, t


def _resource(file: str, symbol: str) -> bicep.Resource:
    tree = bicep.parse((INFRA / file).read_bytes())
    return next(r for r in bicep.resources(tree) if r.symbol == symbol)


def _literal(body, *path):
    node = body
    for key in path:
        node = {k: v for k, v, _ in bicep.object_properties(node)}[key]
    return node


def test_dcr_is_direct_and_event_hubs_is_locked_down():
    dcr = _resource("modules/dcr.bicep", "dcr")
    assert bicep.string_value(_literal(dcr.body, "kind")) == "Direct"
    ns = _resource("modules/event-hubs.bicep", "namespace")
    assert bicep.text(_literal(ns.body, "properties", "disableLocalAuth")) == "true"
    assert bicep.string_value(_literal(ns.body, "properties", "minimumTlsVersion")) == "1.2"
    assert bicep.string_value(_literal(ns.body, "sku", "name")) == "Standard"


@pytest.mark.parametrize(
    "file,symbol,role,scope",
    [
        ("modules/dcr.bicep", "publishers", "3913510d-42f4-4e42-8a64-420c390055eb", "dcr"),
        ("modules/event-hubs.bicep", "senders", "2b629674-e913-4c01-ae53-ef4638d8f975", "hub"),
    ],
)
def test_role_assignments_are_least_privilege(file, symbol, role, scope):
    source = (INFRA / file).read_text("utf-8")
    assert role in source
    ra = _resource(file, symbol)
    # scoped to the one resource the agents write to, not the resource group or namespace
    assert bicep.text(_literal(ra.body, "scope")) == scope
    role_ids = set(
        re.findall(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", source)
    )
    assert role_ids == {role}, "only the one role the sink needs"


def test_main_outputs_carry_the_agent_config():
    src = (INFRA / "main.bicep").read_text("utf-8")
    tree = bicep.parse(src)
    outputs = {
        bicep.text(d.named_children[0]): d
        for d in tree.root_node.named_children
        if d.type == "output_declaration"
    }
    for name in (
        "logsIngestionEndpoint",
        "dcrImmutableId",
        "recordsStream",
        "heartbeatsStream",
        "identityClientId",
        "eventHubsNamespace",
        "eventHubName",
        "agentConfigToml",
    ):
        assert name in outputs, name
    snippet = bicep.text(outputs["agentConfigToml"])
    for key in (
        "[identity]",
        "client_id",
        "[sinks.log_analytics]",
        "endpoint",
        "dcr_immutable_id",
        "records_stream",
        "heartbeats_stream",
        "[sinks.event_hubs]",
        "namespace",
        "hub",
    ):
        assert key in snippet, key


# --- the checker itself must catch what it claims to --------------------------------------------

GOOD = """
resource dcr 'Microsoft.Insights/dataCollectionRules@2023-03-11' = {
  name: 'x'
  location: 'westeurope'
  kind: 'Direct'
  properties: {
    streamDeclarations: {
      'Custom-A': {
        columns: [
          {
            name: 'TimeGenerated'
            type: 'datetime'
          }
        ]
      }
    }
    destinations: {
      logAnalytics: [
        {
          name: 'w'
          workspaceResourceId: 'id'
        }
      ]
    }
    dataFlows: [for s in [ 'Custom-A' ]: {
      streams: [
        s
      ]
      destinations: [
        'w'
      ]
    }]
  }
}
"""


def test_checker_accepts_a_valid_resource():
    assert bicep.check_source(GOOD) == []


@pytest.mark.parametrize(
    "mutate,expected",
    [
        (
            lambda s: s.replace("kind: 'Direct'", "kind: 'Direct'\n  bogus: 1"),
            "bogus is not a property",
        ),
        (
            lambda s: s.replace(
                "workspaceResourceId: 'id'",
                "workspaceResourceId: 'id'\n          workspaceKey: 'k'",
            ),
            "properties.destinations.logAnalytics[0].workspaceKey is not a property",
        ),
        (
            lambda s: s.replace("      streams: [", "      stream: [", 1),
            "properties.dataFlows[*].stream is not a property",
        ),
        (
            lambda s: s.replace(
                "            type: 'datetime'",
                "            type: 'datetime'\n            format: 'x'",
            ),
            "columns[0].format is not a property",
        ),
        (
            lambda s: s.replace("  location: 'westeurope'\n", ""),
            "required property location is missing",
        ),
        (lambda s: s.replace("@2023-03-11", "@2031-01-01"), "does not exist (known versions"),
        (
            lambda s: s.replace("dataCollectionRules@", "dataCollectionRule@"),
            "does not exist (unknown resource type)",
        ),
        (
            lambda s: s.replace("  properties: {", "  properties: {\n    immutableId: 'dcr-1'", 1),
            "properties.immutableId is read-only",
        ),
        (
            lambda s: s.replace(
                "kind: 'Direct'",
                "kind: 'Direct'\n  identity: {\n    type: 'SystemAssigned'\n    kind: 'x'\n  }",
            ),
            "identity.kind is not a property",
        ),
        (
            lambda s: s.replace("name: 'w'\n", "name: 3\n", 1),
            "a number where the type expects string",
        ),
        (
            lambda s: s.replace("  kind: 'Direct'\n", "  kind: 'Direct'\n  properties: {\n", 1),
            "syntax error",
        ),
    ],
)
def test_checker_reports_each_kind_of_mistake(mutate, expected):
    bad = mutate(GOOD)
    assert bad != GOOD
    problems = bicep.check_source(bad)
    assert any(expected in p for p in problems), problems


def test_checker_reports_a_value_outside_a_closed_enum():
    src = """
resource rule 'Microsoft.Insights/scheduledQueryRules@2023-12-01' = {
  name: 'x'
  location: 'y'
  identity: {
    type: 'Systemassigned'
  }
  properties: {
    severity: 2
  }
}
"""
    problems = bicep.check_source(src)
    assert any("identity.type: 'Systemassigned' is not one of" in p for p in problems), problems
    assert len(problems) == 1, problems


def test_checker_reports_missing_nested_required_property():
    src = """
resource ra 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  name: 'x'
  properties: {
    roleDefinitionId: 'r'
  }
}
"""
    problems = bicep.check_source(src)
    assert any("required property properties.principalId is missing" in p for p in problems), (
        problems
    )


def test_checker_checks_conditional_and_looped_resources_and_both_ternary_branches():
    src = """
resource a 'Microsoft.ManagedIdentity/userAssignedIdentities@2023-01-31' = if (true) {
  name: 'x'
  locaton: 'y'
}
resource b 'Microsoft.ManagedIdentity/userAssignedIdentities@2023-01-31' = [for i in range(0, 2): {
  name: 'x${i}'
  location: 'y'
  tagz: {}
}]
resource c 'Microsoft.EventHub/namespaces@2024-01-01' = {
  name: 'x'
  location: 'y'
  properties: cond ? {
    disableLocalAuth: true
  } : {
    disableLocalAuths: true
  }
}
"""
    problems = bicep.check_source(src)
    assert any("a: locaton is not a property" in p for p in problems), problems
    assert any("a: required property location is missing" in p for p in problems), problems
    assert any("b: tagz is not a property" in p for p in problems), problems
    assert any("c: properties.disableLocalAuths is not a property" in p for p in problems), problems


def test_checker_reports_a_broken_module_reference(tmp_path):
    (tmp_path / "m.bicep").write_text(
        "param needed string\nparam optional int = 1\noutput out string = needed\n"
    )
    main = tmp_path / "main.bicep"
    main.write_text(
        "module a 'm.bicep' = {\n  name: 'a'\n  params: {\n    optional: 2\n    nope: 'x'\n  }\n}\n"
        "module b 'missing.bicep' = {\n  name: 'b'\n}\n"
        "var t = loadTextContent('nothing-here.kql')\n"
        "output good string = a.outputs.out\n"
        "output bad string = a.outputs.nope\n"
    )
    problems = bicep.check_file(main)
    assert any("has no parameter nope" in p for p in problems), problems
    assert any("required parameter needed" in p for p in problems), problems
    assert any("missing.bicep does not exist" in p for p in problems), problems
    assert any("loadTextContent('nothing-here.kql'): no such file" in p for p in problems), problems
    assert any("module a has no output nope" in p for p in problems), problems
    assert not any("no output out" in p for p in problems), problems


def test_checker_reports_undeclared_names():
    src = """
param prefix string
var good = '${prefix}-x'
var bad = '${prefx}-x'
var mapped = map([1, 2], n => n + missing)
resource id 'Microsoft.ManagedIdentity/userAssignedIdentities@2023-01-31' = {
  name: good
  location: loc
}
"""
    problems = bicep.check_source(src, names=True)
    assert sorted(p.split(": ", 1)[1] for p in problems) == [
        "'loc' is not declared",
        "'missing' is not declared",
        "'prefx' is not declared",
    ], problems
