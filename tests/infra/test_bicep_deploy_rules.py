"""What Azure does with the templates, checked offline: the rules a real first deployment (and the
ones after it) meets, which no syntax or type check sees.

The templates are evaluated (bicep_eval: ARM's functions, fail(), load*()) with
the values a deployment would give them, and the result is compared with the service's
documented rules: the tables in a stage of their own, the rule in the workspace's region,
retention values Log Analytics accepts, Event Hubs names and partitions, alert queries and query
validation, workbooks, and parameters that carry secrets.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import bicep_eval as bicep
import pytest
from bicep_eval import BicepFail, Evaluator, ParamRejected
from helpers.infra.paths import INFRA, REPO, WORKBOOKS

BICEP_FILES = sorted(INFRA.rglob("*.bicep"))
WS = (
    "/subscriptions/00000000-0000-0000-0000-000000000000/resourceGroups/rg-monitor/providers/"
    "Microsoft.OperationalInsights/workspaces/law-fleet"
)
WORKSPACE = {"id": WS, "location": "northeurope", "name": "law-fleet"}
# Log Analytics: total retention 4 to 730 days, or these whole years (the service's rule; the
# type data says 4 to 4383)
YEARS = {1095, 1460, 1826, 2191, 2556, 2922, 3288, 3653, 4018, 4383}
TABLES = "microsoft.operationalinsights/workspaces/tables"
DCR = "microsoft.insights/datacollectionrules"


def ev(rel: str, params: dict | None = None, symbols: dict | None = None) -> Evaluator:
    return Evaluator(INFRA / rel, params, symbols)


def main_ev(**params) -> Evaluator:
    return ev("main.bicep", {"workspaceResourceId": WS, **params}, {"workspace": WORKSPACE})


def deployed_types(path: Path, seen: frozenset = frozenset()) -> set[str]:
    """Resource types a template deploys, through its modules too."""
    tree = bicep.parse(path.read_bytes())
    out = {r.type.lower() for r in bicep.resources(tree) if not r.existing}
    for decl in tree.root_node.named_children:
        if decl.type == "module_declaration":
            ref = bicep.string_value(next(c for c in decl.named_children if c.type == "string"))
            target = (path.parent / ref).resolve()
            if target not in seen:
                out |= deployed_types(target, seen | {target})
    return out


# --- would fail the first time -------------------------------------------------------------------


@pytest.mark.parametrize("path", BICEP_FILES, ids=[str(p.relative_to(REPO)) for p in BICEP_FILES])
def test_no_deployment_creates_the_tables_and_the_rule_together(path):
    """A Data Collection Rule created right after a brand-new table may not see it
    (InvalidOutputTable), whatever dependsOn says: the tables are a deployment of their own."""
    types = deployed_types(path)
    assert not (TABLES in types and DCR in types), f"{path.name} deploys tables and the rule"


def test_the_tables_stage_and_the_main_stage():
    assert TABLES in deployed_types(INFRA / "tables.bicep")
    assert DCR not in deployed_types(INFRA / "tables.bicep")
    assert DCR in deployed_types(INFRA / "main.bicep")
    assert TABLES not in deployed_types(INFRA / "main.bicep")


@pytest.mark.parametrize("doc", ["infra/README.md", "docs/install.md"])
def test_the_walkthroughs_run_the_tables_stage_first(doc):
    text = (REPO / doc).read_text("utf-8")
    first_tables = text.find("-f infra/tables.bicep")
    first_main = min(
        i
        for i in (
            text.find("-f infra/main.bicep"),
            text.find("-f infra/examples/scale-set-with-log-analytics.bicep"),
        )
        if i >= 0
    )
    assert 0 <= first_tables < first_main, f"{doc}: run infra/tables.bicep before main.bicep"


def test_total_retention_accepts_exactly_what_log_analytics_accepts():
    shared = ev("modules/shared.bicep")
    accepted = {d for d in range(5000) if shared.call("isValidTotalRetention", d)}
    assert accepted == set(range(4, 731)) | YEARS


@pytest.mark.parametrize(
    "days,ok", [(365, True), (730, True), (731, False), (1095, True), (2000, False), (4383, True)]
)
def test_both_table_templates_stop_on_a_refused_retention(days, ok):
    stage = ev("tables.bicep", {"tableTotalRetentionInDays": days})
    module = ev("modules/tables.bicep", {"workspaceName": "law", "totalRetentionInDays": days})
    for evaluate in (
        lambda: stage.resource("tables", "params", "totalRetentionInDays"),
        lambda: module.resource(
            "tables",
            "properties",
            "totalRetentionInDays",
            loop={"t": {"key": "records", "value": {}}},
        ),
    ):
        if ok:
            assert evaluate() == max(days, 90)
        else:
            with pytest.raises(BicepFail, match=rf"tableTotalRetentionInDays {days} is refused"):
                evaluate()


def test_the_rule_alerts_and_workbooks_follow_the_workspace_region():
    """A rule ingests only into a workspace of its own region: the region comes from the
    workspace (an existing resource), not from the location parameter."""
    main = main_ev(location="westeurope", deployEventHubs=True)
    for module in ("dcr", "alerts", "workbooks"):
        assert main.resource(module, "params", "location") == "northeurope", module
        assert main.resource(module, "params", "workspaceResourceId") == WS, module
    assert main.resource("identity", "params", "location") == "westeurope"
    ws = next(
        r
        for r in bicep.resources(bicep.parse((INFRA / "main.bicep").read_bytes()))
        if r.symbol == "workspace"
    )
    assert ws.existing and ws.type == "Microsoft.OperationalInsights/workspaces"
    assert main.resource("workspace", "scope")["id"] == WS.split("/providers/")[0]


def test_a_wrong_workspace_id_stops_the_deployment():
    with pytest.raises(BicepFail, match="is not a Log Analytics workspace resource id"):
        main_ev(workspaceResourceId=WS.replace("OperationalInsights", "Insights")).var(
            "workspaceIdParts"
        )
    with pytest.raises(BicepFail):
        ev("tables.bicep", {"existingWorkspaceResourceId": "law-fleet"}).var("workspaceResourceId")


def _namespace_type_limits() -> tuple[int, int]:
    """(min, max) length of an Event Hubs namespace name from the type data: the pattern
    ^[a-zA-Z][a-zA-Z0-9-]{6,50}[a-zA-Z0-9]$ needs 8 characters, maxLength says 50."""
    tf, body = bicep.resource_body_type("Microsoft.EventHub/namespaces@2024-01-01")
    t = tf.at(body["properties"]["name"]["type"])
    m = re.fullmatch(r"\^\[[^\]]+\]\[[^\]]+\]\{(\d+),\d+\}\[[^\]]+\]\$", t["pattern"])
    return int(m.group(1)) + 2, min(t["maxLength"], int(m.group(1)) + 2 + 50)


@pytest.mark.parametrize(
    "file,param",
    [("main.bicep", "eventHubsNamespaceName"), ("modules/event-hubs.bicep", "namespaceName")],
)
def test_event_hubs_namespace_length_is_the_types(file, param):
    low, high = _namespace_type_limits()
    assert (low, high) == (8, 50)
    tree = bicep.parse((INFRA / file).read_bytes())
    decl = next(
        d
        for d in tree.root_node.named_children
        if d.type == "parameter_declaration" and bicep.text(d.named_children[0]) == param
    )
    deco = bicep.decorator_map(decl)
    assert int(bicep.text(deco["minLength"][0])) == low
    assert int(bicep.text(deco["maxLength"][0])) == high
    with pytest.raises(ParamRejected):
        ev("modules/event-hubs.bicep", {"namespaceName": "a" * (low - 1), "location": "x"}).param(
            "namespaceName"
        )


def test_default_namespace_name_matches_the_type_pattern():
    tf, body = bicep.resource_body_type("Microsoft.EventHub/namespaces@2024-01-01")
    pattern = tf.at(body["properties"]["name"]["type"])["pattern"]
    for prefix in ("abc", "se-forwarder", "a" * 20):
        name = main_ev(namePrefix=prefix).param("eventHubsNamespaceName")
        assert re.fullmatch(pattern, name) and len(name) <= 50, name


def test_another_partition_count_makes_another_hub():
    """A Standard hub's partition count is fixed at creation: a new count is a new hub, not a
    failed deployment."""

    def hub(count):
        e = ev(
            "modules/event-hubs.bicep",
            {"namespaceName": "se-forwarder-x1", "location": "x", "partitionCount": count},
        )
        return e.resource("hub", "name"), e.resource("hub", "properties", "partitionCount")

    assert hub(4) == ("scheduled-events-p4", 4)
    assert hub(8) == ("scheduled-events-p8", 8)
    main = main_ev(deployEventHubs=True, eventHubPartitionCount=8)
    assert main.resource("eventHubs", "params", "partitionCount") == 8


def test_event_hubs_network_rules_and_readers():
    base = {"namespaceName": "se-forwarder-x1", "location": "x"}
    open_ = ev("modules/event-hubs.bicep", base)
    assert open_.resource("networkRules", "properties", "defaultAction") == "Allow"
    closed = ev(
        "modules/event-hubs.bicep",
        dict(base, allowedIpRanges=["203.0.113.0/24"], publicNetworkAccess="Enabled"),
    )
    rules = closed.resource("networkRules", "properties")
    assert rules["defaultAction"] == "Deny"
    assert rules["ipRules"] == [{"ipMask": "203.0.113.0/24", "action": "Allow"}]
    src = (INFRA / "modules" / "event-hubs.bicep").read_text("utf-8")
    receiver = "a638d3c7-ab3a-418d-83e6-5f17a39d4fde"  # Azure Event Hubs Data Receiver
    assert f"var dataReceiver = '{receiver}'" in src
    tree = bicep.parse(src.encode())
    res = next(r for r in bicep.resources(tree) if r.symbol == "receivers")
    assert (
        res.loop
        and bicep.text({k: v for k, v, _ in bicep.object_properties(res.body)}["scope"]) == "hub"
    )
    main = main_ev(deployEventHubs=True, eventHubReceiverPrincipalIds=["r1"])
    assert main.resource("eventHubs", "params", "receiverPrincipalIds") == ["r1"]


def test_private_ingestion_needs_the_endpoint_and_the_rule_is_direct_only_without_it():
    with pytest.raises(BicepFail, match="needs useDataCollectionEndpoint=true"):
        main_ev(ingestionPublicNetworkAccess="Disabled").resource(
            "dcr", "params", "endpointPublicNetworkAccess"
        )
    main = main_ev(ingestionPublicNetworkAccess="Disabled", useDataCollectionEndpoint=True)
    assert main.resource("dcr", "params", "endpointPublicNetworkAccess") == "Disabled"
    base = {"name": "d", "location": "x", "workspaceResourceId": WS}
    assert ev("modules/dcr.bicep", base).resource("dcr", "kind") == "Direct"
    with_dce = ev(
        "modules/dcr.bicep",
        dict(base, useDataCollectionEndpoint=True, endpointPublicNetworkAccess="Disabled"),
        symbols={"dce": {"id": "/dce"}},
    )
    assert with_dce.resource("dcr", "kind") is None  # no public endpoint of its own beside it
    assert with_dce.resource("dce", "properties", "networkAcls") == {
        "publicNetworkAccess": "Disabled"
    }


# --- alerts ------------------------------------------------------------------------------------


ALERT_PARAMS = {"location": "x", "workspaceResourceId": WS}


def test_skip_query_validation_is_a_parameter_and_off_by_default():
    alerts = ev("modules/alerts.bicep", ALERT_PARAMS)
    rule = {"key": "k", "query": "", "metricMeasureColumn": "", "resourceIdColumn": ""}
    assert (
        alerts.resource("alertRules", "properties", "skipQueryValidation", loop={"rule": rule})
        is False
    )
    assert (
        ev("modules/alerts.bicep", dict(ALERT_PARAMS, skipQueryValidation=True)).resource(
            "alertRules", "properties", "skipQueryValidation", loop={"rule": rule}
        )
        is True
    )
    assert main_ev().resource("alerts", "params", "skipQueryValidation") is False


def alert_queries() -> dict[str, str]:
    """The KQL of every rule alerts.bicep creates, as the rule gets it."""
    return {r["key"]: r["query"] for r in ev("modules/alerts.bicep", ALERT_PARAMS).var("allRules")}


def ago_arguments(kql: str) -> list[str]:
    code = "\n".join(line.split("//", 1)[0] for line in kql.splitlines())
    return [m.group(1).strip() for m in re.finditer(r"\bago\s*\(([^()]*)\)", code)]


TIMESPAN = re.compile(r"\d+(\.\d+)?(d|h|m|s|ms|microsecond|tick)")


def test_the_ago_check_is_real():
    assert ago_arguments("T | where x > ago(2d) and y < ago( 15m ) // ago(lookback)") == [
        "2d",
        "15m",
    ]
    assert [bool(TIMESPAN.fullmatch(a)) for a in ago_arguments("ago(lookback) ago(1h)")] == [
        False,
        True,
    ]


def test_alert_queries_use_ago_with_literals_only():
    """Log search alerts accept ago() with a literal timespan only."""
    bad = {
        key: arg
        for key, kql in alert_queries().items()
        for arg in ago_arguments(kql)
        if not TIMESPAN.fullmatch(arg)
    }
    assert bad == {}, f"ago() with a non-literal argument: {bad}"


def test_started_without_notice_reads_two_days():
    rules = {r["key"]: r for r in ev("modules/alerts.bicep", ALERT_PARAMS).var("allRules")}
    assert rules["started-without-notice"]["overrideQueryTimeRange"] == "P2D"


def test_webhooks_by_key_and_by_entra_token():
    alerts = ev(
        "modules/alerts.bicep",
        dict(
            ALERT_PARAMS,
            alertWebhookUrls={"urls": ["https://hooks.example/abc?key=k"]},
            alertSecureWebhooks=[
                {
                    "serviceUri": "https://api.example/alert",
                    "objectId": "o1",
                    "identifierUri": "api://alerts",
                }
            ],
        ),
    )
    hooks = alerts.var("webhooks")
    assert [h["useAadAuth"] for h in hooks] == [False, True]
    assert hooks[1]["tenantId"] and hooks[1]["objectId"] == "o1"
    receivers = alerts.resource("actionGroup", "properties", "webhookReceivers")
    assert [r["name"] for r in receivers] == ["webhook-0", "webhook-1"]
    assert receivers[1]["useAadAuth"] is True and receivers[1]["identifierUri"] == "api://alerts"
    assert receivers[0]["objectId"] is None
    assert ev("modules/alerts.bicep", ALERT_PARAMS).var("hasReceivers") is False


# --- workbooks ------------------------------------------------------------------------------------


def _workbooks(workspace: str = WS) -> Evaluator:
    return ev("modules/workbooks.bicep", {"location": "x", "workspaceResourceId": workspace})


def test_workbooks_load_json_and_are_written_back_with_string():
    tree = bicep.parse((INFRA / "modules" / "workbooks.bicep").read_bytes())
    calls = {(fn, (INFRA / "modules" / ref).resolve()) for fn, ref, _ in bicep.load_calls(tree)}
    assert calls == {("loadJsonContent", p.resolve()) for p in WORKBOOKS}
    res = next(r for r in bicep.resources(tree) if r.symbol == "workbookResources")
    body = {k: v for k, v, _ in bicep.object_properties(res.body)}
    data = {k: v for k, v, _ in bicep.object_properties(body["properties"])}
    assert bicep.text(data["serializedData"]).startswith("string(")


def test_workbook_names_include_the_workspace():
    def names(workspace):
        e = _workbooks(workspace)
        return [
            e.resource("workbookResources", "name", loop={"wb": wb}) for wb in e.var("workbooks")
        ]

    other = WS.replace("law-fleet", "law-other")
    assert len(set(names(WS))) == 2
    assert names(WS) == names(WS)
    assert set(names(WS)).isdisjoint(names(other))


@pytest.mark.parametrize("index", [0, 1])
def test_workbooks_fall_back_to_the_workspace_and_keep_their_content(index):
    """Microsoft's pattern: fallbackResourceIds = [sourceId], the rest of the file unchanged."""
    e = _workbooks()
    wb = e.var("workbooks")[index]
    props = e.resource("workbookResources", "properties", loop={"wb": wb})
    data = json.loads(props["serializedData"])
    assert props["sourceId"] == WS and data["fallbackResourceIds"] == [WS]
    original = wb["content"]
    assert set(original) - set(data) <= {"$schema"}, "a top-level key of the workbook is dropped"
    assert data["items"] == original["items"] and data["version"] == original["version"]


