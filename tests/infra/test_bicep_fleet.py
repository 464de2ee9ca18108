"""One place to configure a fleet, evaluated offline: the fleet settings (agent.tags, the policy's
preset and rules, the webhook format) and the webhook URL reach install.sh through every install
path the templates have (the Run Command on new and existing VMs, the Custom Script extension on
scale sets, cloud-init, install.ps1 on Windows), the secret only through the protected settings;
a bad setting stops the deployment before anything is created; and a scale set of 3,000 VMs gets
its tags and a policy in one deployment."""

from __future__ import annotations

import json
import re
import subprocess
import tomllib

import pytest
from bicep_eval import BicepFail, Evaluator
from helpers.infra.paths import INFRA

from se_forwarder.config import Config

BLOB = "https://fleetpkgs.blob.core.windows.net/se-forwarder"
SHA = "0123456789abcdef" * 4
WEBHOOK = "https://hooks.example.test/services/T0/c2VjcmV0LWZsZWV0"
RULES = [
    {"name": "it's quick", "event_types": ["Freeze"], "max_duration": 10, "approve": "at-once"}
]
FLEET = {
    "tags": ["service", "env"],
    "policyPreset": "microsoft",
    "policyRules": RULES,
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
    "packageSha256": SHA,
    "installerUri": f"{BLOB}/install.sh",
}
AGENT = {
    "installerUri": f"{BLOB}/install.sh",
    "packageUri": SCALE_SET["packageUri"],
    "packageSha256": SHA,
    "logsIngestionEndpoint": SCALE_SET["logsIngestionEndpoint"],
    "dcrImmutableId": SCALE_SET["dcrImmutableId"],
}
VM_LOOP = {"name": "vm1", "i": 0}
INSTALL_SH = INFRA / "scripts" / "install.sh"


def _argv_through_the_shell(command: str, tmp_path) -> tuple[list[str], dict[str, str]]:
    """What install.sh receives when the extension runs the command: argv, and the variables
    named SE_INSTALL_* in its environment."""
    (tmp_path / "install.sh").write_text(
        'for a in "$@"; do printf "%s\\0" "$a"; done; printf "\\1"; env -0 | grep -z ^SE_INSTALL_\n'
    )
    r = subprocess.run(
        ["env", "-i", "PATH=/usr/bin:/bin", "bash", "-c", command],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    )
    args, env = r.stdout.split("\1")
    return args.split("\0")[:-1], dict(v.split("=", 1) for v in env.split("\0") if v)


