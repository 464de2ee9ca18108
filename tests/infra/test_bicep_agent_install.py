"""How the templates put the agent on VMs and scale sets, evaluated offline (bicep_eval): the Run
Command on new and existing VMs, the Custom Script extension on scale sets, the cloud-init
payload, a second deployment with changed values (what Azure lets change), the values the
examples read from an earlier deployment, and the opt-in Scheduled Events policy. The commands are
run for real by tests/infra/install/ and test_cloud_init.py.
"""

from __future__ import annotations

import base64
import gzip
import re
import subprocess

import bicep_eval as bicep
import pytest
from bicep_eval import BicepFail, Evaluator, immutable_changes
from helpers.infra.paths import INFRA, REPO

BLOB = "https://fleetpkgs.blob.core.windows.net/se-forwarder"
SHA = "0123456789abcdef" * 4
SETTINGS = {
    "packageUri": f"{BLOB}/se_forwarder-0.1.0-py3-none-any.whl",
    "packageSha256": SHA,
    "lockUri": f"{BLOB}/se_forwarder-0.1.0.lock",
    "logsIngestionEndpoint": "https://dcr-0123.westeurope-1.ingest.monitor.azure.com",
    "dcrImmutableId": "dcr-00112233445566778899aabbccddeeff",
    "recordsStream": "Custom-MyRecords",
    "heartbeatsStream": "Custom-MyHeartbeats",
    "clientId": "",
}
AGENT = {
    "installerUri": f"{BLOB}/install.sh",
    "packageUri": SETTINGS["packageUri"],
    "packageSha256": SHA,
    "lockUri": SETTINGS["lockUri"],
    "logsIngestionEndpoint": SETTINGS["logsIngestionEndpoint"],
    "dcrImmutableId": SETTINGS["dcrImmutableId"],
    "recordsStream": SETTINGS["recordsStream"],
    "heartbeatsStream": SETTINGS["heartbeatsStream"],
}
SCALE_SET = {
    "name": "vmss",
    "subnetId": "/subnet",
    "sshPublicKey": "ssh-ed25519 AAAA",
    "identityResourceId": "/uami",
    "identityClientId": "c1d2",
    "logsIngestionEndpoint": SETTINGS["logsIngestionEndpoint"],
    "dcrImmutableId": SETTINGS["dcrImmutableId"],
    "packageUri": SETTINGS["packageUri"],
    "packageSha256": SHA,
    "lockUri": SETTINGS["lockUri"],
    "installerUri": f"{BLOB}/install.sh",
}
CLOUD_INIT_SET = {k: v for k, v in SCALE_SET.items() if k != "installerUri"} | {
    "installWith": "cloudInit"
}
VM = dict(SCALE_SET)
INSTALL_SH = INFRA / "scripts" / "install.sh"
INSTALL_PS1 = INFRA / "scripts" / "install.ps1"
VM_LOOP = {"name": "vm1", "i": 0}


def ev(rel, params=None, symbols=None) -> Evaluator:
    return Evaluator(INFRA / rel, params, symbols)


def agent(**params) -> Evaluator:
    return ev(
        "modules/vm-agent.bicep",
        {"vmNames": ["vm1"], **AGENT, **params},
        {"vms": [{"location": "westeurope"}], "scaleSets": [{}]},
    )


def types_in(rel: str) -> set[str]:
    return {r.type for r in bicep.resources(bicep.parse((INFRA / rel).read_bytes()))}


# --- existing VMs: a Run Command, not a second Custom Script extension ---------------------------


def test_vms_get_a_run_command_that_fails_the_deployment_when_the_install_fails():
    assert "Microsoft.Compute/virtualMachines/runCommands" in types_in("modules/vm-agent.bicep")
    assert "Microsoft.Compute/virtualMachines/extensions" not in types_in("modules/vm-agent.bicep")
    props = agent().resource("installs", "properties", loop=VM_LOOP)
    assert props["source"] == {"scriptUri": AGENT["installerUri"], "scriptUriManagedIdentity": {}}
    assert props["treatFailureAsDeploymentFailure"] is True and props["asyncExecution"] is False
    user = agent(agentIdentityClientId="c1d2").resource("installs", "properties", loop=VM_LOOP)
    assert user["source"]["scriptUriManagedIdentity"] == {"clientId": "c1d2"}


