"""``se-forwarder``: one entry point, a subcommand per job (each module: configure + run).

Other distributions add commands through the ``se_forwarder.commands`` entry-point group (the test
bed, ``se-forwarder-testbed``: ``simulate``, ``demo``, ``standin``); the agent names none of them
and looks them up only for a command that is not its own, never for ``run``."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from types import ModuleType

from . import __version__
from .errors import SeForwarderError

# name -> (module, help). Modules are imported only when their command runs: `run` must not pay
# for the report, the collector or the Azure SDKs.
COMMANDS: dict[str, tuple[str, str]] = {
    "run": ("se_forwarder.commands.run", "run the agent"),
    "check-config": (
        "se_forwarder.commands.check_config",
        "validate a config file and print the effective config",
    ),
    "status": (
        "se_forwarder.commands.status",
        "show the running agent's health (exit non-zero when unhealthy)",
    ),
    "drain": (
        "se_forwarder.commands.drain",
        "wait until the spool is empty (every sink caught up)",
    ),
    "replay": (
        "se_forwarder.commands.replay",
        "replay a trace file and print the lifecycle records",
    ),
    "report": (
        "se_forwarder.commands.report",
        "the fleet view (the workbooks' queries, run locally) as one HTML file",
    ),
    "collect": (
        "se_forwarder.commands.collect",
        "collect Azure's own record of every VM's maintenance (Event Grid, Resource Graph)",
    ),
}

#: the entry-point group other distributions register commands in (name = module with
#: ``configure``, ``run`` and ``HELP``)
GROUP = "se_forwarder.commands"


def registered() -> dict[str, str]:
    """Commands other installed distributions add (name -> module); the agent's own win."""
    from importlib.metadata import entry_points

    return {ep.name: ep.module for ep in entry_points(group=GROUP) if ep.name not in COMMANDS}


def _load(module: str) -> ModuleType:
    return importlib.import_module(module)


def targets(only: str | None = None) -> dict[str, str]:
    """Every command's module: the agent's, and the registered ones unless ``only`` is the
    agent's (``run`` never reads the installed distributions' metadata)."""
    own = {name: module for name, (module, _) in COMMANDS.items()}
    return own if only in COMMANDS else own | registered()


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="se-forwarder",
        description="Forward Azure Scheduled Events (IMDS) as lifecycle records.",
    )
    parser.add_argument("--version", action="version", version=f"se-forwarder {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, target in targets(only).items():
        module, unavailable = None, None
        if only is None or name == only:
            try:
                module = _load(target)
            except ImportError as exc:  # a command whose optional parts are not installed
                unavailable = str(exc)
        help_text = COMMANDS[name][1] if name in COMMANDS else getattr(module, "HELP", None)
        p = sub.add_parser(name, help=help_text, description=help_text)
        if module is not None:
            module.configure(p)
        else:
            p.set_defaults(unavailable=unavailable)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    command = next((a for a in argv if not a.startswith("-")), None)
    if command == "run":  # before pydantic is imported (lean.py)
        from . import lean

        lean.builtin_digests()
    table = targets(command)
    parser = build_parser(command if command in table else None)
    args = parser.parse_args(argv)
    if getattr(args, "unavailable", None):
        print(f"se-forwarder {args.command}: not available: {args.unavailable}", file=sys.stderr)
        return 1
    try:
        return int(_load(table[args.command]).run(args) or 0)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `status --json | head`: the reader left; nothing to say
        _silence_stdout()
        return 1
    except SeForwarderError as exc:  # an expected error a command let through: one line
        print(f"se-forwarder {args.command}: {exc}", file=sys.stderr)
        return exc.exit_code


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's own flush at exit does not fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass


if __name__ == "__main__":
    sys.exit(main())