def test_a_3000_vm_scale_set_gets_tags_and_a_policy_in_one_deployment(tmp_path):
    """The scale set's own tags (which its instances carry) and the fleet settings, one
    deployment: the extension in the model gives every instance the same install.sh words, the
    webhook URL only in the protected command's environment."""
    ev = Evaluator(
        INFRA / "examples/scale-set.bicep",
        {
            **SCALE_SET,
            "instanceCount": 3000,
            "tags": {"service": "checkout", "env": "prod"},
            "fleet": FLEET,
            "webhookUrl": WEBHOOK,
        },
    )
    assert ev.resource("scaleSet", "sku", "capacity") == 3000
    assert ev.resource("scaleSet", "tags") == {"service": "checkout", "env": "prod"}
    ext = ev.resource("scaleSet", "properties", "virtualMachineProfile", "extensionProfile")[
        "extensions"
    ][0]["properties"]
    assert ext["settings"] == {} and WEBHOOK not in json.dumps(ext["settings"])
    argv, env = _argv_through_the_shell(ext["protectedSettings"]["commandToExecute"], tmp_path)
    opt = {argv[i]: argv[i + 1] for i in range(len(argv) - 1) if argv[i].startswith("--")}
    assert opt["--tags"] == "service,env"
    assert opt["--policy-preset"] == "microsoft"
    assert json.loads(opt["--policy-rules"]) == RULES
    assert opt["--webhook-format"] == "slack"
    assert opt["--webhook-url-env"] == "SE_INSTALL_WEBHOOK_URL"
    assert env == {"SE_INSTALL_WEBHOOK_URL": WEBHOOK}
    assert WEBHOOK not in argv
    # the words are ones install.sh parses (it stops at --help after reading them)
    r = subprocess.run(
        ["bash", str(INSTALL_SH), *argv, "--help"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
        env={"PATH": "/usr/bin:/bin", "SE_INSTALL_WEBHOOK_URL": WEBHOOK},
    )
    assert r.returncode == 0 and "Usage: install.sh" in r.stdout, r.stderr


OUTPUTS = (
    "identityResourceId",
    "identityClientId",
    "logsIngestionEndpoint",
    "dcrImmutableId",
    "recordsStream",
    "heartbeatsStream",
)


def test_scale_set_with_log_analytics_passes_the_fleet_through():
    ev = Evaluator(
        INFRA / "examples/scale-set-with-log-analytics.bicep",
        {
            "workspaceResourceId": "/subscriptions/0/resourceGroups/r/providers/"
            "Microsoft.OperationalInsights/workspaces/w",
            "subnetId": "/s",
            "sshPublicKey": "k",
            "installerUri": f"{BLOB}/install.sh",
            "packageUri": SCALE_SET["packageUri"],
            "packageSha256": SHA,
            "fleet": FLEET,
            "scaleSetTags": {"service": "checkout"},
            "webhookUrl": WEBHOOK,
        },
        {"logs": {"outputs": dict.fromkeys(OUTPUTS, "x")}},
    )
    params = ev.resource("scaleSet", "params")
    assert params["fleet"] == FLEET and params["tags"] == {"service": "checkout"}
    assert params["webhookUrl"] == WEBHOOK


def agent(**params) -> Evaluator:
    return Evaluator(
        INFRA / "modules/vm-agent.bicep",
        {"vmNames": ["vm1"], **AGENT, **params},
        {"vms": [{"location": "westeurope"}], "scaleSets": [{}]},
    )


def _env_options() -> set[str]:
    block = re.search(r'readonly ENV_OPTIONS="([^"]*)"', INSTALL_SH.read_text()).group(1)
    return {"SE_INSTALL_" + o.upper().replace("-", "_") for o in block.split()} | {
        "SE_INSTALL_RUN_ID",
        "SE_INSTALL_PREREQUISITES",
        "SE_INSTALL_WEBHOOK_URL",
    }


def test_the_run_command_carries_the_fleet_and_protects_the_webhook():
    props = agent(fleet=FLEET, webhookUrl=WEBHOOK).resource("installs", "properties", loop=VM_LOOP)
    named = {p["name"]: p["value"] for p in props["parameters"] if p["name"]}
    assert set(named) <= _env_options(), set(named) - _env_options()
    assert named["SE_INSTALL_TAGS"] == "service,env"
    assert named["SE_INSTALL_POLICY_PRESET"] == "microsoft"
    assert json.loads(named["SE_INSTALL_POLICY_RULES"]) == RULES
    assert named["SE_INSTALL_WEBHOOK_FORMAT"] == "slack"
    assert WEBHOOK not in json.dumps(props["parameters"])
    assert props["protectedParameters"] == [{"name": "SE_INSTALL_WEBHOOK_URL", "value": WEBHOOK}]
    plain = agent().resource("installs", "properties", loop=VM_LOOP)
    assert plain["protectedParameters"] == []
    assert not {
        "SE_INSTALL_TAGS",
        "SE_INSTALL_POLICY_PRESET",
        "SE_INSTALL_POLICY_RULES",
        "SE_INSTALL_WEBHOOK_FORMAT",
    } & {p["name"] for p in plain["parameters"]}


def test_existing_vms_and_new_vms_take_the_fleet():
    ev = Evaluator(
        INFRA / "examples/existing-vms.bicep",
        {
            "vmNames": ["a"],
            "windowsVmNames": ["w"],
            "installerUri": f"{BLOB}/install.sh",
            "windowsInstallerUri": f"{BLOB}/install.ps1",
            "windowsLockUri": f"{BLOB}/w.lock",
            "packageUri": SCALE_SET["packageUri"],
            "packageSha256": SHA,
            "fleet": FLEET,
            "webhookUrl": WEBHOOK,
        },
    )
    assert ev.resource("linuxAgents", "params", "fleet") == FLEET
    assert ev.resource("linuxAgents", "params", "webhookUrl") == WEBHOOK
    assert ev.resource("windowsAgents", "params", "fleet") == FLEET
    assert ev.resource("windowsAgents", "params", "webhookUrl") is None  # no secret to Windows
    vm = Evaluator(
        INFRA / "examples/vm.bicep", {**SCALE_SET, "fleet": FLEET, "webhookUrl": WEBHOOK}
    )
    assert vm.resource("agent", "params", "fleet") == FLEET
    assert vm.resource("agent", "params", "webhookUrl") == WEBHOOK


def test_windows_takes_the_fleet_as_install_ps1_parameters():
    params = agent(
        osType="Windows",
        installerUri=f"{BLOB}/install.ps1",
        packageUri=f"{BLOB}/se_forwarder-0.1.0-py3-none-any.whl",
        lockUri=f"{BLOB}/w.lock",
        fleet=FLEET,
    ).resource("installs", "properties", "parameters", loop=VM_LOOP)
    named = {p["name"]: p["value"] for p in params}
    block = re.search(
        r"param\((.*?)\n\)", (INFRA / "scripts/install.ps1").read_text(), re.DOTALL
    ).group(1)
    assert set(named) <= set(re.findall(r"\$([A-Za-z0-9]+)", block))
    assert named["Tags"] == "service,env" and named["PolicyPreset"] == "microsoft"
    assert json.loads(named["PolicyRules"]) == RULES
    with pytest.raises(BicepFail, match=r"install\.ps1 takes no webhook"):
        agent(
            osType="Windows",
            installerUri=f"{BLOB}/install.ps1",
            packageUri=f"{BLOB}/x.whl",
            lockUri=f"{BLOB}/w.lock",
            webhookUrl=WEBHOOK,
        ).var("webhook")


def test_install_ps1_renders_the_rules_as_install_sh_does(tmp_path):
    """install.ps1 writes --PolicyRules through the new version's Python (PowerShell cannot run
    here): the very snippet, run, gives the TOML the agent reads back as the rules."""
    text = (INFRA / "scripts/install.ps1").read_text()
    snippet = re.search(r"\$render = '(.*)'\n", text).group(1).replace("''", "'")
    r = subprocess.run(
        ["python3", "-c", snippet, json.dumps(RULES)],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    )
    assert tomllib.loads(r.stdout)["policy"]["rules"] == RULES


def test_cloud_init_refuses_a_webhook():
    """customData is no protected setting: a webhook URL there would sit in the model."""
    with pytest.raises(BicepFail, match="customData is not a protected setting"):
        Evaluator(
            INFRA / "examples/scale-set.bicep",
            {
                **{k: v for k, v in SCALE_SET.items() if k != "installerUri"},
                "installWith": "cloudInit",
                "webhookUrl": WEBHOOK,
            },
        ).var("webhook")


@pytest.mark.parametrize(
    "fleet,said",
    [
        ({"tags": [f"t{i}" for i in range(11)]}, "at most 10"),
        ({"tags": ["service", "a/b"]}, "tag name"),
        ({"tags": ["a,b"]}, "tag name"),
        ({"tags": [" service"]}, "tag name"),
        ({"policyRules": [{"event_types": ["Reboot"], "pre_hooks": ["drain"]}]}, "hooks"),
    ],
    ids=["eleven", "slash", "comma", "space", "hooks"],
)
def test_a_bad_fleet_setting_stops_the_deployment(fleet, said):
    full = {
        "tags": [],
        "policyPreset": "observe",
        "policyRules": [],
        "webhookFormat": "json",
        **fleet,
    }
    with pytest.raises(BicepFail, match=said):
        agent(fleet=full).var("fleetChecked")


def test_main_prints_the_fleet_settings_in_the_agent_configuration():
    ev = Evaluator(
        INFRA / "main.bicep",
        {
            "workspaceResourceId": "/subscriptions/0/resourceGroups/r/providers/"
            "Microsoft.OperationalInsights/workspaces/w",
            "agentFleet": FLEET,
        },
        {
            "identity": {"outputs": {"clientId": "cid"}},
            "dcr": {"outputs": {"logsIngestionEndpoint": "https://e", "immutableId": "dcr-1"}},
            "workspace": {"id": "/w", "location": "westeurope"},
        },
    )
    import bicep_eval as bicep

    out = next(
        d
        for d in bicep.parse((INFRA / "main.bicep").read_bytes()).root_node.named_children
        if d.type == "output_declaration" and bicep.text(d.named_children[0]) == "agentConfigToml"
    )
    doc = tomllib.loads(ev.expr(out.named_children[-1], {}))
    assert doc["agent"]["tags"] == ["service", "env"]
    assert doc["policy"]["preset"] == "microsoft"
    Config.model_validate(doc)