def _env_options() -> set[str]:
    text = INSTALL_SH.read_text()
    block = re.search(r'readonly ENV_OPTIONS="([^"]*)"', text).group(1)
    return {"SE_INSTALL_" + o.upper().replace("-", "_") for o in block.split()} | {
        "SE_INSTALL_RUN_ID",
        "SE_INSTALL_PREREQUISITES",
    }


def test_linux_run_command_passes_values_as_named_parameters_install_sh_reads():
    """The Linux handler appends unnamed parameters to `bash -c` unquoted and drops empty ones:
    every value goes by name (an environment variable), the one word on the line is --from-env."""
    params = agent(forceUpdateTag="2").resource(
        "installs", "properties", "parameters", loop=VM_LOOP
    )
    unnamed = [p["value"] for p in params if not p["name"]]
    assert unnamed == ["--from-env"]
    named = {p["name"]: p["value"] for p in params if p["name"]}
    assert set(named) <= _env_options()
    assert named["SE_INSTALL_RECORDS_STREAM"] == "Custom-MyRecords"
    assert named["SE_INSTALL_PACKAGE_SHA256"] == SHA and named["SE_INSTALL_PREREQUISITES"] == "yes"
    assert named["SE_INSTALL_RUN_ID"] == "2"
    assert "SE_INSTALL_CLIENT_ID" not in named, "empty: the system-assigned identity"
    assert all(p["value"] for p in params)


def _ps1_parameters() -> set[str]:
    block = re.search(r"param\((.*?)\n\)", INSTALL_PS1.read_text(), re.DOTALL).group(1)
    return set(re.findall(r"\$([A-Za-z0-9]+)", block))


def test_windows_run_command_parameters_are_install_ps1_parameters():
    params = agent(osType="Windows", forceUpdateTag="7", agentIdentityClientId="c1").resource(
        "installs", "properties", "parameters", loop=VM_LOOP
    )
    names = [p["name"] for p in params]
    assert set(names) <= _ps1_parameters(), set(names) - _ps1_parameters()
    assert {
        "Package",
        "PackageSha256",
        "Lock",
        "LogsEndpoint",
        "DcrId",
        "ClientId",
        "RunId",
    } <= set(names)
    no_client = agent(osType="Windows").resource(
        "installs", "properties", "parameters", loop=VM_LOOP
    )
    assert "ClientId" not in [p["name"] for p in no_client]


def _extension_command(e: Evaluator, *path, **loop) -> str:
    return e.resource(*path, loop=loop or None)


def test_scale_set_extension_command_is_the_modules_and_survives_the_shell(tmp_path):
    quirky = dict(
        SCALE_SET,
        logsIngestionEndpoint="https://e.example/it's $HOME",
        recordsStream=AGENT["recordsStream"],
        heartbeatsStream=AGENT["heartbeatsStream"],
    )
    example = ev("examples/scale-set.bicep", quirky)  # installWith: extension, the default
    props = example.resource("scaleSet", "properties", "virtualMachineProfile", "extensionProfile")[
        "extensions"
    ][0]["properties"]
    command = props["protectedSettings"]["commandToExecute"]
    module = agent(
        scaleSetNames=["vmss"],
        vmNames=[],
        agentIdentityClientId="c1d2",
        logsIngestionEndpoint=quirky["logsIngestionEndpoint"],
    )
    module_props = module.resource(
        "scaleSetExtensions", "properties", loop={"name": "vmss", "i": 0}
    )
    assert command == module_props["protectedSettings"]["commandToExecute"]
    assert props["protectedSettings"]["managedIdentity"] == {"clientId": "c1d2"}
    # the shell gives install.sh exactly the values
    echo = tmp_path / "install.sh"
    echo.write_text('for a in "$@"; do printf "%s\\n" "$a"; done\n')
    r = subprocess.run(
        ["bash", "-c", command],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    )
    argv = r.stdout.split("\n")[:-1]
    assert argv[argv.index("--logs-endpoint") + 1] == "https://e.example/it's $HOME"
    assert argv[argv.index("--client-id") + 1] == "c1d2"