LOAD_LIMITS = {  # characters (loadFileAsBase64: bytes of the file), Bicep's documented limits
    "loadTextContent": 131_072,
    "loadJsonContent": 1_048_576,
    "loadFileAsBase64": 96 * 1024,
}


@pytest.mark.parametrize("path", BICEP_FILES, ids=[str(p.relative_to(REPO)) for p in BICEP_FILES])
def test_loaded_files_fit_their_load_function(path):
    tree = bicep.parse(path.read_bytes())
    for fn, ref, _ in bicep.load_calls(tree):
        target = (path.parent / ref).resolve()
        size = target.stat().st_size if fn == "loadFileAsBase64" else len(target.read_text("utf-8"))
        print(f"{path.name}: {fn}({ref}) {size} of {LOAD_LIMITS[fn]}")
        assert size <= LOAD_LIMITS[fn], f"{ref}: {size} > {fn}'s {LOAD_LIMITS[fn]}"


# --- secrets in parameters ------------------------------------------------------------------------

# names of parameters that hold a credential (a public key is not one)
SECRET_WORDS = re.compile(
    r"secret|password|passwd|token|connectionstring|sas$|webhookurls?$"
    r"|(?<!public)key$",
    re.IGNORECASE,
)
URL_PARAM = re.compile(r"(uri|url|urls)$", re.IGNORECASE)


