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
# The Azure SDKs' own loggers (azure.eventhub, azure.core, azure.identity, ...): their warnings
# go through the same handler, format and redaction as ours (never Python's plain-text last
# resort on standard error), at WARNING or above unless the configured level is higher.
THIRD_PARTY = ("azure",)
MAX_FOREIGN_CHARS = 4000  # of a line another package wrote (an exception's repr can be long)
# Control characters a text line must not carry raw: a hook's output or an event's value with a
# CR, an escape sequence or a NUL would rewrite or split what a terminal or the journal shows.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def _visible(text: str) -> str:
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def _ours(record: logging.LogRecord) -> bool:
    return record.name == LOGGER_NAME or record.name.startswith(LOGGER_NAME + ".")


def _line_text(record: logging.LogRecord) -> str:
    """The line's text, secrets masked; another package's cut to MAX_FOREIGN_CHARS."""
    try:
        msg = record.getMessage()
    except Exception as exc:  # a bad format string in another package's call
        msg = f"{record.msg!r} (unformattable: {type(exc).__name__})"
    if not _ours(record) and len(msg) > MAX_FOREIGN_CHARS:
        msg = msg[:MAX_FOREIGN_CHARS] + f" [cut: {len(msg)} characters]"
    return redact.text(msg)


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "msg": _line_text(record),
        }
        if not _ours(record):
            out["logger"] = record.name
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
        name = "" if _ours(record) else f"[{record.name}] "
        line = f"{stamp} {record.levelname:<7} {name}{_visible(_line_text(record))}" + (
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
    for name in THIRD_PARTY:
        foreign = logging.getLogger(name)
        foreign.handlers.clear()
        foreign.addHandler(handler)
        foreign.setLevel(max(logging.WARNING, logger.level))
        foreign.propagate = False
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
