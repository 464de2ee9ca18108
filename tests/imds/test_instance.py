"""The instance document at the edge: each field of ``compute`` stands or falls on its own (a
wrong type or an empty value is null), and the VM name always has a value."""

from __future__ import annotations

import pytest

from se_forwarder.imds.instance import identity_from_instance
from se_forwarder.report.render.values import resource_name


def test_a_full_document_gives_every_identity_column():
    vm = identity_from_instance(
        {
            "compute": {
                "name": "vm-1",
                "vmId": "0f1e",
                "resourceId": "/subscriptions/s/resourceGroups/rg/x",
                "subscriptionId": "s",
                "resourceGroupName": "rg",
                "location": "westeurope",
                "zone": "2",
                "vmScaleSetName": "ss",
                "platformFaultDomain": 1,
                "platformUpdateDomain": "4",
                "osType": "Linux",
            }
        },
        computer="host-1",
    )
    assert (
        vm.Computer,
        vm.VmName,
        vm.VmId,
        vm.SubscriptionId,
        vm.ResourceGroup,
        vm.Location,
        vm.Zone,
        vm.ScaleSetName,
        vm.FaultDomain,
        vm.UpdateDomain,
    ) == ("host-1", "vm-1", "0f1e", "s", "rg", "westeurope", "2", "ss", 1, 4)


@pytest.mark.parametrize(
    "compute, column, expected",
    [
        ({"vmId": 5}, "VmId", None),  # a number where text is due
        ({"zone": ""}, "Zone", None),  # empty is unknown
        ({"location": None}, "Location", None),
        ({"platformFaultDomain": True}, "FaultDomain", None),  # a bool is not a count
        ({"platformFaultDomain": 2.5}, "FaultDomain", None),
        ({"platformFaultDomain": "x"}, "FaultDomain", None),
        ({"platformUpdateDomain": " 3 "}, "UpdateDomain", 3),  # a count served as a string
    ],
)
def test_a_bad_field_is_null_and_costs_no_other(compute, column, expected):
    vm = identity_from_instance({"compute": {"vmId": "id-1", **compute}}, computer="h")
    assert getattr(vm, column) == expected
    if column != "VmId":
        assert vm.VmId == "id-1"


@pytest.mark.parametrize(
    "doc",
    [
        {},
        {"compute": "not an object"},
        {"compute": None},
        {"compute": {"name": ""}},
        {"compute": {"name": 7}},
    ],
)
def test_without_a_usable_name_the_vm_is_named_by_config_or_unknown(doc):
    # never the host name: on a scale set it is not the VM's name (a wrong AffectsThisVm)
    assert identity_from_instance(doc, computer="host-1").VmName is None
    assert identity_from_instance(doc, computer="host-1", vm_name="cfg").VmName == "cfg"


RG = "/subscriptions/s/resourceGroups/rg/providers/Microsoft.Compute"


@pytest.mark.parametrize(
    "name,resource_id",
    [
        ("ss_3", f"{RG}/virtualMachineScaleSets/ss/virtualMachines/3"),
        ("ss_4f3a2b1c", f"{RG}/virtualMachines/ss_4f3a2b1c"),
    ],
    ids=["uniform", "flexible"],
)
def test_scale_set_instances_keep_the_id_imds_gives_in_either_mode(name, resource_id):
    """A Uniform instance's id names the scale set and a numeric instance id; a Flexible
    instance is an ordinary VM with its own id. The agent records IMDS's id as it is (never
    assembled from the scale set's name) and the scale set's name beside it in both modes, and
    the report names both as the portal does."""
    vm = identity_from_instance(
        {"compute": {"name": name, "resourceId": resource_id, "vmScaleSetName": "ss"}},
        computer="h",
    )
    assert vm.VmResourceId == resource_id
    assert vm.ScaleSetName == "ss" and vm.VmName == name
    assert resource_name(resource_id) == name