def all_params():
    for path in BICEP_FILES:
        tree = bicep.parse(path.read_bytes())
        for decl in tree.root_node.named_children:
            if decl.type == "parameter_declaration":
                yield path, bicep.text(decl.named_children[0]), decl


def test_parameters_that_carry_secrets_are_secure():
    names = ["alertWebhookUrls", "storageKey", "sasToken", "adminPassword", "sshPublicKey", "name"]
    assert [bool(SECRET_WORDS.search(n)) for n in names] == [True] * 4 + [False] * 2
    bad = [
        f"{p.name}: {name}"
        for p, name, decl in all_params()
        if SECRET_WORDS.search(name) and "secure" not in bicep.decorator_map(decl)
    ]
    assert bad == []


def test_no_secure_parameter_has_a_non_empty_default():
    for path, name, decl in all_params():
        if "secure" not in bicep.decorator_map(decl) or not any(
            c.type == "=" for c in decl.children
        ):
            continue
        default = bicep.text(decl.named_children[-1]).strip()
        assert default in ("''", "{}"), f"{path.name}: @secure() {name} defaults to {default}"


# shared.bicep's functions a URL goes through: plainUrl() refuses a credential in it,
# checkedPackage() calls plainUrl(), isBundle() only reads its file name
URL_CHECKS = {"plainUrl", "checkedPackage", "isBundle"}