def test_windows_extension_command_names_install_ps1_parameters():
    module = agent(
        osType="Windows", scaleSetNames=["w"], vmNames=[], installerUri=f"{BLOB}/install.ps1"
    )
    command = module.resource(
        "scaleSetExtensions",
        "properties",
        "protectedSettings",
        "commandToExecute",
        loop={"name": "w", "i": 0},
    )
    assert "-ExecutionPolicy Bypass -File install.ps1 " in command
    used = set(
        re.findall(r" -([A-Z][A-Za-z0-9]+) ", command.split("-File install.ps1", 1)[1] + " ")
    )
    assert used <= _ps1_parameters(), used - _ps1_parameters()
    assert {"Package", "Lock", "LogsEndpoint", "DcrId"} <= used
    assert "ClientId" not in used  # Windows PowerShell 5.1 drops an empty "" given through -File
    assert "PackageSha256" in used
    no_pin = agent(
        osType="Windows",
        scaleSetNames=["w"],
        vmNames=[],
        packageSha256="",
        installerUri=f"{BLOB}/install.ps1",
    ).resource(
        "scaleSetExtensions",
        "properties",
        "protectedSettings",
        "commandToExecute",
        loop={"name": "w", "i": 0},
    )
    assert "-PackageSha256" not in no_pin


def test_scale_set_example_shares_values_by_import_not_by_a_nested_deployment():
    tree = bicep.parse((INFRA / "examples" / "scale-set.bicep").read_bytes())
    # the one module: a Flexible set's existing instances upgraded by a Run Command each, only
    # when they are named (the scale set's own settings come by import)
    modules = [
        bicep.text(d) for d in tree.root_node.named_children if d.type == "module_declaration"
    ]
    assert len(modules) == 1 and modules[0].startswith(
        "module instanceUpgrades '../modules/vm-agent.bicep' = if (!empty(upgradeNames))"
    )
    imports = [
        bicep.text(d) for d in tree.root_node.named_children if d.type == "import_functionality"
    ]
    assert imports and all("'../modules/shared.bicep'" in i for i in imports)


# --- nothing empty, nothing left to chance --------------------------------------------------------


@pytest.mark.parametrize(
    "file,params",
    [
        ("modules/vm-agent.bicep", ["installerUri", "packageUri", "packageSha256"]),
        ("examples/scale-set.bicep", ["packageUri", "packageSha256"]),
        ("examples/vm.bicep", ["installerUri", "packageUri", "packageSha256"]),
        ("examples/existing-vms.bicep", ["installerUri", "packageUri", "packageSha256"]),
        (
            "examples/scale-set-with-log-analytics.bicep",
            ["installerUri", "packageUri", "packageSha256"],
        ),
    ],
)
def test_what_to_install_is_required(file, params):
    declared = bicep.params(bicep.parse((INFRA / file).read_bytes()))
    assert "packageVersion" not in declared
    for name in params:
        assert not declared[name].has_default, f"{file}: {name} must be given"


def test_an_extension_install_without_its_installer_stops_the_deployment():
    no_installer = {k: v for k, v in SCALE_SET.items() if k != "installerUri"}
    with pytest.raises(BicepFail, match="installerUri must be an https:// URL"):
        ev("examples/scale-set.bicep", no_installer).var("installer")
    assert ev("examples/scale-set.bicep", CLOUD_INIT_SET).var("installer") == ""


