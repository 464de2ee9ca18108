"""``se-forwarder standin SERVICE``: run a stand-in in the foreground (the demo, manual tests).

``se-forwarder standin logs-ingestion [--port P] [--tls-dir D] [--token-key-file F] [--dcr-id ID]``
prints one line of JSON on standard output once it listens::

    {"service": "logs-ingestion", "endpoint": "https://localhost:PORT", "ca_cert": "D/ca.pem",
     "dcr_ids": ["dcr-..."], "token_key_file": "F", "records_url": "https://localhost:PORT/_standin/records"}

and runs until SIGINT or SIGTERM (exit status 0). Logs go to standard error. A client uploads
with ``LogsIngestionClient(endpoint, credential, connection_verify=ca_cert)`` and a token issued
under the same key file (the IMDS simulator's managed-identity endpoint, or ``TokenAuthority``).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import tempfile
from pathlib import Path

from se_forwarder.commands.args import directory, port


def configure(parser: argparse.ArgumentParser) -> None:
    services = parser.add_subparsers(dest="service", metavar="SERVICE", required=True)
    li = services.add_parser(
        "logs-ingestion", help="the Azure Monitor Logs Ingestion API (Log Analytics) over HTTPS",
        description="Run the Logs Ingestion stand-in until SIGINT/SIGTERM. Prints one JSON line "
                    "with the endpoint, the CA certificate to trust and the token key file.")
    li.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    li.add_argument("--port", type=port, default=0, help="port (default: any free port)")
    li.add_argument("--tls-dir", type=directory, default=None,
                    help="where ca.pem, server.pem and server.key are (generated if missing; "
                         "default: a new temporary directory)")
    li.add_argument("--token-key-file", type=Path, default=None,
                    help="key shared with the token issuer (created if missing; default: "
                         "TLS_DIR/token.key)")
    li.add_argument("--dcr-id", action="append", default=None, metavar="ID",
                    help="a DCR immutable id to accept (repeatable; default dcr-000...001)")
    li.add_argument("--allow-subject", action="append", default=None, metavar="SUBJECT",
                    help="an identity holding Monitoring Metrics Publisher on the DCRs "
                         "(repeatable; default: any valid token)")
    li.add_argument("--records-file", type=Path, default=None,
                    help="also append accepted records to this JSON Lines file")
    li.set_defaults(standin_run=_run_logs_ingestion)


def run(args: argparse.Namespace) -> int:
    return args.standin_run(args)


def _run_logs_ingestion(args: argparse.Namespace) -> int:
    from se_forwarder.platform import signals

    from .logs_ingestion import DEFAULT_DCR_ID, LogsIngestionStandIn
    from .tokens import TokenAuthority

    tmp = None
    tls_dir = args.tls_dir
    if tls_dir is None:
        tmp = tempfile.TemporaryDirectory(prefix="se-forwarder-standin-")
        tls_dir = Path(tmp.name)
    key_file = args.token_key_file or Path(tls_dir) / "token.key"
    try:
        authority = TokenAuthority.from_key_file(key_file)
        standin = LogsIngestionStandIn(tls_dir, authority, dcr_ids=tuple(args.dcr_id or (DEFAULT_DCR_ID,)),
                                       host=args.host, port=args.port,
                                       allowed_subjects=args.allow_subject,
                                       records_file=args.records_file)
        standin.start()
    except (OSError, ValueError) as exc:
        print(f"error: cannot start the Logs Ingestion stand-in: {exc}", file=sys.stderr)
        if tmp is not None:
            tmp.cleanup()
        return 1

    try:
        print(json.dumps({"service": "logs-ingestion", "endpoint": standin.endpoint,
                          "ca_cert": str(standin.ca_cert), "dcr_ids": list(standin.dcr_ids),
                          "token_key_file": str(key_file),
                          "records_url": f"{standin.endpoint}/_standin/records"}), flush=True)
        signals.wait_for_stop()
    finally:
        standin.stop()
        if tmp is not None:
            tmp.cleanup()
        logging.getLogger(__name__).info("Logs Ingestion stand-in stopped")
    return 0