def _validated_use(path: Path, name: str, seen: frozenset = frozenset()) -> list[str]:
    """References of a URL parameter that reach a resource without plainUrl() on the way (a
    default of another URL parameter is that parameter's to check)."""
    tree = bicep.parse(path.read_bytes())
    problems = []

    def visit(n):
        if n.type == "identifier" and bicep.text(n) == name and bicep.is_reference(n):
            anc, ok = n.parent, False
            while anc is not None and not ok:
                checked = (
                    anc.type == "call_expression"
                    and bicep.text(anc.named_children[0]) in URL_CHECKS
                )
                a_url_default = anc.type == "parameter_declaration" and URL_PARAM.search(
                    bicep.text(anc.named_children[0])
                )
                if checked or a_url_default:
                    ok = True
                elif (
                    anc.type == "object_property"
                    and anc.parent.parent is not None
                    and anc.parent.parent.type == "object_property"
                    and bicep.property_key(anc.parent.parent) == "params"
                ):
                    module = anc.parent.parent
                    while module.type != "module_declaration":
                        module = module.parent
                    ref = bicep.string_value(
                        next(c for c in module.named_children if c.type == "string")
                    )
                    target = (path.parent / ref).resolve()
                    ok = target in seen or not _validated_use(
                        target, bicep.property_key(anc), seen | {target}
                    )
                    break
                anc = anc.parent
            if not ok:
                problems.append(f"{path.name}:{bicep.pos(n)}")
        for c in n.named_children:
            visit(c)

    visit(tree.root_node)
    return problems


