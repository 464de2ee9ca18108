"""Building blocks for the policy tests: one-event scenarios for the simulator, hook scripts that
leave a trace, and ``[policy]`` TOML."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from se_forwarder_testbed.simulator.scenario import Scenario

SPEED = 10.0  # scenario seconds per real second


def scenario(
    vm: str = "vm-a",
    *,
    resources: tuple[str, ...] = ("$vm",),
    type_: str = "Reboot",
    source: str = "User",
    appear: float = 2.0,
    not_before: float = 40.0,
    approval_delay: float = 2.0,
    remove_after_start: float = 10.0,
    **event: Any,
) -> Scenario:
    """One event: it appears at ``appear``, starts at ``not_before`` (scenario seconds), or
    ``approval_delay`` after an approval."""
    spec = {
        "type": type_,
        "resources": list(resources),
        "source": source,
        "appear": appear,
        "not_before": not_before,
        "approval_delay": approval_delay,
        "remove_after_start": remove_after_start,
        **event,
    }
    return Scenario.model_validate({"name": "policy-test", "vm": {"name": vm}, "events": [spec]})


def hook(tmp_path: Path, name: str, body: str) -> Path:
    """A shell script that appends one line per run to ``<name>.runs`` (how often it ran, with
    what it was told), then runs ``body``."""
    path = tmp_path / f"{name}.sh"
    runs = tmp_path / f"{name}.runs"
    path.write_text(f'#!/bin/sh\necho "$SE_HOOK_PHASE $SE_EVENT_ID $SE_OUTCOME" >> {runs}\n' + body)
    path.chmod(0o755)
    return path


def runs(tmp_path: Path, name: str) -> list[str]:
    path = tmp_path / f"{name}.runs"
    return path.read_text().splitlines() if path.exists() else []


def _toml(value: Any) -> str:
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {_toml(v)}" for k, v in value.items()) + " }"
    return json.dumps(value)  # strings, numbers, booleans, lists of them: TOML reads JSON's


def policy(hooks: dict[str, dict[str, Any]], rules: list[dict[str, Any]], **top: Any) -> str:
    text = "\n[policy]\n" + "".join(f"{k} = {_toml(v)}\n" for k, v in top.items())
    for name, spec in hooks.items():
        text += f"\n[policy.hooks.{name}]\n" + "".join(
            f"{k} = {_toml(v)}\n" for k, v in spec.items()
        )
    for rule in rules:
        text += "\n[[policy.rules]]\n" + "".join(f"{k} = {_toml(v)}\n" for k, v in rule.items())
    return text
