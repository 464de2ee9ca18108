"""The collector's stage (infra/collector.bicep and its modules), checked offline.

``../shared/azure-types`` has no Microsoft.EventGrid nor Microsoft.Storage type data, so those
resources' bodies are not type-checked (``bicep.untyped`` lists them, and
``python -m bicep_eval ../infra`` in tools/ says so). What is tested here instead: the structure (which
resources, which topic types, delivery with the topics' own identities, dead-lettering, the
storage account closed to keys and anonymous reads), every role assignment's role definition id,
scope and principal (least privilege), the names ARM would compute, and that the configuration the
deployment prints is one ``se-forwarder collect`` accepts.
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
    "modules/collector-reader.bicep",
]
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
        "microsoft.eventhub/namespaces/eventhubs/consumergroups",
        "microsoft.storage/storageaccounts",
        "microsoft.storage/storageaccounts/blobservices",
        "microsoft.storage/storageaccounts/blobservices/containers",
        "microsoft.eventgrid/systemtopics",
        "microsoft.eventgrid/systemtopics/eventsubscriptions",
        RA,
    }
    modules = {
        bicep.string_value(next(c for c in d.named_children if c.type == "string"))
        for d in _tree("collector.bicep").root_node.named_children
        if d.type == "module_declaration"
    }
    assert modules == {
        "modules/identity.bicep",
        "modules/collector.bicep",
        "modules/collector-checkpoints.bicep",
        "modules/collector-topics.bicep",
        "modules/collector-reader.bicep",
    }


def test_the_checker_lists_what_it_could_not_type_check():
    out = bicep.untyped([INFRA / f for f in FILES])
    assert set(out) == {"Microsoft.EventGrid", "Microsoft.Storage"}
    assert any(
        "systemTopics Microsoft.EventGrid/systemTopics@" in w for w in out["Microsoft.EventGrid"]
    )
    done = subprocess.run(
        [sys.executable, "-m", "bicep_eval", str(INFRA)],
        cwd=REPO / "tools",
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "not type-checked (no type data for Microsoft.Storage)" in done.stdout
    assert "not type-checked (no type data for Microsoft.EventGrid)" in done.stdout


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
            "modules/collector-topics.bicep",
            [
                ("senders", EVENT_HUBS_DATA_SENDER, "hub", "systemTopics[i].identity.principalId"),
                (
                    "deadLetterWriters",
                    BLOB_DATA_CONTRIBUTOR,
                    "deadLetters",
                    "systemTopics[i].identity.principalId",
                ),
            ],
        ),
        (
            "modules/collector-reader.bicep",
            [
                ("readerAssignment", READER, "", "collectorPrincipalId"),
                ("scheduledEvents", "scheduledEventContributor", "", "collectorPrincipalId"),
            ],
        ),
        ("collector.bicep", [("publisher", MONITORING_METRICS_PUBLISHER, "dcr", "principalId")]),
    ],
)
def test_role_assignments_are_least_privilege(rel, expected):
    """Each right on the one resource it is needed for: the hub (not the namespace), the
    checkpoint container (not the account), the rule; Reader on the subscription only, the
    scope Resource Graph answers for. No other role id appears in the file."""
    assert role_assignments(rel) == expected
    src = (INFRA / rel).read_text("utf-8")
    assert set(GUID.findall(src)) == {r for _, r, _, _ in expected if GUID.fullmatch(r)}


def test_the_reader_module_is_deployed_at_the_subscription():
    tree = _tree("modules/collector-reader.bicep")
    assert "targetScope = 'subscription'" in bicep.text(tree.root_node)
    stage = Evaluator(
        INFRA / "collector.bicep", {"eventHubsNamespaceName": "n", "eventHubName": "h"}
    )
    assert stage.resource("reader", "scope") == {
        "id": "/subscriptions/00000000-0000-0000-0000-000000000000",
        "subscriptionId": "00000000-0000-0000-0000-000000000000",
        "tenantId": "11111111-1111-1111-1111-111111111111",
    }
    ev = Evaluator(INFRA / "modules/collector-reader.bicep", {"collectorPrincipalId": "p"})
    assert ev.resource("readerAssignment", "properties", "roleDefinitionId") == (
        f"/subscriptions/00000000-0000-0000-0000-000000000000/providers/"
        f"Microsoft.Authorization/roleDefinitions/{READER}"
    )
    res = {r.symbol: r for r in bicep.resources(tree)}
    assert res["scheduledEvents"].conditional and not res["readerAssignment"].conditional


def test_scheduled_event_contributor_is_no_guessed_id_and_empty_deploys():
    """The spec names the role for reading or acknowledging these events but documents no id,
    so the template has no default (a guessed GUID would be another role, or fail): empty, the
    stage deploys without that assignment; a GUID is assigned as given; a role's name (the
    likely mistake) stops the deployment before anything is created, saying how to find the id.
    Should the spec ever give the id, the first assertion says to make it the default."""
    spec = (SHARED / "spec" / "platform-channels.md").read_text("utf-8")
    named = [line for line in spec.splitlines() if "Scheduled Event Contributor" in line]
    assert named and not any(GUID.search(line.lower()) for line in named)
    src = (INFRA / "modules/collector-reader.bicep").read_text("utf-8")
    assert "../shared/spec/platform-channels.md" in src

    def reader(role_id: str) -> Evaluator:
        stage = Evaluator(
            INFRA / "collector.bicep",
            {
                "eventHubsNamespaceName": "n",
                "eventHubName": "h",
                "collectorPrincipalId": "p",
                "scheduledEventContributorRoleId": role_id,
            },
        )
        return stage.module("reader")

    tree = _tree("modules/collector-reader.bicep")
    res = {r.symbol: r for r in bicep.resources(tree)}
    condition = re.search(r"= if \((.*)\) \{", bicep.text(res["scheduledEvents"].node))
    assert res["scheduledEvents"].conditional
    assert condition and condition[1] == "!empty(scheduledEventContributor)"
    assert reader("").var("scheduledEventContributor") == ""
    assert (
        reader("").resource("readerAssignment", "properties", "roleDefinitionId").endswith(READER)
    )
    given = "0F0E0D0C-0B0A-4000-8000-000000000001"
    assigned = reader(given)
    assert assigned.resource("scheduledEvents", "properties", "roleDefinitionId") == (
        "/subscriptions/00000000-0000-0000-0000-000000000000/providers/"
        f"Microsoft.Authorization/roleDefinitions/{given.lower()}"
    )
    for wrong in ("Scheduled Event Contributor", given[:-1], given.replace("-", "")):
        with pytest.raises(BicepFail, match="must be a role definition id"):
            reader(wrong).var("scheduledEventContributor")


def topics_ev(**params) -> Evaluator:
    return Evaluator(
        INFRA / "modules/collector-topics.bicep",
        {
            "namespaceName": "ns",
            "hubName": "platform-events",
            "storageAccountName": "sefwdabc",
            **params,
        },
        {"hub": {"id": HUB_ID}, "account": {"id": ACCOUNT_ID}},
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
    stage = Evaluator(
        INFRA / "collector.bicep",
        {"eventHubsNamespaceName": "n", "eventHubName": "h", "deployMaintenanceTopic": False},
    )
    assert stage.resource("topics", "params", "deployMaintenanceTopic") is False
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
    ev = topics_ev()
    health = ev.var("topics")[1]
    props = ev.resource("toHub", "properties", loop={"t": health, "i": 1})
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
    # the subscription waits for the topic's rights: delivery would fail before them
    deps = bicep.text(
        _props(
            next(
                r
                for r in bicep.resources(_tree("modules/collector-topics.bicep"))
                if r.symbol == "toHub"
            ).body
        )["dependsOn"]
    )
    assert "senders" in deps and "deadLetterWriters" in deps


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
    group = {
        "id": f"/subscriptions/00000000-0000-0000-0000-000000000000/resourceGroups/{rg}",
        "name": rg,
        "location": "westeurope",
    }
    ev = Evaluator(
        INFRA / "collector.bicep",
        {"eventHubsNamespaceName": "ns", "eventHubName": "platform-events"},
        resource_group=group,
    )
    assert re.fullmatch(r"[a-z0-9]{3,24}", ev.param("storageAccountName"))


def test_the_printed_configuration_is_one_the_collector_accepts():
    ev = Evaluator(
        INFRA / "collector.bicep",
        {"eventHubsNamespaceName": "se-forwarder-x1", "eventHubName": "scheduled-events-p4"},
        {
            "identity": {"outputs": {"clientId": "cid-1", "principalId": "pid-1"}},
            "hub": {"outputs": {"consumerGroupName": "se-forwarder-collector"}},
            "checkpoints": {
                "outputs": {
                    "accountUrl": "https://sefwdabc.blob.core.windows.net/",
                    "checkpointContainerName": "se-forwarder-collector",
                }
            },
        },
    )
    out = next(
        d
        for d in _tree("collector.bicep").root_node.named_children
        if d.type == "output_declaration"
        and bicep.text(d.named_children[0]) == "collectorConfigToml"
    )
    doc = tomllib.loads(ev.expr(out.named_children[-1], {}))
    assert doc["identity"] == {"kind": "managed", "client_id": "cid-1"}
    cfg = CollectorConfig.model_validate(doc["collector"])
    assert cfg.event_hub_ready() is None
    assert cfg.namespace == "se-forwarder-x1.servicebus.windows.net"
    assert cfg.checkpoint_account_url == "https://sefwdabc.blob.core.windows.net"
    assert ev.var("principalId") == "pid-1"
    assert ev.resource("hub", "params")["collectorPrincipalId"] == "pid-1"
    assert (
        Evaluator(
            INFRA / "collector.bicep",
            {"eventHubsNamespaceName": "n", "eventHubName": "h", "collectorPrincipalId": "mine"},
        ).var("createIdentity")
        is False
    )


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


@pytest.mark.parametrize("rel", ["collector.bicep", "main.bicep", *FILES[1:]])
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
