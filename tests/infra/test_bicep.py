"""Offline checks of every Bicep file under infra/ (no Bicep compiler on these machines).

Syntax with tree-sitter-bicep; resource types, API versions, property paths, read-only and
required properties against ../shared/azure-types (the data the Bicep compiler itself uses).
The negative tests prove the checker reports what it must.
"""

from __future__ import annotations

import re

import bicep_eval as bicep
import pytest
from helpers.infra.paths import INFRA, REPO

BICEP_FILES = sorted(INFRA.rglob("*.bicep"))
IDS = [str(p.relative_to(REPO)) for p in BICEP_FILES]


def test_there_are_bicep_files():
    names = {p.relative_to(INFRA).as_posix() for p in BICEP_FILES}
    for expected in (
        "main.bicep",
        "tables.bicep",
        "modules/shared.bicep",
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


# Providers ../shared/azure-types has no type data for: their resources would be listed by
# bicep.untyped (and `python -m bicep_eval ../infra` in tools/) and checked only as any resource is.
# Since the type data holds Microsoft.Storage and Microsoft.EventGrid, none: every body is checked.
UNTYPED_PROVIDERS: set[str] = set()


def test_every_resource_type_and_version_exists_in_azure_types():
    missing = [
        f"{p.name}: {r.type_and_version}"
        for p, r in _all_resources()
        if bicep.is_typed(r.type) and bicep.resource_body_type(r.type_and_version) is None
    ]
    assert missing == []


def test_every_provider_is_type_checked():
    assert set(bicep.untyped(BICEP_FILES)) == UNTYPED_PROVIDERS


@pytest.mark.parametrize("doc", ["infra/README.md", "docs/collector.md"])
def test_the_docs_do_not_say_event_grid_or_storage_go_untyped(doc):
    """Where the offline checks are described, no provider is said to go unchecked any more,
    and the README says Event Grid and Storage are type-checked."""
    text = " ".join((REPO / doc).read_text("utf-8").split())
    assert not re.search(r"(?:not|cannot) type-check", text, re.IGNORECASE), doc
    if doc == "infra/README.md":
        assert "`Microsoft.EventGrid` and `Microsoft.Storage` included" in text


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
    kind = _literal(dcr.body, "kind")  # Direct, unless behind a Data Collection Endpoint
    assert bicep.text(kind) == "useDataCollectionEndpoint ? null : 'Direct'"
    ns = _resource("modules/event-hubs.bicep", "namespace")
    assert bicep.text(_literal(ns.body, "properties", "disableLocalAuth")) == "true"
    assert bicep.string_value(_literal(ns.body, "properties", "minimumTlsVersion")) == "1.2"
    assert bicep.string_value(_literal(ns.body, "sku", "name")) == "Standard"


MONITORING_METRICS_PUBLISHER = "3913510d-42f4-4e42-8a64-420c390055eb"
EVENT_HUBS_DATA_SENDER = "2b629674-e913-4c01-ae53-ef4638d8f975"
EVENT_HUBS_DATA_RECEIVER = "a638d3c7-ab3a-418d-83e6-5f17a39d4fde"


@pytest.mark.parametrize(
    "file,symbol,role,scope,roles",
    [
        (
            "modules/dcr.bicep",
            "publishers",
            MONITORING_METRICS_PUBLISHER,
            "dcr",
            {MONITORING_METRICS_PUBLISHER},
        ),
        # the agents send; downstream readers (optional) receive
        (
            "modules/event-hubs.bicep",
            "senders",
            EVENT_HUBS_DATA_SENDER,
            "hub",
            {EVENT_HUBS_DATA_SENDER, EVENT_HUBS_DATA_RECEIVER},
        ),
        (
            "modules/event-hubs.bicep",
            "receivers",
            EVENT_HUBS_DATA_RECEIVER,
            "hub",
            {EVENT_HUBS_DATA_SENDER, EVENT_HUBS_DATA_RECEIVER},
        ),
    ],
)
def test_role_assignments_are_least_privilege(file, symbol, role, scope, roles):
    source = (INFRA / file).read_text("utf-8")
    assert role in source
    ra = _resource(file, symbol)
    # scoped to the one resource written to or read from, not the resource group or namespace
    assert bicep.text(_literal(ra.body, "scope")) == scope
    role_ids = set(
        re.findall(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", source)
    )
    assert role_ids == roles, "only the roles the sink needs"


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


# --- review findings: secrets, identities at scale, first deployment ------------------------------


def _params_source(file: str) -> str:
    return (INFRA / file).read_text("utf-8")


def _param_decorators(file: str, name: str) -> str:
    """The decorator lines right above `param name`."""
    lines = _params_source(file).splitlines()
    i = next(i for i, line in enumerate(lines) if re.match(rf"param {name}\b", line))
    out = []
    for line in reversed(lines[:i]):
        if not line.startswith("@"):
            break
        out.append(line)
    return "\n".join(out)


@pytest.mark.parametrize("path", BICEP_FILES, ids=IDS)
def test_no_output_carries_protected_settings(path):
    """Deployment outputs are stored in plain text in the deployment history."""
    src = path.read_text("utf-8")
    tree = bicep.parse(src)
    variables = bicep.variables(tree)
    for decl in tree.root_node.named_children:
        if decl.type != "output_declaration":
            continue
        body = bicep.text(decl)
        assert "protectedSettings" not in body, f"{path.name}: {body[:80]}"
        # nor through a variable that holds them
        for name in re.findall(r"\b([A-Za-z_]\w*)\b", body.split("=", 1)[1]):
            if name in variables:
                assert "protectedSettings" not in bicep.text(variables[name]), (
                    f"{path.name}: output {bicep.text(decl.named_children[0])} exposes {name}"
                )


def test_protected_settings_check_is_real():
    src = "var ext = {\n  protectedSettings: {\n    a: 1\n  }\n}\noutput e object = ext\n"
    tree = bicep.parse(src)
    out = next(d for d in tree.root_node.named_children if d.type == "output_declaration")
    name = bicep.text(out).split("=", 1)[1].strip()
    assert "protectedSettings" in bicep.text(bicep.variables(tree)[name])


def test_scale_set_upgrade_policy_is_not_automatic():
    ss = _resource("examples/scale-set.bicep", "scaleSet")
    mode = bicep.string_value(_literal(ss.body, "properties", "upgradePolicy", "mode"))
    # Rolling needs a health probe or the Application Health extension, which the example lacks
    assert mode == "Manual"


@pytest.mark.parametrize(
    "file,symbol,param",
    [
        ("modules/dcr.bicep", "publisherGroups", "publisherGroupIds"),
        ("modules/event-hubs.bicep", "senderGroups", "senderGroupIds"),
    ],
)
def test_entra_groups_get_the_roles_with_principal_type_group(file, symbol, param):
    ra = _resource(file, symbol)
    assert bicep.string_value(_literal(ra.body, "properties", "principalType")) == "Group"
    assert ra.loop and param in bicep.text(ra.node)
    assert re.search(r"@maxLength\(\d+\)", _param_decorators(file, param))


@pytest.mark.parametrize(
    "file,name,limit",
    [
        ("main.bicep", "agentPrincipalIds", 400),
        ("main.bicep", "agentGroupObjectIds", 400),
        ("modules/dcr.bicep", "publisherPrincipalIds", 400),
        ("modules/event-hubs.bicep", "senderPrincipalIds", 400),
    ],
)
def test_principal_arrays_are_bounded(file, name, limit):
    """800 resources per deployment, 4,000 role assignments per subscription."""
    m = re.search(r"@maxLength\((\d+)\)", _param_decorators(file, name))
    assert m and int(m.group(1)) <= limit


def test_main_passes_groups_to_both_sinks():
    src = _params_source("main.bicep")
    assert "publisherGroupIds: agentGroupObjectIds" in src
    assert "senderGroupIds: agentGroupObjectIds" in src


def test_workspace_disables_local_auth():
    ws = _resource("modules/workspace.bicep", "workspace")
    assert bicep.text(_literal(ws.body, "properties", "features", "disableLocalAuth")) == "true"
    assert bicep.check_file(INFRA / "modules" / "workspace.bicep") == []


def test_dce_description_does_not_promise_private_link():
    for file in ("main.bicep", "modules/dcr.bicep"):
        deco = _param_decorators(file, "useDataCollectionEndpoint")
        assert "AMPLS" in deco and "not part of this template" in deco, file


# --- compile-time imports and user-defined functions -------------------------------------------


def test_checker_follows_imports_and_function_parameters(tmp_path):
    (tmp_path / "lib.bicep").write_text(
        "@export()\nfunc twice(s string) string => '${s}${s}'\nfunc hidden(s string) string => s\n"
    )
    main = tmp_path / "main.bicep"
    main.write_text(
        "import { twice, hidden } from 'lib.bicep'\nimport { x } from 'nowhere.bicep'\n"
        "func local(v string) string => twice(v)\n"
        "output o string = local('a')\n"
    )
    problems = bicep.check_file(main)
    assert any("lib.bicep does not export hidden" in p for p in problems), problems
    assert any("import from nowhere.bicep: no such file" in p for p in problems), problems
    assert not any("'v' is not declared" in p or "twice" in p for p in problems), problems


def test_scheduled_events_policy_is_checked_against_the_api_version():
    """scheduledEventsApiVersion exists from Compute 2025-04-01: the examples use that version,
    and the checker refuses the same body one version earlier."""
    for file, symbol in (("examples/vm.bicep", "vm"), ("examples/scale-set.bicep", "scaleSet")):
        res = _resource(file, symbol)
        assert res.api_version >= "2025-04-01", file
        body = bicep.text(res.node)
        assert "scheduledEventsApiVersion" in body
        older = body.replace(f"@{res.api_version}'", "@2024-11-01'")
        problems = bicep.check_source(older)
        assert any("scheduledEventsApiVersion is not a property" in p for p in problems), problems


def test_the_readme_counts_the_alert_rules_alerts_bicep_creates():
    """infra/README's resource table and its Alerts table name as many rules as alerts.bicep
    declares (with and without the per-VM rule)."""
    ev = bicep.Evaluator(
        INFRA / "modules/alerts.bicep",
        {"location": "westeurope", "workspaceResourceId": "/subscriptions/0/x/workspaces/w"},
    )
    every = len(ev.var("allRules"))
    text = (REPO / "infra/README.md").read_text("utf-8")
    m = re.search(r"and (\d+) alert rules \((\d+) with `perVmImpactfulAlert=false`\)", text)
    assert m and (int(m[1]), int(m[2])) == (every, every - 1), m and m.group(0)
    alerts = text[text.index("## Alerts") : text.index("**Late records.**")]
    assert len(re.findall(r"^\| \d+[a-z]? \|", alerts, re.MULTILINE)) == every
