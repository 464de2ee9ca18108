"""The collector's stage (infra/collector.bicep and its modules), checked offline.

Every resource body, Event Grid and Storage included, is type-checked against
``../shared/azure-types`` by test_bicep.py. What is tested here: the structure (the collector's own
hub, which topic types, delivery with the topics' own identities, dead-lettering and its alerts,
the storage account closed to keys and anonymous reads), every role assignment's role definition
id, scope and principal (least privilege) and its name (scope, principal, role: re-deployable),
the names ARM would compute (nested deployments, event subscriptions), and that the configuration
the deployment prints is one ``se-forwarder collect`` accepts.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib

import bicep_eval as bicep
import pytest
from bicep_eval import BicepFail, Evaluator
from helpers.infra.paths import INFRA, REPO, SHARED

from se_forwarder.collector.config import CollectorConfig
from se_forwarder.collector.eventgrid import ANNOTATED_TYPES, SCHEDULED_TYPES

# Azure built-in role definition ids (the same in every tenant)
READER = "acdd72a7-3385-48ef-bd42-f606fba81ae7"
BLOB_DATA_CONTRIBUTOR = "ba92f5b4-2d11-453d-a403-e96b0029c9fe"
EVENT_HUBS_DATA_RECEIVER = "a638d3c7-ab3a-418d-83e6-5f17a39d4fde"
EVENT_HUBS_DATA_SENDER = "2b629674-e913-4c01-ae53-ef4638d8f975"
MONITORING_METRICS_PUBLISHER = "3913510d-42f4-4e42-8a64-420c390055eb"
GUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")

FILES = [
    "collector.bicep",
    "modules/collector.bicep",
    "modules/collector-checkpoints.bicep",
    "modules/collector-topics.bicep",
    "modules/collector-senders.bicep",
    "modules/collector-delivery.bicep",
    "modules/collector-alerts.bicep",
    "modules/collector-reader.bicep",
    "modules/collector-publisher.bicep",
    "modules/collector-agents-reader.bicep",
    "modules/package-reader.bicep",
]
LOG_ANALYTICS_READER = "73c42c96-874c-492b-b04d-ab87d138a893"
STORAGE_BLOB_DATA_READER = "2a2b9908-6ea1-4ae2-8e65-a410df84e7d1"
MAINTENANCE_APP_ID = "78315a30-673a-4a46-8e5c-ce59dbc6adf8"  # an application id, not a role
RA = "microsoft.authorization/roleassignments"
HUB_ID = (
    "/subscriptions/00000000-0000-0000-0000-000000000000/resourceGroups/rg-test/providers/"
    "Microsoft.EventHub/namespaces/ns/eventhubs/platform-events"
)
ACCOUNT_ID = (
    "/subscriptions/00000000-0000-0000-0000-000000000000/resourceGroups/rg-test/"
    "providers/Microsoft.Storage/storageAccounts/sefwdabc"
)


def _tree(rel: str):
    return bicep.parse((INFRA / rel).read_bytes())


def _props(node) -> dict:
    return {k: v for k, v, _ in bicep.object_properties(node)}


def _vars(rel: str) -> dict[str, str]:
    """GUID-valued variables (role definition ids) of a file."""
    src = (INFRA / rel).read_text("utf-8")
    return {m[1]: m[2] for m in re.finditer(r"var (\w+) = '(" + GUID.pattern + ")'", src)}


def role_assignments(rel: str) -> list[tuple[str, str, str, str]]:
    """(symbol, role definition id, scope as written ('' = the deployment's), principal as
    written) of every role assignment a file declares."""
    roles = _vars(rel)
    out = []
    for r in bicep.resources(_tree(rel)):
        if r.type.lower() != RA:
            continue
        body = _props(r.body)
        props = _props(body["properties"])
        role_expr = bicep.text(props["roleDefinitionId"])
        name = re.search(r"'Microsoft.Authorization/roleDefinitions', (\w+)\)", role_expr)[1]
        scope = bicep.text(body["scope"]) if "scope" in body else ""
        out.append((r.symbol, roles.get(name, name), scope, bicep.text(props["principalId"])))
    return out


def test_the_stage_deploys_what_the_collector_needs():
    types = set()
    for rel in FILES:
        types |= {r.type.lower() for r in bicep.resources(_tree(rel)) if not r.existing}
    assert types == {
        "microsoft.eventhub/namespaces/eventhubs",
        "microsoft.eventhub/namespaces/eventhubs/consumergroups",
        "microsoft.storage/storageaccounts",
        "microsoft.storage/storageaccounts/blobservices",
        "microsoft.storage/storageaccounts/blobservices/containers",
        "microsoft.eventgrid/systemtopics",
        "microsoft.eventgrid/systemtopics/eventsubscriptions",
        "microsoft.insights/metricalerts",
        RA,
    }
    modules = {
        bicep.string_value(next(c for c in d.named_children if c.type == "string"))
        for d in _tree("collector.bicep").root_node.named_children
        if d.type == "module_declaration"
    }
    assert modules == {"modules/identity.bicep", *FILES[1:]}


def test_event_grid_and_storage_are_type_checked_now():
    """../shared/azure-types holds Microsoft.EventGrid and Microsoft.Storage: nothing of the
    stage goes unchecked, and a wrong property of either is reported."""
    assert bicep.untyped([INFRA / f for f in FILES]) == {}
    for rel in FILES:
        assert bicep.check_file(INFRA / rel) == [], rel
    done = subprocess.run(
        [sys.executable, "-m", "bicep_eval", str(INFRA)],
        cwd=REPO / "tools",
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "not type-checked" not in done.stdout


@pytest.mark.parametrize(
    "resource",
    [
        "resource t 'Microsoft.EventGrid/systemTopics@2025-02-15' = {\n"
        "  name: 't'\n  location: 'global'\n  properties: {\n    sourse: 'x'\n  }\n}\n",
        "resource a 'Microsoft.Storage/storageAccounts@2025-01-01' = {\n  name: 'a'\n"
        "  location: 'x'\n  kind: 'StorageV2'\n  sku: {\n    name: 'Standard_LRS'\n  }\n"
        "  properties: {\n    allowSharedKeyAcess: false\n  }\n}\n",
    ],
    ids=["eventgrid", "storage"],
)
def test_a_misspelt_event_grid_or_storage_property_is_reported(tmp_path, resource):
    f = tmp_path / "t.bicep"
    f.write_text(resource)
    assert bicep.check_file(f), "the misspelt property passed"


def test_a_misspelt_provider_is_listed_not_passed_silently(tmp_path):
    f = tmp_path / "typo.bicep"
    f.write_text("resource ns 'Microsoft.EventHubb/namespaces@2024-01-01' = {\n  name: 'x'\n}\n")
    assert bicep.check_file(f) == []  # nothing to check it against ...
    listed = "typo.bicep:1:1: ns Microsoft.EventHubb/namespaces@2024-01-01"
    assert bicep.untyped([f]) == {"Microsoft.EventHubb": [listed]}
    f.write_text(
        "resource ns 'Microsoft.EventHubb/namespaces@2024-01-01' = {\n  location: 'x'\n}\n"
    )
    assert any("required property name is missing" in p for p in bicep.check_file(f))


@pytest.mark.parametrize(
    "rel,expected",
    [
        (
            "modules/collector.bicep",
            [("receiver", EVENT_HUBS_DATA_RECEIVER, "hub", "collectorPrincipalId")],
        ),
        (
            "modules/collector-checkpoints.bicep",
            [("checkpointWriter", BLOB_DATA_CONTRIBUTOR, "checkpoints", "collectorPrincipalId")],
        ),
        (
            "modules/collector-senders.bicep",
            [("senders", EVENT_HUBS_DATA_SENDER, "hub", "principalId")],
        ),
        (
            "modules/collector-delivery.bicep",
            [("deadLetterWriters", BLOB_DATA_CONTRIBUTOR, "deadLetters", "t.principalId")],
        ),
        (
            "modules/collector-reader.bicep",
            [
                ("readerAssignment", READER, "", "collectorPrincipalId"),
                (
                    "maintenanceProvider",
                    "scheduledEventContributor",
                    "",
                    "maintenanceProviderPrincipalId",
                ),
                ("scheduledEvents", "scheduledEventContributor", "", "collectorPrincipalId"),
            ],
        ),
        (
            "modules/collector-publisher.bicep",
            [("publisher", MONITORING_METRICS_PUBLISHER, "dcr", "collectorPrincipalId")],
        ),
        (
            "modules/package-reader.bicep",
            [("reader", STORAGE_BLOB_DATA_READER, "container", "principalId")],
        ),
        (
            "modules/collector-agents-reader.bicep",
            [("heartbeatsReader", LOG_ANALYTICS_READER, "workspace", "collectorPrincipalId")],
        ),
        ("collector.bicep", []),
        ("modules/collector-topics.bicep", []),
    ],
)
def test_role_assignments_are_least_privilege(rel, expected):
    """Each right on the one resource it is needed for: the hub (not the namespace), the
    checkpoint and dead-letter containers (not the account), the rule, the package container;
    Reader and Scheduled Event Contributor on the subscription only, the scope Resource Graph
    answers for. No other role id appears in the file."""
    assert role_assignments(rel) == expected
    src = (INFRA / rel).read_text("utf-8")
    # the Maintenance resource provider's application id is named (how to find its object id)
    ids = set(GUID.findall(src)) - {MAINTENANCE_APP_ID}
    assert ids == {r for _, r, _, _ in expected if GUID.fullmatch(r)}


def _param_names(rel: str) -> set[str]:
    return set(bicep.params(_tree(rel)))


@pytest.mark.parametrize("rel", FILES)
def test_every_role_assignment_is_named_from_scope_principal_and_role(rel):
    """A name without the principal breaks re-deploys ("principalId can't be modified" once the
    identity or a topic is recreated): every assignment's guid() takes the scope's id, the
    principal and the role, and the principal is a parameter of the module (a loop over one), so
    the name is known when that nested deployment starts."""
    params = _param_names(rel)
    for r in bicep.resources(_tree(rel)):
        if r.type.lower() != RA:
            continue
        body = _props(r.body)
        name = bicep.text(body["name"])
        principal = bicep.text(_props(body["properties"])["principalId"])
        root = principal.split(".")[0]
        loop = re.search(r"\[for (?:\((\w+), \w+\)|(\w+)) in (\w+)", bicep.text(r.node))
        assert root in params or (loop and root in loop.groups()[:2] and loop[3] in params), (
            r.symbol,
            principal,
        )
        m = re.fullmatch(r"guid\((.+), (.+), (.+)\)", name)
        assert m, (r.symbol, name)
        scope = bicep.text(body["scope"]) if "scope" in body else "subscription()"
        assert m[1] in (f"{scope}.id", "subscription().id"), (r.symbol, name)
        assert m[2] == principal, (r.symbol, name)


IDENTITY = {"identity": {"outputs": {"clientId": "cid-1", "principalId": "pid-1"}}}


def stage(**params) -> Evaluator:
    return Evaluator(
        INFRA / "collector.bicep", {"eventHubsNamespaceName": "ns", **params}, IDENTITY
    )


def test_the_collector_reads_a_hub_of_its_own_that_no_agent_may_write():
    """The agents' hub takes every agent identity's messages (Data Sender for the fleet); the
    collector's hub is created by its stage, the system topics' identities are its only senders
    and the collector its only reader."""
    ev = stage()
    hub = ev.module("hub")
    assert hub.resource("hub", "name") == "platform-events"
    assert hub.resource("hub", "properties") == {
        "partitionCount": 2,
        "messageRetentionInDays": 7,
    }
    main = Evaluator(
        INFRA / "modules/event-hubs.bicep", {"namespaceName": "ns12345678", "location": "x"}
    )
    assert hub.resource("hub", "name") != main.resource("hub", "name")
    senders = bicep.text(
        next(
            d
            for d in _tree("collector.bicep").root_node.named_children
            if d.type == "module_declaration" and "senders" in bicep.text(d.named_children[0])
        )
    )
    assert "topicPrincipalIds: topics.outputs.principalIds" in senders
    assert "eventHubName" not in _param_names("collector.bicep")  # no pointing at stage 2's hub


@pytest.mark.parametrize("days,ok", [(1, True), (7, True), (0, False), (8, False)])
def test_the_hub_retention_is_a_parameter_within_the_standard_tier(days, ok):
    from bicep_eval import ParamRejected

    if ok:
        hub = stage(platformHubRetentionInDays=days).module("hub")
        assert hub.resource("hub", "properties", "messageRetentionInDays") == days
    else:
        with pytest.raises(ParamRejected):
            stage(platformHubRetentionInDays=days).module("hub")


def test_the_namespace_may_sit_in_any_resource_group_or_subscription():
    ev = stage(
        eventHubsNamespaceResourceGroup="rg-hubs",
        eventHubsNamespaceSubscriptionId="22222222-2222-2222-2222-222222222222",
    )
    for module in ("hub", "senders"):
        assert ev.resource(module, "scope") == {
            "id": "/subscriptions/22222222-2222-2222-2222-222222222222/resourceGroups/rg-hubs",
            "name": "rg-hubs",
            "subscriptionId": "22222222-2222-2222-2222-222222222222",
        }
    assert stage().resource("hub", "scope")["id"] == (
        "/subscriptions/00000000-0000-0000-0000-000000000000/resourceGroups/rg-test"
    )


def _group(name: str, location: str = "westeurope") -> dict:
    return {
        "id": f"/subscriptions/00000000-0000-0000-0000-000000000000/resourceGroups/{name}",
        "name": name,
        "location": location,
    }


def test_nested_deployment_names_differ_per_resource_group_and_fit():
    """A second collector (another group, another region) must not reuse the subscription-scope
    deployment's name (InvalidDeploymentLocation), nor another collector's names in a shared
    namespace's group. ARM caps a deployment name at 64 characters."""
    modules = [
        bicep.text(d.named_children[0])
        for d in _tree("collector.bicep").root_node.named_children
        if d.type == "module_declaration"
    ]
    a = Evaluator(
        INFRA / "collector.bicep", {"eventHubsNamespaceName": "ns"}, resource_group=_group("rg-a")
    )
    b = Evaluator(
        INFRA / "collector.bicep",
        {"eventHubsNamespaceName": "ns"},
        resource_group=_group("rg-b", "eastus"),
    )
    for m in modules:
        na, nb = a.resource(m, "name"), b.resource(m, "name")
        assert na != nb, m
        assert len(na) <= 64 and re.fullmatch(r"[-\w.()]+", na), na


@pytest.mark.parametrize(
    "hub", ["platform-events", "platform.events_v2", "a", "x" * 256, "Ev_ents.2026-01"]
)
def test_event_subscription_names_are_valid_for_any_hub_name(hub):
    """Event Grid takes 3 to 64 letters, digits and hyphens; a hub name may hold '.' and '_' and be
    256 characters long."""
    ev = Evaluator(
        INFRA / "modules/collector-delivery.bicep",
        {
            "topics": [],
            "hubId": HUB_ID.rsplit("/", 1)[0] + "/" + hub,
            "storageAccountName": "sefwdabc",
        },
    )
    assert re.fullmatch(r"[A-Za-z0-9-]{3,64}", ev.var("subscriptionName")), ev.var(
        "subscriptionName"
    )


@pytest.mark.parametrize(
    "ranges,subnets,public,trusted",
    [
        ([], [], "Enabled", False),
        (["203.0.113.0/24"], [], "Enabled", True),
        (
            [],
            [
                "/subscriptions/x/resourceGroups/r/providers/Microsoft.Network/virtualNetworks/v/subnets/s"
            ],
            "Enabled",
            True,
        ),
        ([], [], "Disabled", True),
    ],
)
def test_a_firewalled_namespace_lets_event_grid_in(ranges, subnets, public, trusted):
    """Event Grid's managed-identity delivery reaches a hub behind IP or subnet rules only with
    "Allow trusted Microsoft services"; without it every notification is dead-lettered."""
    ev = Evaluator(
        INFRA / "modules/event-hubs.bicep",
        {
            "namespaceName": "se-forwarder-x1",
            "location": "westeurope",
            "allowedIpRanges": ranges,
            "allowedSubnetIds": subnets,
            "publicNetworkAccess": public,
        },
    )
    rules = ev.resource("networkRules", "properties")
    assert rules["trustedServiceAccessEnabled"] is trusted
    assert rules["defaultAction"] == ("Deny" if ranges or subnets else "Allow")


def test_dead_letters_and_failed_deliveries_raise_alerts_to_the_action_group():
    topics = [
        {"name": "se-forwarder-maintenance", "eventTypes": None, "principalId": "p1"},
        {"name": "se-forwarder-health", "eventTypes": ["x"], "principalId": "p2"},
    ]
    group = "/subscriptions/0/resourceGroups/rg/providers/Microsoft.Insights/actionGroups/ag"
    ev = Evaluator(
        INFRA / "modules/collector-alerts.bicep", {"topics": topics, "actionGroupId": group}
    )
    rules = ev.var("rules")
    assert {(r["topic"], r["metric"]) for r in rules} == {
        (t["name"], m)
        for t in topics
        for m in ("DeadLetteredCount", "DeliveryAttemptFailCount", "DroppedEventCount")
    }
    for r in rules:
        props = ev.resource("alerts", "properties", loop={"r": r})
        assert props["scopes"] == [
            "/subscriptions/00000000-0000-0000-0000-000000000000/resourceGroups/rg-test/providers/"
            f"Microsoft.EventGrid/systemTopics/{r['topic']}"
        ]
        (crit,) = props["criteria"]["allOf"]
        assert crit["metricName"] == r["metric"] and crit["operator"] == "GreaterThan"
        assert crit["threshold"] == 0 and crit["timeAggregation"] == "Total"
        assert crit["metricNamespace"] == "Microsoft.EventGrid/systemTopics"
        assert props["actions"] == [{"actionGroupId": group}]
        assert ev.resource("alerts", "location", loop={"r": r}) == "global"
    quiet = Evaluator(INFRA / "modules/collector-alerts.bicep", {"topics": topics})
    assert quiet.resource("alerts", "properties", "actions", loop={"r": rules[0]}) == []
    assert stage(actionGroupId=group).resource("alerts", "params", "actionGroupId") == group
    main = (INFRA / "main.bicep").read_text("utf-8")
    assert "output actionGroupId string" in main


def test_the_reader_module_is_deployed_at_the_subscription():
    tree = _tree("modules/collector-reader.bicep")
    assert "targetScope = 'subscription'" in bicep.text(tree.root_node)
    given = "0f0e0d0c-0b0a-4000-8000-000000000001"
    ev = stage(resourceGraphReader=True, scheduledEventContributorRoleId=given)
    assert ev.resource("reader", "scope") == {
        "id": "/subscriptions/00000000-0000-0000-0000-000000000000",
        "subscriptionId": "00000000-0000-0000-0000-000000000000",
        "tenantId": "11111111-1111-1111-1111-111111111111",
    }
    inner = Evaluator(
        INFRA / "modules/collector-reader.bicep",
        {"collectorPrincipalId": "p", "scheduledEventContributorRoleId": given},
    )
    assert inner.resource("readerAssignment", "properties", "roleDefinitionId") == (
        f"/subscriptions/00000000-0000-0000-0000-000000000000/providers/"
        f"Microsoft.Authorization/roleDefinitions/{READER}"
    )


def test_one_answer_on_the_role_that_reads_the_events():
    """Microsoft's pages (the spec) say reading the events needs Scheduled Event Contributor: the
    Resource Graph channel asks for its id and refuses to deploy without it (no guessed GUID,
    no silent Reader-only deployment); the Event Grid channel (the default) needs neither; no
    document says Reader is enough."""
    spec = (SHARED / "spec" / "platform-channels.md").read_text("utf-8")
    named = [line for line in spec.splitlines() if "Scheduled Event Contributor" in line]
    assert named and not any(GUID.search(line.lower()) for line in named)
    assert stage().param("resourceGraphReader") is False
    with pytest.raises(BicepFail, match="scheduledEventContributorRoleId"):
        stage(resourceGraphReader=True).var("roleIdGiven")
    given = "0F0E0D0C-0B0A-4000-8000-000000000001"
    inner = stage(
        resourceGraphReader=True, collectorPrincipalId="p", scheduledEventContributorRoleId=given
    ).module("reader")
    assert inner.resource("scheduledEvents", "properties", "roleDefinitionId").endswith(
        given.lower()
    )
    assert inner.resource("readerAssignment", "properties", "principalId") == "p"
    for wrong in ("Scheduled Event Contributor", given[:-1], given.replace("-", "")):
        with pytest.raises(BicepFail, match="must be a role definition id"):
            stage(
                resourceGraphReader=True,
                collectorPrincipalId="p",
                scheduledEventContributorRoleId=wrong,
            ).module("reader").var("scheduledEventContributor")
    for doc in ("docs/collector.md", "infra/README.md", "docs/install.md"):
        text = " ".join((REPO / doc).read_text("utf-8").split())
        assert "Reader is enough" not in text, doc
    collector_doc = " ".join((REPO / "docs/collector.md").read_text("utf-8").split())
    assert "Scheduled Event Contributor | the subscription" in collector_doc


def test_the_maintenance_provider_gets_its_role_from_the_template():
    """Step 4 of Microsoft's Resource Graph page: Scheduled Event Contributor for the Maintenance
    resource provider's service principal (application 78315a30-...), whose object id differs per
    tenant: a parameter, printed by collector-prerequisites.sh."""
    given = "0f0e0d0c-0b0a-4000-8000-000000000001"
    ev = stage(maintenanceProviderPrincipalId="sp-object", scheduledEventContributorRoleId=given)
    inner = ev.module("reader")
    assert inner.resource("maintenanceProvider", "properties", "principalId") == "sp-object"
    assert inner.resource("maintenanceProvider", "properties", "roleDefinitionId").endswith(given)
    with pytest.raises(BicepFail, match="scheduledEventContributorRoleId"):
        stage(maintenanceProviderPrincipalId="sp-object").var("roleIdGiven")
    src = (INFRA / "modules/collector-reader.bicep").read_text("utf-8")
    assert MAINTENANCE_APP_ID in src


def test_approvals_from_outside_read_the_agents_heartbeats_and_nothing_more():
    """approveFromOutside=true (the preview acknowledge API): Log Analytics Reader on the agents'
    workspace alone, in its group; the acknowledge acts with the Scheduled Event Contributor the
    Resource Graph channel holds (required, with its role id), so no broader or second
    assignment; off by default."""
    assert stage().param("approveFromOutside") is False
    with pytest.raises(BicepFail, match="needs resourceGraphReader=true"):
        stage(approveFromOutside=True, agentsWorkspaceName="ws").var("approvalsWorkspace")
    given = "0f0e0d0c-0b0a-4000-8000-000000000001"
    on = {"resourceGraphReader": True, "scheduledEventContributorRoleId": given}
    with pytest.raises(BicepFail, match="needs agentsWorkspaceName"):
        stage(approveFromOutside=True, **on).var("approvalsWorkspace")
    ev = stage(
        approveFromOutside=True,
        agentsWorkspaceName="se-forwarder-ws",
        agentsWorkspaceResourceGroup="rg-monitor",
        collectorPrincipalId="p",
        **on,
    )
    assert ev.resource("agentsReader", "scope")["name"] == "rg-monitor"
    inner = ev.module("agentsReader")
    assert inner.resource("heartbeatsReader", "properties", "principalId") == "p"
    assert inner.resource("heartbeatsReader", "properties", "roleDefinitionId").endswith(
        LOG_ANALYTICS_READER
    )
    assert inner.param("workspaceName") == "se-forwarder-ws"  # its scope: that workspace
    assert ev.module("reader").resource("scheduledEvents", "properties", "principalId") == "p"


def test_the_package_container_read_goes_to_the_collector():
    container = (
        "/subscriptions/33333333-3333-3333-3333-333333333333/resourceGroups/rg-pkg/providers/"
        "Microsoft.Storage/storageAccounts/pkgacct/blobServices/default/containers/se-forwarder"
    )
    ev = stage(packageContainerResourceId=container, collectorPrincipalId="p")
    assert ev.resource("packageReader", "scope")["id"] == (
        "/subscriptions/33333333-3333-3333-3333-333333333333/resourceGroups/rg-pkg"
    )
    inner = ev.module("packageReader")
    assert inner.param("storageAccountName") == "pkgacct"
    # none given: the skipped module's scope still evaluates; a wrong id stops the deployment
    assert stage().resource("packageReader", "scope")["name"] == "rg-test"
    with pytest.raises(BicepFail, match="must be a blob container"):
        stage(packageContainerResourceId=container.rsplit("/containers/", 1)[0]).var(
            "packageContainer"
        )
    assert inner.param("containerName") == "se-forwarder"
    assert inner.resource("reader", "properties", "principalId") == "p"


def topics_ev(**params) -> Evaluator:
    return Evaluator(INFRA / "modules/collector-topics.bicep", params)


def delivery_ev(topics: list) -> Evaluator:
    return Evaluator(
        INFRA / "modules/collector-delivery.bicep",
        {"topics": topics, "hubId": HUB_ID, "storageAccountName": "sefwdabc"},
        {"account": {"id": ACCOUNT_ID}},
    )


def test_the_system_topics_cover_the_subscription_and_what_the_collector_reads():
    both = topics_ev().var("topics")
    assert [t["topicType"] for t in both] == [
        "Microsoft.ResourceNotifications.MaintenanceResources",
        "Microsoft.ResourceNotifications.HealthResources",
    ]
    assert [t["topicType"] for t in topics_ev(deployHealthTopic=False).var("topics")] == [
        "Microsoft.ResourceNotifications.MaintenanceResources"
    ]
    assert [t["topicType"] for t in topics_ev(deployMaintenanceTopic=False).var("topics")] == [
        "Microsoft.ResourceNotifications.HealthResources"
    ]
    assert (
        stage(deployMaintenanceTopic=False).resource("topics", "params", "deployMaintenanceTopic")
        is False
    )
    maintenance, health = both
    assert maintenance["eventTypes"] is None  # every type: the collector counts what it ignores
    assert {e.lower() for e in health["eventTypes"]} <= ANNOTATED_TYPES
    assert (
        "microsoft.resourcenotifications.maintenanceresources.scheduledeventemitted"
        in SCHEDULED_TYPES
    )
    ev = topics_ev()
    topic = ev.resource("systemTopics", loop={"t": maintenance})
    assert topic["location"] == "global"
    assert topic["identity"] == {"type": "SystemAssigned"}
    assert topic["properties"] == {
        "source": "/subscriptions/00000000-0000-0000-0000-000000000000",
        "topicType": "Microsoft.ResourceNotifications.MaintenanceResources",
    }


def test_delivery_to_the_hub_with_the_topic_identity_and_dead_letters():
    health = {
        "name": "se-forwarder-health",
        "eventTypes": ["Microsoft.ResourceNotifications.HealthResources.ResourceAnnotated"],
        "principalId": "p2",
    }
    ev = delivery_ev([health])
    props = ev.resource("toHub", "properties", loop={"t": health, "i": 0})
    assert props["eventDeliverySchema"] == "EventGridSchema"  # what collector/eventgrid.py reads
    assert "destination" not in props  # no key-based delivery: the namespace has no SAS keys
    assert props["deliveryWithResourceIdentity"] == {
        "identity": {"type": "SystemAssigned"},
        "destination": {"endpointType": "EventHub", "properties": {"resourceId": HUB_ID}},
    }
    assert props["deadLetterWithResourceIdentity"]["deadLetterDestination"] == {
        "endpointType": "StorageBlob",
        "properties": {"resourceId": ACCOUNT_ID, "blobContainerName": "eventgrid-deadletter"},
    }
    assert props["filter"] == {
        "includedEventTypes": ["Microsoft.ResourceNotifications.HealthResources.ResourceAnnotated"]
    }
    assert props["retryPolicy"]["eventTimeToLiveInMinutes"] == 1440
    # the subscriptions wait for the topics' rights: delivery would fail before them
    deps = bicep.text(
        _props(
            next(
                r
                for r in bicep.resources(_tree("modules/collector-delivery.bicep"))
                if r.symbol == "toHub"
            ).body
        )["dependsOn"]
    )
    assert "deadLetterWriters" in deps
    stage_src = bicep.text(
        next(
            d
            for d in _tree("collector.bicep").root_node.named_children
            if d.type == "module_declaration" and bicep.text(d.named_children[0]) == "delivery"
        )
    )
    assert re.search(r"dependsOn: \[\s*senders\s*\]", stage_src)


def test_the_checkpoint_account_takes_tokens_only():
    ev = Evaluator(
        INFRA / "modules/collector-checkpoints.bicep",
        {"storageAccountName": "sefwdabc", "location": "westeurope", "collectorPrincipalId": "p"},
    )
    props = ev.resource("account", "properties")
    assert props["allowSharedKeyAccess"] is False and props["allowBlobPublicAccess"] is False
    assert props["minimumTlsVersion"] == "TLS1_2" and props["supportsHttpsTrafficOnly"] is True
    for c in ("checkpoints", "deadLetters"):
        assert ev.resource(c, "properties") == {"publicAccess": "None"}
    assert ev.resource("checkpoints", "name") == CollectorConfig().checkpoint_container


@pytest.mark.parametrize("rg", ["rg-a", "RG-Fleet-Monitoring-Prod-West-Europe-0001", "x"])
def test_the_default_storage_account_name_is_a_valid_one(rg):
    ev = Evaluator(
        INFRA / "collector.bicep",
        {"eventHubsNamespaceName": "ns"},
        resource_group=_group(rg),
    )
    assert re.fullmatch(r"[a-z0-9]{3,24}", ev.param("storageAccountName"))


def _output(rel: str, name: str):
    return next(
        d
        for d in _tree(rel).root_node.named_children
        if d.type == "output_declaration" and bicep.text(d.named_children[0]) == name
    )


def test_the_printed_configuration_is_one_the_collector_accepts():
    """The namespace's host name comes from the namespace itself (its serviceBusEndpoint), not a
    hard-coded servicebus.windows.net, which is wrong in sovereign clouds."""
    ev = Evaluator(
        INFRA / "collector.bicep",
        {"eventHubsNamespaceName": "se-forwarder-x1"},
        {
            "identity": {"outputs": {"clientId": "cid-1", "principalId": "pid-1"}},
            "hub": {
                "outputs": {
                    "consumerGroupName": "se-forwarder-collector",
                    "hubName": "platform-events",
                    "fullyQualifiedNamespace": "se-forwarder-x1.servicebus.chinacloudapi.cn",
                }
            },
            "checkpoints": {
                "outputs": {
                    "accountUrl": "https://sefwdabc.blob.core.windows.net/",
                    "checkpointContainerName": "se-forwarder-collector",
                }
            },
        },
    )
    doc = tomllib.loads(
        ev.expr(_output("collector.bicep", "collectorConfigToml").named_children[-1], {})
    )
    assert doc["identity"] == {"kind": "managed", "client_id": "cid-1"}
    cfg = CollectorConfig.model_validate(doc["collector"])
    assert cfg.event_hub_ready() is None
    assert cfg.namespace == "se-forwarder-x1.servicebus.chinacloudapi.cn"
    assert cfg.hub == "platform-events"
    assert cfg.checkpoint_account_url == "https://sefwdabc.blob.core.windows.net"
    assert ev.var("principalId") == "pid-1"
    assert ev.resource("hub", "params")["collectorPrincipalId"] == "pid-1"
    assert stage(collectorPrincipalId="mine").var("createIdentity") is False
    for rel in FILES:
        assert "servicebus.windows.net" not in (INFRA / rel).read_text("utf-8"), rel
    hub = Evaluator(
        INFRA / "modules/collector.bicep",
        {"namespaceName": "ns", "collectorPrincipalId": "p"},
        {
            "namespace": {
                "properties": {"serviceBusEndpoint": "https://ns.servicebus.usgovcloudapi.net:443/"}
            }
        },
    )
    out = _output("modules/collector.bicep", "fullyQualifiedNamespace").named_children[-1]
    assert hub.expr(out, {}) == "ns.servicebus.usgovcloudapi.net"


@pytest.mark.external
def test_the_first_rows_check_is_a_query_on_the_platform_table():
    """The first deployment's check (docs/collector.md): a query the workspace can run, on the
    platform table's columns, analyzed by Kusto's language service."""
    from helpers.infra import kql

    text = stage().expr(_output("collector.bicep", "firstRowsQuery").named_children[-1], {})
    (result,) = kql.analyze([kql.Query("first-rows", text)]).values()
    assert result.errors == [], result.describe_errors()
    assert result.tables_referenced == ["ScheduledEventsPlatform_CL"]
    assert result.result_columns == ["Channel", "Rows", "Events", "Last"]
    doc = (REPO / "docs/collector.md").read_text("utf-8")
    assert "firstRowsQuery" in doc and "again" in doc


RUNTIME = re.compile(r"\.outputs\.|\.properties\.|\.identity\.|\breference\(|\blistKeys\(")


def _runtime_vars(tree) -> set[str]:
    """Variables whose value is known only during the deployment (a module's outputs, a
    resource's properties), through other variables too."""
    decls = {
        bicep.text(d.named_children[0]): bicep.text(d.named_children[-1])
        for d in tree.root_node.named_children
        if d.type == "variable_declaration"
    }
    out: set[str] = set()
    while True:
        more = {
            n
            for n, e in decls.items()
            if n not in out and (RUNTIME.search(e) or any(re.search(rf"\b{v}\b", e) for v in out))
        }
        if not more:
            return out
        out |= more


@pytest.mark.parametrize("rel", ["main.bicep", *FILES])
def test_resource_names_are_known_at_the_start_of_the_deployment(rel):
    """ARM needs every resource's name before it deploys anything (Bicep refuses the rest,
    BCP120): a role assignment's guid() must not take a principal id a module returns."""
    tree = _tree(rel)
    runtime = _runtime_vars(tree)
    for r in bicep.resources(tree):
        name = bicep.text(_props(r.body)["name"])
        assert not RUNTIME.search(name), (r.symbol, name)
        assert not any(re.search(rf"\b{v}\b", name) for v in runtime), (r.symbol, name)


def test_the_runtime_check_sees_a_principal_from_a_module():
    tree = bicep.parse(b"var p = identity!.outputs.principalId\nvar q = toLower(p)\n")
    assert _runtime_vars(tree) == {"p", "q"}
