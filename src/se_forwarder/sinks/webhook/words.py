"""The webhook's filters in words, for ``check-config``: which messages it sends, each default
stated as the README and docs/policy.md state it (``affects_this_vm`` absent: every event this
VM sees, its own and other VMs')."""

from __future__ import annotations

from .config import WebhookSinkConfig


def describe(cfg: WebhookSinkConfig) -> list[str]:
    whose = {
        None: "every event this VM sees, its own and other VMs' (affects_this_vm absent)",
        True: "events that affect this VM only (affects_this_vm = true)",
        False: "other VMs' events only (affects_this_vm = false)",
    }[cfg.affects_this_vm]
    phases = ", ".join(cfg.phases) if cfg.phases else "every phase"
    types = ", ".join(cfg.event_types) if cfg.event_types else "every type"
    lines = [
        f"webhook ({cfg.format}): {whose}; {phases}; {types}; "
        + ("notices too" if cfg.notices else "no notices")
    ]
    shaped = sorted(cfg.templates)
    if cfg.template or shaped:
        lines.append(
            "  shaped by "
            + ", ".join(
                ([f"a template for {', '.join(shaped)}"] if shaped else [])
                + (["template for the rest"] if cfg.template else [])
            )
        )
    return lines
