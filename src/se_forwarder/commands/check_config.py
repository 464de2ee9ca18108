"""``se-forwarder check-config``: validate and print the effective configuration, secrets masked.

It runs the very validation ``run`` runs (sink rules and the policy's hooks included), so what it
accepts, ``run`` accepts. The JSON goes to standard output; the policy, in words, to standard
error (so ``check-config | jq`` still reads plain JSON, and a person sees both).

Run as root on Linux (``sudo se-forwarder check-config``, the installer) it checks the files the
config names as the service will see them, not as root does: the unit runs as a dynamic user in
its own user namespace (``DynamicUser=yes``, ``PrivateUsers=yes``), with its own ``/tmp`` and no
``/home``, so it reads only what every local user may read, and its secrets through systemd
credentials (``$CREDENTIALS_DIRECTORY``: ``--credentials-dir``, by default the store install.sh
keeps, ``/etc/se-forwarder/credentials``). ``--as-invoker`` checks as the caller instead (an agent
run by hand, or a unit that runs as root); ``--as-service`` checks as the service whoever runs it.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import stat
import sys
from pathlib import Path
from typing import Any

from .. import redact, terminal
from ..collector.config import CollectorFileConfig
from ..config import masked
from ..policy.config import PolicyConfig
from ..policy.words import describe
from ..secret_source import CREDENTIALS_DIRECTORY
from ._config import config_arg, credential_store, load_or_report

# file keys holding a secret -> (the key naming a credential instead, install.sh's credential name)
SECRET_FILES = {
    "url_file": ("url_credential", "webhook-url"),
    "connection_string_file": ("connection_string_credential", "eventhubs-connection-string"),
}
# What each configured section imports when ``run`` builds it, and the extra that brings it:
# checked here so that a missing extra is refused now, not met as ModuleNotFoundError at start.
NEEDS = {
    "sinks.log_analytics": (("azure.monitor.ingestion", "azure.identity"), "azure"),
    "sinks.event_hubs": (("azure.eventhub", "azure.identity"), "azure"),
    "sinks.webhook": (("httpx",), "webhook"),
    "collector": (
        (
            "azure.eventhub.extensions.checkpointstoreblob",
            "azure.mgmt.resourcegraph",
            "azure.mgmt.core",
            "azure.monitor.query",
        ),
        "collector",
    ),
}
HIDDEN = {
    ("/tmp", "/var/tmp"): "PrivateTmp=yes gives the service a /tmp of its own",
    ("/home", "/root", "/run/user"): "ProtectHome=yes hides it from the service",
}


def configure(parser: argparse.ArgumentParser) -> None:
    config_arg(parser)
    parser.add_argument(
        "--credentials-dir",
        metavar="DIR",
        help="the service's credentials ($CREDENTIALS_DIRECTORY) for url_credential and "
        "connection_string_credential (default: $CREDENTIALS_DIRECTORY, else "
        f"{credential_store()} when it exists)",
    )
    view = parser.add_mutually_exclusive_group()
    view.add_argument(
        "--as-service",
        dest="view",
        action="store_const",
        const="service",
        help="check the files the config names as the systemd service reads them: a dynamic "
        "user with a private /tmp and no /home (the default as root on Linux)",
    )
    view.add_argument(
        "--as-invoker",
        dest="view",
        action="store_const",
        const="invoker",
        help="check them as the caller reads them (an agent run by hand)",
    )


def run(args: argparse.Namespace) -> int:
    directory = (
        args.credentials_dir
        or os.environ.get(CREDENTIALS_DIRECTORY)
        or (str(credential_store()) if credential_store().is_dir() else "")
    )
    if directory:  # as systemd hands them to the service
        os.environ[CREDENTIALS_DIRECTORY] = directory
    config = load_or_report(args, CollectorFileConfig)  # [collector] too, when present
    if config is None:
        return 2
    data = masked(config)
    refused = [*missing_extras(data), *no_sink(data)]
    if refused:
        for line in refused:
            print(f"se-forwarder: config error: {line}", file=sys.stderr)
        return 2
    policy = config.policy or PolicyConfig()  # None: no [policy], the default
    for line in hook_secret_warnings(policy):
        print(f"se-forwarder: warning: {line}", file=sys.stderr)
    if _as_service(args):
        problems, warnings = service_view(data)
        for line in warnings:
            print(f"se-forwarder: warning: {line}", file=sys.stderr)
        if problems:
            for line in problems:
                print(f"se-forwarder: config error: {line}", file=sys.stderr)
            return 2
    print(json.dumps(data, indent=2, default=str))
    print(
        "\n".join(terminal.safe(redact.text(line)) for line in describe(policy)),
        file=sys.stderr,
    )
    webhook = getattr(config.sinks, "webhook", None)
    if webhook is not None:
        from ..sinks.webhook.words import describe as webhook_words

        print("\n".join(terminal.safe(line) for line in webhook_words(webhook)), file=sys.stderr)
    if config.kubernetes is not None:
        print("\n".join(terminal.safe(w) for w in config.kubernetes.words()), file=sys.stderr)
    collector = getattr(config, "collector", None)
    if collector is not None:
        words = collector.preview_acknowledge.words()
        print("\n".join(terminal.safe(w) for w in words), file=sys.stderr)
    return 0


def missing_extras(data: dict[str, Any]) -> list[str]:
    """One line per configured section whose packages this installation lacks."""
    out = []
    for section, (modules, extra) in NEEDS.items():
        node: Any = data
        for part in section.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        if node is None:
            continue
        absent = [m for m in modules if not _importable(m)]
        if absent:
            out.append(
                f"[{section}] needs the {extra} extra, not installed here (no module "
                f"{', '.join(absent)}): install se-forwarder[{extra}] (install.sh --extras "
                f"...,{extra}, from a bundle or lock made with it), or remove the section"
            )
    return out


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ImportError:  # a parent package is missing
        return False


def no_sink(data: dict[str, Any]) -> list[str]:
    """A configuration with no sink delivers nothing: every record would wait in the outbox."""
    if any(v is not None for v in (data.get("sinks") or {}).values()):
        return []
    return [
        "no sink: [sinks.log_analytics], [sinks.event_hubs], [sinks.webhook], [sinks.file] or "
        "[sinks.stdout] is needed, else every record stays in the outbox"
    ]


def _as_service(args: argparse.Namespace) -> bool:
    view: str | None = args.view
    if view is not None:
        return view == "service"
    return sys.platform.startswith("linux") and os.geteuid() == 0


def service_view(data: dict[str, Any]) -> tuple[list[str], list[str]]:
    """(problems, warnings) of the files and variables the config names, as the sandboxed
    service meets them."""
    problems, warnings = [], []
    sinks = data.get("sinks") or {}
    for key, value in _named(sinks, "_file", "sinks"):
        field = key.rsplit(".", 1)[1]
        why = unreadable_by_service(Path(value))
        if why and field in SECRET_FILES:
            instead, name = SECRET_FILES[field]
            problems.append(
                f"{key}: the service cannot read {value}: {why}. Hand the secret over as "
                f"a systemd credential: install.sh --credential {name}={value}, then "
                f'{instead} = "{name}" in place of {field}'
            )
        elif why:
            problems.append(f"{key}: the service cannot read {value}: {why}")
        elif field in SECRET_FILES:
            warnings.append(
                f"{key}: {value} is readable by every local user: a systemd "
                f"credential ({SECRET_FILES[field][0]}) keeps the secret from them"
            )
    for name, hook in ((data.get("policy") or {}).get("hooks") or {}).items():
        if hook.get("env_file"):
            problems.append(
                f"policy.hooks.{name}.env_file: the service cannot read {hook['env_file']}: a "
                "file only root or the service's user may read is closed to a dynamic user in a "
                "user namespace of its own. Hand each secret over as a systemd credential: "
                f"install.sh --credential NAME=FILE, then env_credentials = {{ VARIABLE = "
                '"NAME" } (env_file is for an agent that runs as root or as a user of its own: '
                "--as-invoker)"
            )
    for key, value in _named(sinks, "_env", "sinks"):
        warnings.append(
            f"{key}: ${value} is read from the service's environment, which is only "
            "what its unit sets (Environment=): a credential is the safer way"
        )
    return problems, warnings


def hook_secret_warnings(policy: PolicyConfig) -> list[str]:
    """A hook's ``env`` variable named as a secret (it sits in a config every local user may
    read), and secrets read too short to be masked in output."""
    out = []
    for name, hook in policy.hooks.items():
        for variable, value in hook.env.items():
            if value and any(k in variable.lower() for k in redact.SECRET_KEYS):
                out.append(
                    f"policy.hooks.{name}.env.{variable}: a secret by its name, in the "
                    "configuration file: put it in a systemd credential (env_credentials) "
                    "or in env_file, which only root or the agent's user can read"
                )
        short = sorted(v for v, text in hook.secrets().items() if len(text) < redact.MIN_KEPT_CHARS)
        if short:
            out.append(
                f"policy.hooks.{name}: {', '.join(short)} under {redact.MIN_KEPT_CHARS} "
                "characters: never logged by the agent, but not masked where a hook prints "
                "it (so short a value would mask ordinary words)"
            )
    return out


def unreadable_by_service(path: Path) -> str | None:
    """Why a dynamic user in a private user namespace cannot read ``path``, or None. There it
    is neither the owner nor in the group of anything on the host: only the bits for others
    count, on the file and on every directory above it."""
    path = Path(os.path.abspath(path))
    try:
        st = path.stat()
    except OSError as exc:
        return f"{exc.strerror}"
    if not st.st_mode & stat.S_IROTH:
        return (
            f"mode {stat.S_IMODE(st.st_mode):04o}, owner uid {st.st_uid}: only the owner "
            "and group may read it, and the service is neither"
        )
    for parent in path.parents:
        mode = parent.stat().st_mode
        if not mode & stat.S_IXOTH:
            return (
                f"its directory {parent} is mode {stat.S_IMODE(mode):04o}: others may not enter it"
            )
    for roots, why in HIDDEN.items():
        if any(Path(r) in path.parents for r in roots):
            return why
    return None


def _named(data: Any, suffix: str, prefix: str = "") -> list[tuple[str, str]]:
    """(dotted key, value) of every non-empty string value whose key ends with ``suffix``."""
    out = []
    if isinstance(data, dict):
        for k, v in data.items():
            key = f"{prefix}.{k}" if prefix else str(k)
            if isinstance(v, str) and v and str(k).endswith(suffix):
                out.append((key, v))
            else:
                out.extend(_named(v, suffix, key))
    return out
