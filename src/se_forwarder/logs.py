"""One line per lifecycle record and per problem: JSON by default, text for people."""

from __future__ import annotations

import json
import logging
import re
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, TextIO

from . import redact

LOGGER_NAME = "se_forwarder"
# Control characters a text line must not carry raw: a hook's output or an event's value with a
# CR, an escape sequence or a NUL would rewrite or split what a terminal or the journal shows.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def _visible(text: str) -> str:
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "msg": record.getMessage(),
        }
        fields = getattr(record, "fields", None)
        if fields:
            out.update(fields)
        if record.exc_info:  # one line still: the traceback is one JSON string
            out["exception"] = redact.text(self.formatException(record.exc_info))
        return json.dumps(out, separators=(",", ":"), default=str, ensure_ascii=False)


class TextFormatter(logging.Formatter):
    def __init__(
        self, stamp: Callable[[float], str] | None = None, hide: tuple[str, ...] = ()
    ) -> None:
        super().__init__()
        self.stamp = stamp or (lambda created: time.strftime("%H:%M:%S", time.localtime(created)))
        self.hide = frozenset(hide)

    def format(self, record: logging.LogRecord) -> str:
        stamp = self.stamp(record.created)
        fields = getattr(record, "fields", None) or {}
        tail = " ".join(
            f"{k}={_visible(str(v))}"
            for k, v in fields.items()
            if v is not None and k not in self.hide
        )
        line = f"{stamp} {record.levelname:<7} {_visible(record.getMessage())}" + (
            f"  {tail}" if tail else ""
        )
        if record.exc_info:
            line += "\n" + redact.text(self.formatException(record.exc_info))
        return line


def setup(
    fmt: str = "json",
    level: str = "info",
    stream: TextIO | None = None,
    *,
    stamp: Callable[[float], str] | None = None,
    hide: tuple[str, ...] = (),
) -> logging.Logger:
    """``stamp``: how text lines show their time (default: local wall-clock HH:MM:SS); ``hide``:
    fields text lines leave out."""
    logger = logging.getLogger(LOGGER_NAME)
    logger.handlers.clear()
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter(stamp, hide))
    logger.addHandler(handler)
    logger.setLevel(level.upper())
    logger.propagate = False
    threading.excepthook = _thread_died
    return logger


def _thread_died(args: threading.ExceptHookArgs) -> None:
    """A thread ended on an exception nothing caught (a bug): one line with its traceback, in the
    configured format, rather than Python's plain-text dump on standard error."""
    if args.exc_type is SystemExit:
        return
    logging.getLogger(LOGGER_NAME).critical(
        "internal error: a thread ended (please report it)",
        exc_info=args.exc_value,  # carries its traceback
        extra={"fields": {"thread": args.thread.name if args.thread is not None else None}},
    )


def get(name: str | None = None) -> logging.Logger:
    return logging.getLogger(LOGGER_NAME if not name else f"{LOGGER_NAME}.{name}")


def event(logger: logging.Logger, level: int, msg: str, **fields: Any) -> None:
    """Log ``msg`` with structured ``fields`` (top-level keys in JSON, key=value in text); any
    secret inside a text value (a password in a URL, a SAS signature) is masked."""
    if logger.isEnabledFor(level):
        clean = {
            k: redact.text(v)
            if isinstance(v, str)
            else redact.data(v, by_key=False)
            if isinstance(v, (list, tuple, dict))
            else v
            for k, v in fields.items()
        }
        logger.log(level, redact.text(msg), extra={"fields": clean})


def one_line(text: str, limit: int = 300) -> str:
    """``text`` as one line for a person (whitespace runs folded), at most ``limit`` characters:
    what a peer or a library said, quoted in an error or a log line."""
    return " ".join(text.split())[:limit]
