"""The VM tags the operator chose (agent.tags), read from the instance document
(docs/record-contract.md §7): only the chosen ones, each value checked on its own, the column
capped; every cut or omission said and counted."""

from __future__ import annotations

import json

import pytest

from se_forwarder.config import Config, load
from se_forwarder.errors import ConfigError
from se_forwarder.imds import tags
from se_forwarder.imds.instance import identity_from_instance, read_instance


def compute(**served: object) -> dict:
    return {
        "name": "vm-1",
        "vmId": "id-1",
        "tagsList": [{"name": k, "value": v} for k, v in served.items()],
    }


def test_only_the_chosen_tags_are_read_matched_ignoring_case():
    c = compute(Service="checkout", ENV="prod", owner="alice@contoso.com")
    got = tags.choose(c, ["service", "env", "team"])
    assert got.values == {"service": "checkout", "env": "prod"}  # keyed as configured
    assert got.problems == ()
    assert "owner" not in json.dumps(got.values) and "alice" not in json.dumps(got.values)


def test_nothing_chosen_is_null_and_no_chosen_tag_present_is_an_empty_object():
    c = compute(service="checkout")
    assert tags.choose(c, []).values is None
    assert tags.choose(c, ["team"]).values == {}
    assert tags.choose({"name": "vm"}, ["service"]).values == {}  # no tags at all


def test_the_older_tags_string_is_read_when_there_is_no_tags_list():
    c = {"tags": "service:checkout;env:prod;url:https://x:8080"}
    assert tags.choose(c, ["service", "url"]).values == {
        "service": "checkout",
        "url": "https://x:8080",
    }


def test_each_value_is_checked_on_its_own():
    c = {
        "tagsList": [
            {"name": "service", "value": 7},
            {"name": "env", "value": "p\ud800d"},
            {"name": "team", "value": "t" * 300},
        ]
    }
    got = tags.choose(c, ["service", "env", "team"])
    assert got.values == {"env": "p\ufffdd", "team": "t" * 256}
    assert len(got.problems) == 2
    assert "service" in got.problems[0] and "not text" in got.problems[0]
    assert "team" in got.problems[1] and "256" in got.problems[1]
    json.dumps(got.values).encode("utf-8")  # storable


def test_the_column_is_capped_last_chosen_left_out_first():
    names = [f"t{k}" for k in range(6)]
    got = tags.choose(compute(**dict.fromkeys(names, "v" * 250)), names)
    assert list(got.values) == names[:3]  # 3 x ~260 bytes fit in 1024, the fourth would not
    assert len(json.dumps(got.values, separators=(",", ":"))) <= tags.MAX_TAGS_BYTES
    assert [p.split(":")[0] for p in got.problems] == [f"tag {n}" for n in names[3:]]


def test_the_identity_carries_the_tags_and_null_before_the_document():
    assert identity_from_instance({}, "host", "vm", tags=["service"]).Tags is None
    vm, problems = read_instance({"compute": compute(service="web")}, "host", tags=["service"])
    assert vm.Tags == {"service": "web"} and problems == ()
    assert identity_from_instance({"compute": compute(service="web")}, "host").Tags is None


def test_tags_are_a_column_of_records_and_heartbeats():
    from se_forwarder import contract

    for key in (contract.RECORDS, contract.HEARTBEATS):
        col = next(c for c in contract.table(key).columns if c.name == "Tags")
        assert col.type == "dynamic"


@pytest.mark.parametrize(
    "bad, word",
    [
        (["service", "Service"], "repeated"),
        (["a/b"], "cannot hold"),
        ([""], "empty"),
        (["x" * 513], "512"),
        ([f"t{k}" for k in range(11)], "at most 10"),
    ],
)
def test_config_refuses_bad_tag_names_naming_the_key(tmp_path, bad, word):
    path = tmp_path / "c.toml"
    path.write_text(f"[agent]\ntags = {json.dumps(bad)}\n")
    with pytest.raises(ConfigError) as exc:
        load(path, env={})
    assert "agent.tags" in str(exc.value) and word in str(exc.value)


def test_config_tags_from_the_environment_as_a_comma_separated_list():
    assert load(None, env={"SE_FORWARDER_AGENT__TAGS": "service, env,team"}).agent.tags == [
        "service",
        "env",
        "team",
    ]
    assert Config().agent.tags == []