def test_url_parameters_are_secure_or_refuse_a_credential():
    """A URL with a SAS token is a credential: it would land in customData, the extension's
    settings or the deployment history. Every URL parameter is @secure() or passes through
    shared.plainUrl(), which refuses a query string and user info."""
    checked = 0
    for path, name, decl in all_params():
        if URL_PARAM.search(name) and "secure" not in bicep.decorator_map(decl):
            assert _validated_use(path, name) == [], f"{path.name}: {name} is used unchecked"
            checked += 1
    assert checked >= 8


@pytest.mark.parametrize(
    "url,ok",
    [
        ("https://acct.blob.core.windows.net/se/se_forwarder-0.1.0-py3-none-any.whl", True),
        ("https://acct.blob.core.windows.net/se/x.whl?sv=2024&sig=SECRET", False),
        ("https://user:pw@acct.blob.core.windows.net/se/x.whl", False),
        ("http://acct.blob.core.windows.net/se/x.whl", False),
        ("", False),
    ],
)
def test_plain_url_refuses_credentials(url, ok):
    shared = ev("modules/shared.bicep")
    if ok:
        assert shared.call("plainUrl", url, "packageUri") == url
    else:
        with pytest.raises(BicepFail) as err:
            shared.call("plainUrl", url, "packageUri")
        assert "SECRET" not in str(err.value) and "pw@" not in str(err.value)