@pytest.mark.parametrize(
    "package,lock,error",
    [
        (f"{BLOB}/se_forwarder-0.1.0-py3-none-any.whl", "", "lockUri is required with a wheel"),
        (
            f"{BLOB}/se-forwarder-0.1.0-bundle.tar.gz",
            f"{BLOB}/x.lock",
            "lockUri must be empty with a bundle",
        ),
        (
            f"{BLOB}/se-forwarder-0.1.0-bundle.tar.gz?sv=1&sig=x",
            "",
            "packageUri must be an https:// URL",
        ),
    ],
)
def test_a_wheel_needs_its_lock_and_a_bundle_carries_its_own(package, lock, error):
    with pytest.raises(BicepFail, match=error):
        ev("modules/shared.bicep").call("checkedPackage", package, SHA, lock)
    bundle = ev("modules/shared.bicep").call(
        "checkedPackage", f"{BLOB}/se-forwarder-0.1.0-bundle.tar.gz", SHA.upper(), ""
    )
    assert bundle == {
        "packageUri": f"{BLOB}/se-forwarder-0.1.0-bundle.tar.gz",
        "packageSha256": SHA,
        "lockUri": "",
    }
    with pytest.raises(BicepFail, match="packageSha256 must be the 64 hex digits"):
        ev("modules/shared.bicep").call(
            "checkedPackage", SETTINGS["packageUri"], "abc", SETTINGS["lockUri"]
        )


def _existing(**params) -> Evaluator:
    base = {
        "installerUri": AGENT["installerUri"],
        "packageUri": AGENT["packageUri"],
        "lockUri": AGENT["lockUri"],
        "vmNames": ["vm1"],
    }
    symbols = {
        "dcr": {
            "properties": {"immutableId": "dcr-1", "endpoints": {"logsIngestion": "https://rule"}}
        },
        "dce": {"properties": {"logsIngestion": {"endpoint": "https://dce"}}},
        "fleetIdentity": {"properties": {"clientId": "fleet-client-id"}},
    }
    return ev("examples/existing-vms.bicep", {**base, **params}, symbols)


def test_existing_vms_reads_the_deployment_as_existing_resources():
    src = (INFRA / "examples" / "existing-vms.bicep").read_text()
    assert "reference(" not in src and "mainDeploymentName" not in src
    existing = {r.symbol for r in bicep.resources(bicep.parse(src.encode())) if r.existing}
    assert existing == {"dcr", "dce", "fleetIdentity"}
    e = _existing()
    assert e.resource("linuxAgents", "params", "agentIdentityClientId") == "fleet-client-id"
    assert e.resource("linuxAgents", "params", "logsIngestionEndpoint") == "https://rule"
    assert e.resource("linuxAgents", "params", "recordsStream") == "Custom-ScheduledEvents"
    assert (
        _existing(useDataCollectionEndpoint=True).resource(
            "linuxAgents", "params", "logsIngestionEndpoint"
        )
        == "https://dce"
    )


def test_existing_vms_with_system_assigned_identities_pass_no_client_id():
    e = _existing(agentIdentity="systemAssigned")
    assert e.resource("linuxAgents", "params", "agentIdentityClientId") == ""


def test_windows_vms_need_their_installer_and_lock():
    with pytest.raises(BicepFail, match="windowsInstallerUri"):
        _existing(windowsVmNames=["w1"]).resource("windowsAgents", "params", "installerUri")
    with pytest.raises(BicepFail, match="windowsLockUri"):
        _existing(windowsVmNames=["w1"]).resource("windowsAgents", "params", "lockUri")
    ok = _existing(
        windowsVmNames=["w1"],
        windowsInstallerUri=f"{BLOB}/install.ps1",
        windowsLockUri=f"{BLOB}/win.lock",
    )
    assert ok.resource("windowsAgents", "params", "lockUri") == f"{BLOB}/win.lock"


# --- the cloud-init payload ----------------------------------------------------------------------


def test_custom_data_is_compressed_and_carries_the_streams():
    custom = ev(
        "examples/scale-set.bicep",
        dict(CLOUD_INIT_SET, recordsStream="Custom-R", heartbeatsStream="Custom-H"),
    ).var("customData")
    text = base64.b64decode(custom).decode()
    assert "encoding: gz+b64" in text and "'Custom-R'" in text and "'Custom-H'" in text
    embedded = re.search(r"content: (\S+)", text).group(1)
    assert gzip.decompress(base64.b64decode(embedded)) == INSTALL_SH.read_bytes()
    plain = len(base64.b64encode(INSTALL_SH.read_bytes()))
    print(
        f"cloud-init: {len(text)} characters (installer {len(embedded)} base64 of gzip, "
        f"{plain} uncompressed); customData {len(custom)} of 65536"
    )
    assert len(custom) <= 65536 and len(embedded) < plain / 2


