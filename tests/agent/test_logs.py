"""Log lines never carry a secret, wherever it sits in a value, in JSON and in text."""

from __future__ import annotations

import io
import json
import logging

import pytest

from se_forwarder import logs


@pytest.mark.parametrize("fmt", ["json", "text"])
def test_secrets_in_log_fields_and_messages_are_masked(fmt):
    stream = io.StringIO()
    log = logs.setup(fmt, "info", stream)
    logs.event(
        log,
        logging.WARNING,
        "cannot reach https://u:pw-in-url@proxy.example/",
        endpoint="https://acct.blob.core.windows.net/x.whl?sv=1&sig=S1gnature",
        error="Endpoint=sb://n/;SharedAccessKeyName=a;SharedAccessKey=K3yK3y;",
        plain="nothing secret here",
        count=3,
    )
    out = stream.getvalue()
    for secret in ("pw-in-url", "S1gnature", "K3yK3y"):
        assert secret not in out
    assert "nothing secret here" in out and "***" in out
    if fmt == "json":
        line = json.loads(out)
        assert line["count"] == 3 and line["endpoint"].endswith("sig=***")


@pytest.mark.parametrize("fmt", ["json", "text"])
def test_secrets_in_a_logged_traceback_are_masked(fmt):
    stream = io.StringIO()
    log = logs.setup(fmt, "info", stream)
    try:
        raise ConnectionError(
            "GET https://acct.blob.core.windows.net/w.whl?sv=1&sig=TraceS1g failed"
        )
    except ConnectionError:
        log.exception("download failed")
    out = stream.getvalue()
    assert "ConnectionError" in out and "TraceS1g" not in out and "sig=***" in out


def test_a_webhook_url_shows_only_where_it_goes():
    from se_forwarder import redact

    assert (
        redact.url("https://hooks.slack.com/services/T0/B0/s3cr3t") == "https://hooks.slack.com/***"
    )
    assert (
        redact.text("Bearer is a word; Bearer abcdefgh1234 is a token")
        == "Bearer is a word; Bearer *** is a token"
    )


def test_a_thread_that_dies_on_an_exception_is_one_json_line():
    """Not Python's plain-text traceback on standard error: one line, in the agent's format."""
    import threading

    stream = io.StringIO()
    logs.setup("json", "info", stream=stream)

    def boom() -> None:
        raise ValueError("embedded null byte")

    t = threading.Thread(target=boom, name="event-1234")
    t.start()
    t.join()
    [line] = stream.getvalue().splitlines()
    out = json.loads(line)
    assert out["level"] == "critical" and out["thread"] == "event-1234"
    assert "ValueError: embedded null byte" in out["exception"]


@pytest.mark.parametrize(
    "value,secret,shown",
    [
        (
            "posting to https://hooks.slack.com/services/T0A/B0B/XyZkEy1 failed",
            "XyZkEy1",
            "https://hooks.slack.com/***",
        ),
        (
            "url=https%3A%2F%2Fhooks.slack.com%2Fservices%2FT0A%2FB0B%2FXyZkEy1&x=1",
            "XyZkEy1",
            "https%3A%2F%2Fhooks.slack.com%2F***",
        ),
        (
            "https://contoso.webhook.office.com/webhookb2/a1b2c3@d4/IncomingWebhook/KeY9/x",
            "KeY9",
            "https://contoso.webhook.office.com/***",
        ),
        (
            "https://prod-22.westeurope.logic.azure.com:443/workflows/f00d/triggers/manual/paths/invoke",
            "f00d",
            "https://prod-22.westeurope.logic.azure.com:443/***",
        ),
        (
            (
                "https://default0a1b.environment.api.powerplatform.com/powerautomate/automations/direct/"
                "workflows/beef/triggers/manual/paths/invoke"
            ),
            "beef",
            "https://default0a1b.environment.api.powerplatform.com/***",
        ),
    ],
)
def test_webhook_urls_of_known_hosts_are_masked_in_any_text(value, secret, shown):
    stream = io.StringIO()
    log = logs.setup("json", "info", stream)
    logs.event(log, logging.WARNING, value, argv=["curl", value], nested={"u": value})
    out = stream.getvalue()
    assert secret not in out and shown in out


