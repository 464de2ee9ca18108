"""``/metadata/instance`` as the real service shapes it (domains as strings, like IMDS), from the
scenario's VM."""

from __future__ import annotations

from typing import Any

from .scenario import VmSpec


def document(vm: VmSpec) -> dict[str, Any]:
    """The answer's body: ``compute`` (the VM's identity, placement and tags) and ``network``."""
    compute = {
        "azEnvironment": "AzurePublicCloud",
        "isHostCompatibilityLayerVm": "false",
        "location": vm.location,
        "name": vm.name,
        "offer": "0001-com-ubuntu-server-jammy" if vm.os_type == "Linux" else "WindowsServer",
        "osProfile": {
            "adminUsername": "azureuser",
            "computerName": vm.name,
            "disablePasswordAuthentication": "true",
        },
        "osType": vm.os_type,
        "placementGroupId": "",
        "platformFaultDomain": str(vm.fault_domain),
        "platformUpdateDomain": str(vm.update_domain),
        "priority": "Regular",
        "provider": "Microsoft.Compute",
        "publisher": "Canonical" if vm.os_type == "Linux" else "MicrosoftWindowsServer",
        "resourceGroupName": vm.resource_group,
        "resourceId": vm.resource_id,
        "sku": "22_04-lts-gen2" if vm.os_type == "Linux" else "2022-datacenter",
        "subscriptionId": vm.subscription_id,
        "tags": ";".join(f"{k}:{v}" for k, v in vm.tags.items()),
        "tagsList": [{"name": k, "value": v} for k, v in vm.tags.items()],
        "userData": "",
        "version": "latest",
        "vmId": vm.vm_id,
        "vmScaleSetName": vm.scale_set,
        "vmSize": vm.vm_size,
        "zone": vm.zone,
    }
    network = {
        "interface": [
            {
                "ipv4": {
                    "ipAddress": [{"privateIpAddress": vm.private_ip, "publicIpAddress": ""}],
                    "subnet": [{"address": vm.private_ip.rsplit(".", 1)[0] + ".0", "prefix": "24"}],
                },
                "ipv6": {"ipAddress": []},
                "macAddress": "000D3A2B4C5D",
            }
        ]
    }
    return {"compute": compute, "network": network}
