"""The ``--config`` option shared by the commands that read the configuration."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TypeVar, overload

from .. import oshost
from ..config import Config, load
from ..errors import ConfigError
from ..secret_source import CREDENTIALS_DIRECTORY


def config_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config",
        metavar="FILE",
        help=f"TOML config (default: {oshost.current().default_config_path()} if it "
        "exists); SE_FORWARDER_<SECTION>__<KEY> variables override it",
    )


def config_path(args: argparse.Namespace) -> str | None:
    """``--config``, else the platform's default file when it exists, else None (defaults)."""
    if args.config is not None:
        return str(args.config)
    default = str(oshost.current().default_config_path())
    return default if os.path.exists(default) else None


C = TypeVar("C", bound=Config)


@overload
def load_or_report(args: argparse.Namespace) -> Config | None: ...
@overload
def load_or_report(args: argparse.Namespace, model: type[C]) -> C | None: ...


def load_or_report(args: argparse.Namespace, model: type[Config] = Config) -> Config | None:
    """The config as ``model``, or None after printing the error (the caller exits 2)."""
    try:
        return load(config_path(args), model=model)
    except ConfigError as exc:
        print(f"se-forwarder: config error: {exc}", file=sys.stderr)
        return None


def state_dir_or_report(args: argparse.Namespace) -> Path | None:
    """``--state-dir``, else the agent's own from the same config and environment `run` reads;
    None after printing a config error (the caller exits 2)."""
    if args.state_dir is not None:
        return Path(args.state_dir)
    if not os.environ.get(CREDENTIALS_DIRECTORY) and credential_store().is_dir():
        # the credentials a config names (a webhook URL, a hook's token), read as the service
        # reads them: `sudo se-forwarder status` outside the unit reads install.sh's store
        os.environ[CREDENTIALS_DIRECTORY] = str(credential_store())
    config = load_or_report(args)
    return None if config is None else Path(config.agent.state_dir)


def credential_store() -> Path:
    """Where install.sh keeps the credentials the unit loads: beside the default config."""
    return Path(oshost.current().default_config_path()).parent / "credentials"