@pytest.mark.parametrize(
    "example", sorted(INFRA.glob("*.parameters.example.json")), ids=lambda p: p.name
)
def test_example_parameter_files_name_only_declared_parameters(example):
    """ARM refuses a parameters file naming a parameter the template does not declare."""
    template = INFRA / example.name.replace(".parameters.example.json", ".bicep")
    declared = bicep.params(bicep.parse(template.read_bytes()))
    given = json.loads(example.read_text("utf-8"))["parameters"]
    assert set(given) <= set(declared), set(given) - set(declared)
    values = {k: v["value"] for k, v in given.items()}
    if "workspaceResourceId" in declared:
        values["workspaceResourceId"] = WS
    evaluator = ev(template.name, values, {"workspace": WORKSPACE})
    for name in given:  # each value passes its decorators
        evaluator.param(name)


# --- re-deployments: caps, names, what a second deployment leaves alone -------------------------

FLEET = {
    "identity": {"outputs": {"principalId": "fleet-principal", "clientId": "c", "id": "/i"}},
    "workspace": WORKSPACE,
}


def test_200_agent_identities_and_the_fleet_identity_fit_every_nested_deployment():
    """The documented cap, 200 agentPrincipalIds, holds with the fleet identity added: each
    module (the rule's publishers, the hub's senders) takes all 201."""
    ids = [f"00000000-0000-0000-0000-{i:012d}" for i in range(200)]
    main = ev(
        "main.bicep",
        {"workspaceResourceId": WS, "agentPrincipalIds": ids, "deployEventHubs": True},
        FLEET,
    )
    dcr = main.module("dcr", symbols={"dce": {"id": "/dce"}})
    assert len(dcr.param("publisherPrincipalIds")) == 201
    hubs = main.module("eventHubs")
    assert len(hubs.param("senderPrincipalIds")) == 201
    with pytest.raises(ParamRejected, match="agentPrincipalIds"):
        ev(
            "main.bicep",
            {"workspaceResourceId": WS, "agentPrincipalIds": [*ids, "one-more"]},
            FLEET,
        ).param("agentPrincipalIds")


