"""``[kubernetes]``: the rules a drain follows, checked as ``run`` reads them (no API server)."""

from __future__ import annotations

import pytest

from se_forwarder.config import load
from se_forwarder.errors import ConfigError

LIVE = "Virtual machine is being paused because of a memory-preserving Live Migration operation."


def config(tmp_path, text: str, **env: str):
    path = tmp_path / "config.toml"
    path.write_text(text)
    return load(path, env=env)


RULES = """
[kubernetes]
[[kubernetes.drain]]
event_types = ["livemigration"]
action = "observe"
[[kubernetes.drain]]
event_types = ["Freeze", "Reboot"]
node_pools = ["system"]
action = "cordon"
[[kubernetes.drain]]
event_types = ["Reboot", "Redeploy"]
"""


def test_the_first_matching_rule_decides_and_a_live_migration_is_told_from_a_freeze(tmp_path):
    k = config(tmp_path, RULES, SE_FORWARDER_KUBERNETES__NODE_NAME="aks-system-0").kubernetes
    assert k is not None and k.node_name == "aks-system-0"
    assert k.drain[0].event_types == ["LiveMigration"]  # written back as spelled
    assert k.rule_for("Freeze", LIVE, "user").action == "observe"
    assert k.rule_for("Freeze", "", "system").action == "cordon"
    assert k.rule_for("Freeze", "", "user") is None  # a plain freeze on a user pool: nothing
    assert k.rule_for("Reboot", None, "system").action == "cordon"
    assert k.rule_for("Reboot", None, "user").action == "drain"
    assert k.rule_for("Terminate", None, "user") is None


def test_bad_rules_are_refused_with_the_key(tmp_path):
    with pytest.raises(ConfigError, match="node_name"):
        config(tmp_path, "[kubernetes]\n")
    with pytest.raises(ConfigError, match="unknown event type 'Reboots'"):
        config(
            tmp_path,
            '[kubernetes]\nnode_name = "n"\n[[kubernetes.drain]]\nevent_types = ["Reboots"]\n',
        )
    with pytest.raises(ConfigError, match="api_server"):
        config(tmp_path, '[kubernetes]\nnode_name = "n"\napi_server = "http://10.0.0.1"\n')
    with pytest.raises(ConfigError, match="action"):
        config(tmp_path, '[kubernetes]\nnode_name = "n"\n[[kubernetes.drain]]\naction = "delete"\n')


def test_check_config_says_the_rules_in_words(tmp_path):
    k = config(tmp_path, RULES, SE_FORWARDER_KUBERNETES__NODE_NAME="n1").kubernetes
    assert k is not None
    assert k.words()[1:] == [
        "  1. LiveMigration: tell (events, condition) only",
        "  2. Freeze/Reboot on pools system: cordon; uncordon after",
        "  3. Reboot/Redeploy: cordon and drain; uncordon after",
        "  otherwise: nothing on the node changes",
    ]
