"""A Flexible scale set beside Uniform (infra/examples/scale-set.bicep, orchestrationMode): the
scale set as Azure takes it in Flexible mode, and the upgrade of its existing instances, which
are ordinary VMs with names, through a Run Command each (the model's extension reaches them
only through ``update-instances``, a preview for Flexible)."""

from __future__ import annotations

import pytest
from bicep_eval import BicepFail, Evaluator
from helpers.infra.paths import INFRA

BLOB = "https://fleetpkgs.blob.core.windows.net/se-forwarder"
WEBHOOK = "https://hooks.example.test/services/T0/c2VjcmV0LWZsZXg"
FLEET = {
    "tags": ["service"],
    "policyPreset": "microsoft",
    "policyRules": [],
    "webhookFormat": "slack",
}
SCALE_SET = {
    "name": "checkout",
    "subnetId": "/subnet",
    "sshPublicKey": "ssh-ed25519 AAAA",
    "identityResourceId": "/uami",
    "identityClientId": "c1d2",
    "logsIngestionEndpoint": "https://dcr-0123.westeurope-1.ingest.monitor.azure.com",
    "dcrImmutableId": "dcr-00112233445566778899aabbccddeeff",
    "packageUri": f"{BLOB}/se-forwarder-0.1.0-bundle.tar.gz",
    "packageSha256": "0123456789abcdef" * 4,
    "installerUri": f"{BLOB}/install.sh",
}

INSTANCES = ["checkout_4f3a2b1c", "checkout_9e8d7c6b"]


def scale_set(**params) -> Evaluator:
    return Evaluator(INFRA / "examples/scale-set.bicep", {**SCALE_SET, **params})


def test_a_flexible_scale_set_is_declared_as_azure_takes_it():
    props = scale_set(orchestrationMode="Flexible").resource("scaleSet", "properties")
    assert props["orchestrationMode"] == "Flexible"
    # required by Flexible: a fault-domain count and the NICs' API version; overprovisioning
    # is not supported there
    assert props["platformFaultDomainCount"] == 1
    assert props["virtualMachineProfile"]["networkProfile"]["networkApiVersion"] == "2020-11-01"
    assert props["overprovision"] is None
    # the install is the same: the extension in the model, for new instances
    ext = props["virtualMachineProfile"]["extensionProfile"]["extensions"][0]
    assert ext["properties"]["type"] == "CustomScript"


def test_uniform_stays_the_default_and_as_it_was():
    props = scale_set().resource("scaleSet", "properties")
    assert props["orchestrationMode"] == "Uniform"
    assert props["overprovision"] is False
    assert props["platformFaultDomainCount"] is None
    assert props["virtualMachineProfile"]["networkProfile"]["networkApiVersion"] is None
    assert scale_set().var("upgradeNames") == []


def test_flexible_instances_are_upgraded_through_a_run_command_each():
    """Each named instance is a Microsoft.Compute/virtualMachines/<name>: a Run Command on it
    runs install.sh again with the scale set's settings, fleet and webhook."""
    ev = scale_set(
        orchestrationMode="Flexible",
        instanceNames=INSTANCES,
        fleet=FLEET,
        webhookUrl=WEBHOOK,
        forceUpdateTag="2",
    )
    given = ev.resource("instanceUpgrades", "params")
    assert given["vmNames"] == INSTANCES
    assert given["fleet"] == FLEET and given["webhookUrl"] == WEBHOOK
    assert given["forceUpdateTag"] == "2"
    agent = ev.module("instanceUpgrades", symbols={"vms": [{"location": "westeurope"}] * 2})
    for i, name in enumerate(INSTANCES):
        loop = {"name": name, "i": i}
        # the parent is the instance as an ordinary VM, named as az vm list gives it
        assert agent.resource("vms", "name", loop=loop) == name
        values = {
            p["name"]: p["value"]
            for p in agent.resource("installs", "properties", "parameters", loop=loop)
        }
        assert values["SE_INSTALL_PACKAGE"] == SCALE_SET["packageUri"]
        assert values["SE_INSTALL_PACKAGE_SHA256"] == SCALE_SET["packageSha256"]
        assert values["SE_INSTALL_DCR_ID"] == SCALE_SET["dcrImmutableId"]
        assert values["SE_INSTALL_CLIENT_ID"] == SCALE_SET["identityClientId"]
        assert (
            agent.resource("installs", "properties", "source", "scriptUri", loop=loop)
            == (SCALE_SET["installerUri"])
        )
        protected = agent.resource("installs", "properties", "protectedParameters", loop=loop)
        assert WEBHOOK in str(protected)


def test_no_instance_names_no_run_commands():
    """The first deployment of a Flexible scale set: the model's extension installs the new
    instances, no Run Command is declared."""
    assert scale_set(orchestrationMode="Flexible").var("upgradeNames") == []


def test_uniform_refuses_instance_names():
    """A Uniform instance is no Microsoft.Compute/virtualMachines: a Run Command there would
    fail in Azure; its upgrade is az vmss update-instances."""
    with pytest.raises(BicepFail, match="instanceNames is for orchestrationMode=Flexible"):
        scale_set(instanceNames=INSTANCES).var("upgradeNames")


def test_the_log_analytics_example_passes_the_mode_and_the_instances_through():
    outputs = (
        "identityResourceId",
        "identityClientId",
        "logsIngestionEndpoint",
        "dcrImmutableId",
        "recordsStream",
        "heartbeatsStream",
    )
    ev = Evaluator(
        INFRA / "examples/scale-set-with-log-analytics.bicep",
        {
            "workspaceResourceId": "/subscriptions/0/resourceGroups/r/providers/"
            "Microsoft.OperationalInsights/workspaces/w",
            "subnetId": "/s",
            "sshPublicKey": "k",
            "installerUri": SCALE_SET["installerUri"],
            "packageUri": SCALE_SET["packageUri"],
            "packageSha256": SCALE_SET["packageSha256"],
            "orchestrationMode": "Flexible",
            "instanceNames": INSTANCES,
        },
        {"logs": {"outputs": dict.fromkeys(outputs, "x")}},
    )
    params = ev.resource("scaleSet", "params")
    assert params["orchestrationMode"] == "Flexible" and params["instanceNames"] == INSTANCES
