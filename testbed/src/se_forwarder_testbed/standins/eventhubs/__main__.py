"""``python -m se_forwarder_testbed.standins.eventhubs``: run an Event Hubs stand-in until
interrupted, printing each hub's connection string."""

from __future__ import annotations

import argparse
from pathlib import Path

from se_forwarder.commands.args import directory, port, positive_int
from se_forwarder.oshost import signals

from .. import tls as tls_module
from ..tokens import TokenAuthority
from .standin import DEFAULT_MAX_MESSAGE_SIZE, EventHubsStandIn


def hub_spec(text: str) -> tuple[str, int]:
    """``NAME[:PARTITIONS]`` (4 partitions when not given)."""
    name, _, n = text.partition(":")
    if not name:
        raise argparse.ArgumentTypeError(f"a hub needs a name: {text!r}")
    return name, positive_int(n) if n else 4


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m se_forwarder_testbed.standins.eventhubs",
        description="Event Hubs stand-in: an AMQP 1.0 listener "
        "(python-qpid-proton) for the unmodified azure-eventhub SDK.",
    )
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=port, default=5672)
    ap.add_argument(
        "--tls-dir",
        type=directory,
        help="serve TLS with the certificates in (or generated into) DIR",
    )
    ap.add_argument(
        "--hub", type=hub_spec, action="append", default=[], metavar="NAME[:PARTITIONS]"
    )
    ap.add_argument("--max-message-size", type=positive_int, default=DEFAULT_MAX_MESSAGE_SIZE)
    ap.add_argument(
        "--token-key-file", type=Path, help="shared TokenAuthority key file (accept JWTs)"
    )
    args = ap.parse_args(argv)
    hubs = dict(args.hub or [("scheduled-events", 4)])
    standin = EventHubsStandIn(
        args.host,
        args.port,
        tls_module.generate(args.tls_dir) if args.tls_dir else None,
        hubs=hubs,
        max_message_size=args.max_message_size,
        token_authority=TokenAuthority.from_key_file(args.token_key_file)
        if args.token_key_file
        else None,
    )
    with standin:

        def ready() -> None:
            for hub in hubs:
                print(f"{hub}: {standin.connection_string(hub)}", flush=True)

        signals.wait_for_stop(ready)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
