"""``se-forwarder check-config``: validate and print the effective configuration, secrets masked.

It runs the very validation ``run`` runs (sink rules included), so what it accepts, ``run``
accepts.
"""

from __future__ import annotations

import argparse
import json

from ..config import masked
from ._config import config_arg, load_or_report


def configure(parser: argparse.ArgumentParser) -> None:
    config_arg(parser)


def run(args: argparse.Namespace) -> int:
    config = load_or_report(args)
    if config is None:
        return 2
    print(json.dumps(masked(config), indent=2, default=str))
    return 0