# --- a second deployment with changed values ----------------------------------------------------

SECOND = {
    "packageUri": f"{BLOB}/se-forwarder-0.2.0-bundle.tar.gz",
    "packageSha256": "f" * 64,
    "lockUri": "",
    "dcrImmutableId": "dcr-ffeeddccbbaa99887766554433221100",
    "logsIngestionEndpoint": "https://dcr-9.northeurope-1.ingest.monitor.azure.com",
}


def _run_command(e: Evaluator) -> list[dict]:
    return e.module("agent", symbols={"vms": [{"location": "westeurope"}]}).resource(
        "installs", "properties", "parameters", loop={"name": "vm", "i": 0}
    )


def test_a_vm_takes_a_second_deployment_with_changed_values():
    """vm.bicep deployed again with another package, lock, rule and endpoint: nothing Azure
    refuses to change (customData, adminUsername, computerName) changes, and the Run Command's
    parameters do, so Azure runs install.sh again on the VM (an in-place upgrade)."""
    vm = {"vm": {"name": "vm"}}
    first = ev("examples/vm.bicep", VM, vm)
    second = ev("examples/vm.bicep", dict(VM, **SECOND), vm)
    assert immutable_changes(first, second) == []
    assert first.resource("vm", "properties", "osProfile", "customData") is None
    before, after = _run_command(first), _run_command(second)
    assert before != after
    named = {p["name"]: p["value"] for p in after if p["name"]}
    assert named["SE_INSTALL_PACKAGE"] == SECOND["packageUri"]
    assert named["SE_INSTALL_DCR_ID"] == SECOND["dcrImmutableId"]
    assert "SE_INSTALL_LOCK" not in named  # a bundle carries its locks


def test_the_immutable_check_sees_a_changed_custom_data(tmp_path):
    """Control: the first-boot installer in a VM's customData (as vm.bicep had it) changes with
    the package, and the check reports what Azure refuses."""
    template = tmp_path / "installer-in-custom-data.bicep"
    template.write_text(
        f"import {{ cloudInit, checkedPackage }} from '{INFRA}/modules/shared.bicep'\n"
        "param packageUri string\n"
        "var settings = union(checkedPackage(packageUri, '', ''), {logsIngestionEndpoint: 'x', "
        "dcrImmutableId: 'd', recordsStream: 'r', heartbeatsStream: 'h', clientId: ''})\n"
        "resource vm 'Microsoft.Compute/virtualMachines@2025-04-01' = {\n  name: 'vm'\n"
        "  location: 'x'\n  properties: {\n    osProfile: {\n      computerName: 'vm'\n"
        "      customData: "
        f"base64(cloudInit(loadTextContent('{INFRA}/cloud-init/se-forwarder.yaml'), "
        "'', settings, {tags: [], policyPreset: 'observe', policyRules: [], "
        "webhookFormat: 'json'}))\n    }\n  }\n}\n"
    )
    first = Evaluator(template, {"packageUri": f"{BLOB}/a-bundle.tar.gz"})
    second = Evaluator(template, {"packageUri": f"{BLOB}/b-bundle.tar.gz"})
    changes = immutable_changes(first, second)
    assert [c.path for c in changes] == [("properties", "osProfile", "customData")]