def test_an_answer_quoting_a_secret_url_back_is_masked_in_every_form_before_it_is_cut():
    from urllib.parse import quote

    from se_forwarder import redact

    url = "https://hooks.example.net/services/T0SECRET1/B0SECRET2/bG9uZ3NlY3JldGtleQ"
    path = "/services/T0SECRET1/B0SECRET2/bG9uZ3NlY3JldGtleQ"
    secrets = redact.url_secrets(url)
    body = (
        "y" * 180 + f" Cannot POST {path} | {quote(path, safe='')} | "
        f"{quote(path, safe='').lower()} | {json.dumps(path).replace('/', chr(92) + '/')} "
        "| unknown token bG9uZ3NlY3JldGtleQ"
    )
    shown = redact.answer(body, secrets, limit=10_000)
    for piece in ("T0SECRET1", "B0SECRET2", "bG9uZ3NlY3JldGtleQ"):
        assert piece not in shown and quote(piece) not in shown
    assert "Cannot POST ***" in shown and redact.answer(body, secrets).startswith("y" * 180)
    cut = redact.answer(body[: 200 + len("Cannot POST /services/T0SEC")], secrets, cut=True)
    assert "T0SEC" not in cut  # a secret cut where the reading stopped is dropped too


def test_a_text_line_carries_no_raw_control_character():
    """A hook's output with a CR, an escape sequence or a NUL must not rewrite or split a line."""
    stream = io.StringIO()
    log = logs.setup("text", "info", stream)
    logs.event(log, logging.INFO, "hook output", line="50%\r100% \x1b[2Jdone\x00\nforged line")
    [line] = stream.getvalue().splitlines()
    assert "line=50%\\x0d100% \\x1b[2Jdone\\x00\\x0aforged line" in line


def test_an_echo_of_the_secret_url_is_masked_whatever_its_case_or_encoding():
    """Issue 33: a receiver echoing the URL upper-cased or in base64 got it into the log,
    status.json and the dead letters unmasked."""
    import base64

    from se_forwarder import redact

    url = "https://hooks.example.net/services/T0SECRET1/B0SECRET2/bG9uZ3NlY3JldGtleQ"
    secrets = redact.url_secrets(url)
    echoes = [
        url.upper(),
        "/SERVICES/T0SECRET1/B0SECRET2/BG9UZ3NLY3JLDGTLEQ",
        base64.b64encode(url.encode()).decode(),
        base64.b64encode(b'{"url":"' + url.encode() + b'"}').decode(),
        base64.urlsafe_b64encode(b"/services/T0SECRET1/B0SECRET2/bG9uZ3NlY3JldGtleQ").decode(),
    ]
    for echo in echoes:
        shown = redact.answer(f"bad request: {echo}", secrets, limit=10_000)
        assert "SECRET" not in shown.upper(), (echo, shown)
        decoded = "".join(
            base64.b64decode(w + "===", altchars=b"-_").decode("latin-1")
            for w in shown.split()
            if len(w) > 16
        )
        assert "T0SECRET1" not in decoded and "bG9uZ3NlY3JldGtleQ" not in decoded, (echo, shown)


@pytest.mark.parametrize("fmt", ["json", "text"])
def test_the_azure_sdks_lines_go_through_our_format_and_redaction(fmt):
    """The SDK's own warnings (e.g. the Event Hubs processor's 'An error occurred while
    receiving ... RecursionError(...)') are lines of ours: one JSON object each, secrets masked,
    cut when huge, below WARNING left out; never Python's plain-text last resort."""
    stream = io.StringIO()
    logs.setup(fmt, "info", stream)
    sdk = logging.getLogger("azure.eventhub._eventprocessor.event_processor")
    sdk.info("EventProcessor %r is being started", "p1")  # chatty: below WARNING
    sdk.warning(
        "EventProcessor instance %r partition %r. An error occurred while receiving. The "
        "exception is %r.",
        "p1",
        "0",
        ValueError("Endpoint=sb://n/;SharedAccessKeyName=a;SharedAccessKey=K3yK3y;" + "[" * 9000),
    )
    lines = stream.getvalue().splitlines()
    assert len(lines) == 1 and "K3yK3y" not in lines[0] and "being started" not in lines[0]
    if fmt == "json":
        line = json.loads(lines[0])
        assert line["level"] == "warning" and line["logger"] == sdk.name
        assert "An error occurred while receiving" in line["msg"]
        assert line["msg"].endswith("characters]") and len(line["msg"]) < 4100
    else:
        assert f"[{sdk.name}] EventProcessor instance" in lines[0]