def test_workbook_names_do_not_depend_on_how_the_workspace_id_is_typed():
    """Resource ids are case-insensitive, guid() is not: the same workspace typed in another
    casing (the portal's, the CLI's) keeps its two workbooks instead of making a second pair."""

    def names(workspace):
        e = _workbooks(workspace)
        return [
            e.resource("workbookResources", "name", loop={"wb": wb}) for wb in e.var("workbooks")
        ]

    shouted = WS.replace("resourceGroups/rg-monitor", "resourcegroups/RG-MONITOR").replace(
        "Microsoft.OperationalInsights", "microsoft.operationalinsights"
    )
    assert names(shouted) == names(WS) and names(WS.lower()) == names(WS)


def test_nested_deployments_are_named_per_deployment():
    """Nested deployment names are per resource group: fixed ones collide across concurrent or
    neighbouring deployments (one replaces the other's). The tables' (in the workspace's
    resource group, maybe shared) and existing-vms' are named after the deployment."""

    def tables_name(rg, deployment):
        e = Evaluator(
            INFRA / "tables.bicep",
            {"existingWorkspaceResourceId": WS},
            resource_group={
                "id": f"/subscriptions/s/resourceGroups/{rg}",
                "name": rg,
                "location": "x",
            },
            deployment=deployment,
        )
        return e.resource("tables", "name")

    assert tables_name("rg-a", "se-forwarder-tables") != tables_name("rg-b", "se-forwarder-tables")
    assert tables_name("rg-a", "one") != tables_name("rg-a", "two")
    assert tables_name("rg-a", "one") == tables_name("rg-a", "one")  # a re-run is the same one

    def agents_name(deployment):
        e = Evaluator(
            INFRA / "examples" / "existing-vms.bicep",
            {
                "installerUri": "https://a.blob.core.windows.net/c/install.sh",
                "packageUri": "https://a.blob.core.windows.net/c/b.tar.gz",
                "packageSha256": "",
                "vmNames": ["vm1"],
            },
            deployment=deployment,
        )
        return e.resource("linuxAgents", "name")

    assert agents_name("install-web") != agents_name("install-db")
    assert agents_name("x" * 80).startswith("x") and len(agents_name("x" * 80)) <= 64


def test_event_hubs_scaling_is_left_alone_unless_given():
    """Throughput units and auto-inflate are parameters; left out, they are left out of the
    request, so a re-deployment keeps what was set by hand or by auto-inflate."""

    def namespace(**params):
        e = ev("main.bicep", {"workspaceResourceId": WS, "deployEventHubs": True, **params}, FLEET)
        hub = e.module("eventHubs")
        return hub.resource("namespace", "sku"), hub.resource("namespace", "properties")

    sku, props = namespace()
    assert sku["capacity"] is None and props["isAutoInflateEnabled"] is None
    assert props["maximumThroughputUnits"] is None
    sku, props = namespace(
        eventHubsThroughputUnits=4, eventHubsAutoInflate=True, eventHubsMaximumThroughputUnits=12
    )
    assert (sku["capacity"], props["isAutoInflateEnabled"], props["maximumThroughputUnits"]) == (
        4,
        True,
        12,
    )
    with pytest.raises(BicepFail, match="at least the throughput units"):
        namespace(
            eventHubsThroughputUnits=4, eventHubsAutoInflate=True, eventHubsMaximumThroughputUnits=2
        )


# --- the Bicep the templates need ---------------------------------------------------------------

# Bicep CLI versions that brought what the templates use (Azure/bicep's releases): fail() in
# 0.33.13, user-defined functions GA in 0.26.54, compile-time imports GA in 0.25.3.
FEATURES = {"fail(": (0, 33, 13), "func ": (0, 26, 54), "import {": (0, 25, 3)}


def test_the_documented_bicep_version_has_what_the_templates_use():
    text = "".join(p.read_text() for p in BICEP_FILES)
    needed = max(v for feature, v in FEATURES.items() if feature in text)
    readme = (REPO / "infra" / "README.md").read_text()
    stated = {
        tuple(int(x) for x in m.group(1).split("."))
        for m in re.finditer(r"Bicep (\d+\.\d+\.\d+) or newer", readme)
    }
    assert stated == {needed}, (stated, needed)
