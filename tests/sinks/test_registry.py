"""Sinks register themselves: each sink package registers its kind (name, configuration model,
builder) in ``sinks.kinds``, the configuration's ``[sinks]`` section is generated from what
registered (the configuration names no sink), and every sink is built from one context."""

from __future__ import annotations

import pkgutil

import pytest

from se_forwarder import sinks
from se_forwarder.clock import SYSTEM
from se_forwarder.config import SinksConfig, load
from se_forwarder.errors import ConfigError
from se_forwarder.sinks import kinds, registry
from se_forwarder.sinks.base import SinkContext


def test_every_sink_package_is_named_in_the_static_list_and_registers_itself_under_its_name():
    packages = sorted(m.name for m in pkgutil.iter_modules(sinks.__path__) if m.ispkg)
    assert sorted(kinds.NAMES) == packages
    loaded = kinds.load()
    assert list(loaded) == list(kinds.NAMES)
    assert {name: kind.name for name, kind in loaded.items()} == {p: p for p in kinds.NAMES}


def test_the_sinks_section_is_generated_from_the_kinds(tmp_path):
    assert list(SinksConfig.model_fields) == list(kinds.NAMES)  # same keys, same order
    for name in kinds.NAMES:
        with pytest.raises(ConfigError, match=rf"sinks\.{name}\.no_such_key: unknown key"):
            load(None, env={f"SE_FORWARDER_SINKS__{name.upper()}__NO_SUCH_KEY": "1"})
    path = tmp_path / "c.toml"
    path.write_text('[sinks.file]\npath = "/tmp/r.jsonl"\n[sinks.stdout]\n')
    enabled = load(path).sinks.enabled()
    assert list(enabled) == ["stdout", "file"]  # the kinds' order, not the file's
    assert isinstance(enabled["file"], kinds.load()["file"].config)


def test_every_sink_is_built_from_the_one_context(tmp_path):
    """No sink is told apart: the webhook reads the policy and the clock off the same context the
    file sink is given."""
    (tmp_path / "hook.url").write_text("https://hooks.example/T/B/secret\n")
    cfg = load(
        None,
        env={
            "SE_FORWARDER_SINKS__WEBHOOK__URL_FILE": str(tmp_path / "hook.url"),
            "SE_FORWARDER_SINKS__FILE__PATH": str(tmp_path / "r.jsonl"),
            "SE_FORWARDER_POLICY__PRESET": "microsoft",
        },
    )
    cx = SinkContext.of(cfg, SYSTEM)
    assert cx.identity is cfg.identity and cx.policy is cfg.policy
    file_sink, hook = registry.build(cfg.sinks, cx)
    with file_sink, hook:
        assert hook.policy.config.preset == "microsoft"
        assert hook.clock is SYSTEM
        assert file_sink.name == "file"
