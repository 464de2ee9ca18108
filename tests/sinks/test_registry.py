"""One registry: each sink package declares its kind (name, configuration model, builder, whether
it needs the policy), and the configuration's ``[sinks]`` section is generated from it."""

from __future__ import annotations

import importlib
import pkgutil

import pytest

from se_forwarder import sinks
from se_forwarder.config import SinksConfig, load
from se_forwarder.errors import ConfigError
from se_forwarder.sinks import registry


def test_every_sink_package_declares_a_kind_under_its_own_name_and_the_registry_has_it():
    packages = [m.name for m in pkgutil.iter_modules(sinks.__path__) if m.ispkg]
    declared = {
        name: importlib.import_module(f"se_forwarder.sinks.{name}").KIND for name in packages
    }
    assert {name: kind.name for name, kind in declared.items()} == {p: p for p in packages}
    assert {kind.name: kind for kind in declared.values()} == registry.KINDS


def test_the_sinks_section_is_generated_from_the_kinds(tmp_path):
    assert list(SinksConfig.model_fields) == list(registry.KINDS)  # same keys, same order
    for name in registry.KINDS:
        with pytest.raises(ConfigError, match=rf"sinks\.{name}\.no_such_key: unknown key"):
            load(None, env={f"SE_FORWARDER_SINKS__{name.upper()}__NO_SUCH_KEY": "1"})
    path = tmp_path / "c.toml"
    path.write_text('[sinks.file]\npath = "/tmp/r.jsonl"\n[sinks.stdout]\n')
    enabled = load(path).sinks.enabled()
    assert list(enabled) == ["stdout", "file"]  # registry order, not the file's
    assert isinstance(enabled["file"], registry.KINDS["file"].config)


def test_only_the_kinds_that_need_the_policy_are_given_it(tmp_path):
    """The file sink's builder takes no policy (it would fail if given one); the webhook's does."""
    (tmp_path / "hook.url").write_text("https://hooks.example/T/B/secret\n")
    cfg = load(
        None,
        env={
            "SE_FORWARDER_SINKS__WEBHOOK__URL_FILE": str(tmp_path / "hook.url"),
            "SE_FORWARDER_SINKS__FILE__PATH": str(tmp_path / "r.jsonl"),
            "SE_FORWARDER_POLICY__PRESET": "microsoft",
        },
    )
    assert [k.name for k in registry.KINDS.values() if k.uses_policy] == ["webhook"]
    file_sink, hook = registry.build(cfg)
    with file_sink, hook:
        assert hook.policy is not None and hook.policy.config.preset == "microsoft"
        assert file_sink.name == "file"
