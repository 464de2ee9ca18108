"""``se-forwarder check-config``: validate and print the effective configuration, secrets masked.

It runs the very validation ``run`` runs (sink rules and the policy's hooks included), so what it
accepts, ``run`` accepts. The JSON goes to standard output; the policy, in words, to standard
error (so ``check-config | jq`` still reads plain JSON, and a person sees both).
"""

from __future__ import annotations

import argparse
import json
import sys

from .. import redact
from ..config import masked
from ..policy.words import describe
from ._config import config_arg, load_or_report


def configure(parser: argparse.ArgumentParser) -> None:
    config_arg(parser)


def run(args: argparse.Namespace) -> int:
    config = load_or_report(args)
    if config is None:
        return 2
    print(json.dumps(masked(config), indent=2, default=str))
    print("\n".join(redact.text(line) for line in describe(config.policy)), file=sys.stderr)
    return 0