def test_a_scale_set_upgrade_changes_the_extension_not_custom_data():
    """The default scale set installs with the extension: a second deployment changes its
    command (az vmss update-instances runs it again, in place) and carries no customData; the
    instance count is left out unless given, so a re-deployment keeps manual or autoscale."""
    first = ev("examples/scale-set.bicep", SCALE_SET)
    second = ev("examples/scale-set.bicep", dict(SCALE_SET, **SECOND))

    def command(e):
        return e.resource("scaleSet", "properties", "virtualMachineProfile", "extensionProfile")[
            "extensions"
        ][0]["properties"]["protectedSettings"]["commandToExecute"]

    assert command(first) != command(second) and SECOND["packageUri"] in command(second)
    assert first.var("customData") is None
    assert first.resource("scaleSet", "sku", "capacity") is None
    assert (
        ev("examples/scale-set.bicep", dict(SCALE_SET, instanceCount=3)).resource(
            "scaleSet", "sku", "capacity"
        )
        == 3
    )


def test_no_template_expression_comes_near_arms_limit():
    """ARM refuses a template whose expression exceeds 24,576 characters. The cloud-init
    payload sits in variables of its own (plain values once compiled), so the customData
    expression stays small however install.sh grows; every expression keeps a margin of 4 KB
    (the installer in customData reached 19,760 and broke at about 3.6 KB more)."""
    from bicep_eval import MAX_EXPRESSION, expression_length, expressions

    worst = max(
        (n, f"{p.relative_to(INFRA)}: {where}")
        for p in INFRA.rglob("*.bicep")
        for where, n in expressions(p)
    )
    print(f"longest expression: {worst[0]} characters ({worst[1]}) of {MAX_EXPRESSION}")
    assert worst[0] <= MAX_EXPRESSION - 4096, worst
    assert expression_length(INFRA / "examples" / "scale-set.bicep", "customData") < 1000
    assert expression_length(INFRA / "examples" / "scale-set.bicep", "installerGzBase64") == 0


# --- Scheduled Events policy (opt-in) -------------------------------------------------------------

POLICY_CASES = [
    (
        {
            "publishToEventGridAndResourceGraph": False,
            "userInitiatedReboot": "azureDefault",
            "userInitiatedRedeploy": "azureDefault",
        },
        None,
    ),
    (
        {
            "publishToEventGridAndResourceGraph": True,
            "userInitiatedReboot": "azureDefault",
            "userInitiatedRedeploy": "azureDefault",
        },
        {
            "scheduledEventsAdditionalPublishingTargets": {
                "eventGridAndResourceGraph": {
                    "enable": True,
                    "scheduledEventsApiVersion": "2020-07-01",
                }
            },
            "userInitiatedReboot": None,
            "userInitiatedRedeploy": None,
        },
    ),
    (
        {
            "publishToEventGridAndResourceGraph": False,
            "userInitiatedReboot": "automatic",
            "userInitiatedRedeploy": "waitForApproval",
        },
        {
            "scheduledEventsAdditionalPublishingTargets": None,
            "userInitiatedReboot": {"automaticallyApprove": True},
            "userInitiatedRedeploy": {"automaticallyApprove": False},
        },
    ),
]


@pytest.mark.parametrize(
    "rel,symbol,base",
    [("examples/vm.bicep", "vm", VM), ("examples/scale-set.bicep", "scaleSet", SCALE_SET)],
)
@pytest.mark.parametrize("options,expected", POLICY_CASES)
def test_scheduled_events_policy_is_opt_in(rel, symbol, base, options, expected):
    e = ev(rel, dict(base, scheduledEvents=options))
    assert e.resource(symbol, "properties", "scheduledEventsPolicy") == expected


def test_scheduled_events_choices_are_a_closed_type_with_their_effect_documented():
    shared = (INFRA / "modules" / "shared.bicep").read_text()
    assert "type userOperationApproval = 'azureDefault' | 'automatic' | 'waitForApproval'" in shared
    readme = (INFRA / "README.md").read_text()
    for word in (
        "automaticallyApprove",
        "waitForApproval",
        "eventGridAndResourceGraph",
        "Scheduled Event Contributor",
    ):
        assert word in readme, word


def test_scale_set_caveats_are_documented():
    for doc in ("infra/README.md", "docs/install.md"):
        text = (REPO / doc).read_text()
        assert "upgradePolicy: Manual" in text or "`Manual`" in text, doc
        assert re.search(r"Automatic[^.]*every instance at once", text), doc
