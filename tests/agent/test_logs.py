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
    logs.event(log, logging.WARNING, "cannot reach https://u:pw-in-url@proxy.example/",
               endpoint="https://acct.blob.core.windows.net/x.whl?sv=1&sig=S1gnature",
               error="Endpoint=sb://n/;SharedAccessKeyName=a;SharedAccessKey=K3yK3y;",
               plain="nothing secret here", count=3)
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
        raise ConnectionError("GET https://acct.blob.core.windows.net/w.whl?sv=1&sig=TraceS1g failed")
    except ConnectionError:
        log.exception("download failed")
    out = stream.getvalue()
    assert "ConnectionError" in out and "TraceS1g" not in out and "sig=***" in out


def test_a_webhook_url_shows_only_where_it_goes():
    from se_forwarder import redact

    assert redact.url("https://hooks.slack.com/services/T0/B0/s3cr3t") == "https://hooks.slack.com/***"
    assert redact.text("Bearer is a word; Bearer abcdefgh1234 is a token") == \
        "Bearer is a word; Bearer *** is a token"


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
