"""``se-forwarder simulate``: run the IMDS simulator until SIGINT/SIGTERM.

The URL goes to standard output as one line (so a script can read it), request logs to standard
error.
"""

from __future__ import annotations

import argparse
import logging
import sys

from se_forwarder.commands.args import non_negative_float, non_negative_int, port, positive_float
from se_forwarder.errors import SeForwarderError
from se_forwarder.oshost import signals

from ..standins.tokens import TokenAuthority
from .scenario import builtin_names
from .server import Simulator

#: the command's one line in ``se-forwarder --help`` (registered under ``se_forwarder.commands``)
HELP = "serve a simulated IMDS on loopback"


def configure(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Serve a local stand-in for Azure IMDS (Scheduled Events, instance "
        "document, managed-identity tokens) from a scenario or a trace."
    )
    parser.add_argument(
        "--scenario",
        metavar="FILE_OR_NAME",
        help="scenario TOML file or built-in name "
        f"({', '.join(builtin_names())}); default: an empty document",
    )
    parser.add_argument(
        "--trace",
        metavar="FILE",
        help="serve the observations of a trace file (JSON Lines) in turn",
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default: loopback)")
    parser.add_argument("--port", type=port, default=0, help="port (default: any free port)")
    parser.add_argument(
        "--speed",
        type=positive_float,
        default=None,
        help="scenario seconds per real second (default: the scenario's own)",
    )
    parser.add_argument("--vm-name", metavar="NAME", help="this VM's name (overrides the scenario)")
    parser.add_argument(
        "--first-call-delay",
        type=non_negative_float,
        default=None,
        metavar="SECONDS",
        help="real seconds before the first scheduledevents answer",
    )
    parser.add_argument(
        "--rate-limit",
        type=non_negative_int,
        default=5,
        metavar="N",
        help="requests per second before 429 (0: no limit; default 5)",
    )
    parser.add_argument(
        "--token-key-file",
        metavar="FILE",
        help="key shared with the other stand-ins to sign tokens (created if absent)",
    )


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(
        stream=sys.stderr, level=logging.INFO, format="%(asctime)s simulate %(message)s"
    )
    try:
        authority = (
            TokenAuthority.from_key_file(args.token_key_file) if args.token_key_file else None
        )
        sim = Simulator(
            args.scenario,
            trace=args.trace,
            host=args.host,
            port=args.port,
            speed=args.speed,
            vm_name=args.vm_name,
            token_authority=authority,
            first_call_delay=args.first_call_delay,
            rate_limit=args.rate_limit or None,
        )
    except (SeForwarderError, ValueError) as exc:
        print(f"simulate: {exc}", file=sys.stderr)
        return 2
    try:
        sim.start()
    except OSError as exc:
        print(
            f"simulate: cannot listen on {args.host}:{args.port}: {exc.strerror or exc}",
            file=sys.stderr,
        )
        return 1
    try:
        logging.getLogger("se_forwarder.simulator").info(
            "scenario %s at speed %g, vm %s", sim.scenario.name, sim.speed, sim.scenario.vm.name
        )
        signals.wait_for_stop(ready=lambda: print(sim.url, flush=True))
    finally:
        sim.stop()
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run without ``cli.py`` (``python -m se_forwarder_testbed.simulator.command``)."""
    parser = argparse.ArgumentParser(prog="se-forwarder simulate")
    configure(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
