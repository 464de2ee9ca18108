"""``se-forwarder standin SERVICE``: run a stand-in in the foreground (the demo, manual tests).

``se-forwarder standin webhook [--port P] [--tls-dir D] [--answer-all STATUS]``: Slack-, Teams-
and JSON-like incoming webhooks over HTTPS; one JSON line with their URLs, the files holding them
(``url_file``), the CA (``ca_file``) and where to read what was received; each message is logged
on standard error.

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
import os
import sys
import tempfile
from pathlib import Path

from se_forwarder.commands.args import directory, port

#: the command's one line in ``se-forwarder --help`` (registered under ``se_forwarder.commands``)
HELP = "run a local stand-in for an Azure service"


def configure(parser: argparse.ArgumentParser) -> None:
    services = parser.add_subparsers(dest="service", metavar="SERVICE", required=True)
    li = services.add_parser(
        "logs-ingestion",
        help="the Azure Monitor Logs Ingestion API (Log Analytics) over HTTPS",
        description="Run the Logs Ingestion stand-in until SIGINT/SIGTERM. Prints one JSON line "
        "with the endpoint, the CA certificate to trust and the token key file.",
    )
    li.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    li.add_argument("--port", type=port, default=0, help="port (default: any free port)")
    li.add_argument(
        "--tls-dir",
        type=directory,
        default=None,
        help="where ca.pem, server.pem and server.key are (generated if missing; "
        "default: a new temporary directory)",
    )
    li.add_argument(
        "--token-key-file",
        type=Path,
        default=None,
        help="key shared with the token issuer (created if missing; default: TLS_DIR/token.key)",
    )
    li.add_argument(
        "--dcr-id",
        action="append",
        default=None,
        metavar="ID",
        help="a DCR immutable id to accept (repeatable; default dcr-000...001)",
    )
    li.add_argument(
        "--allow-subject",
        action="append",
        default=None,
        metavar="SUBJECT",
        help="an identity holding Monitoring Metrics Publisher on the DCRs "
        "(repeatable; default: any valid token)",
    )
    li.add_argument(
        "--records-file",
        type=Path,
        default=None,
        help="also append accepted records to this JSON Lines file",
    )
    li.set_defaults(standin_run=_run_logs_ingestion)
    wh = services.add_parser(
        "webhook",
        help="incoming webhooks answering like Slack's and Teams' (Workflows), HTTPS",
        description="Run the webhook stand-in until SIGINT/SIGTERM. Prints one JSON line with "
        "the URL of each kind (slack, teams, json), the files holding them (for "
        "[sinks.webhook] url_file) and the CA certificate to trust (ca_file); logs "
        "each message received on standard error.",
    )
    wh.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    wh.add_argument("--port", type=port, default=0, help="port (default: any free port)")
    wh.add_argument(
        "--tls-dir",
        type=directory,
        default=None,
        help="where ca.pem, server.pem and server.key (generated if missing) and the "
        "URL files go (default: a new temporary directory)",
    )
    wh.add_argument(
        "--answer-all",
        type=int,
        default=None,
        metavar="STATUS",
        help="answer every message with this status (410: an archived channel, 404: "
        "a deleted webhook, 503: an outage)",
    )
    wh.set_defaults(standin_run=_run_webhook)


def run(args: argparse.Namespace) -> int:
    code: int = args.standin_run(args)
    return code


def _run_logs_ingestion(args: argparse.Namespace) -> int:
    from se_forwarder.oshost import signals

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
        standin = LogsIngestionStandIn(
            tls_dir,
            authority,
            dcr_ids=tuple(args.dcr_id or (DEFAULT_DCR_ID,)),
            host=args.host,
            port=args.port,
            allowed_subjects=args.allow_subject,
            records_file=args.records_file,
        )
        standin.start()
    except (OSError, ValueError) as exc:
        print(f"error: cannot start the Logs Ingestion stand-in: {exc}", file=sys.stderr)
        if tmp is not None:
            tmp.cleanup()
        return 1

    try:
        announce = json.dumps(
            {
                "service": "logs-ingestion",
                "endpoint": standin.endpoint,
                "ca_cert": str(standin.ca_cert),
                "dcr_ids": list(standin.dcr_ids),
                "token_key_file": str(key_file),
                "records_url": f"{standin.endpoint}/_standin/records",
            }
        )
        signals.wait_for_stop(ready=lambda: print(announce, flush=True))
    finally:
        standin.stop()
        if tmp is not None:
            tmp.cleanup()
        logging.getLogger(__name__).info("Logs Ingestion stand-in stopped")
    return 0


def _run_webhook(args: argparse.Namespace) -> int:
    from se_forwarder.oshost import signals

    from .webhooks import Received, WebhookStandIn

    log = logging.getLogger("se_forwarder.standin.webhook")
    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(asctime)s %(message)s")
    tmp = (
        tempfile.TemporaryDirectory(prefix="se-forwarder-standin-")
        if args.tls_dir is None
        else None
    )
    tls_dir = Path(tmp.name if tmp is not None else args.tls_dir)

    def received(r: Received) -> None:
        said = r.body.get("text") if isinstance(r.body, dict) and r.kind == "slack" else r.body
        log.info("%s answered %d: %s", r.kind, r.status, json.dumps(said, ensure_ascii=False))

    try:
        standin = WebhookStandIn(tls_dir, host=args.host, port=args.port, on_received=received)
        standin.start()
    except (OSError, ValueError) as exc:
        print(f"error: cannot start the webhook stand-in: {exc}", file=sys.stderr)
        if tmp is not None:
            tmp.cleanup()
        return 1
    try:
        if args.answer_all is not None:
            standin.answer_all(args.answer_all)
        urls = {kind: standin.url(kind) for kind in ("slack", "teams", "json")}
        files = {}
        for kind, url in urls.items():  # a URL is a secret, as the real ones are: mode 0600
            files[kind] = str(tls_dir / f"{kind}.url")
            fd = os.open(files[kind], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(url + "\n")
        announce = json.dumps(
            {
                "service": "webhook",
                "urls": urls,
                "url_files": files,
                "ca_cert": str(standin.ca_cert),
                "received_url": f"https://{args.host}:{standin.port}/_standin/received",
            }
        )
        signals.wait_for_stop(ready=lambda: print(announce, flush=True))
    finally:
        standin.stop()
        if tmp is not None:
            tmp.cleanup()
        log.info("webhook stand-in stopped")
    return 0
