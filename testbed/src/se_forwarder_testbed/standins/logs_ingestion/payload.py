"""A request body becomes records: its size limits, its Content-Encoding (gzip or none) and its
JSON, which must be an array."""

from __future__ import annotations

import json
import zlib
from typing import Any

from .answers import Answer
from .schema import json_type


def inflate(body: bytes, encoding: str, limit: int) -> bytes:
    """The uncompressed body: 413 when the wire body is over ``limit``; gzip is inflated to at
    most twice the limit (and one byte), which :func:`parse` then refuses."""
    if len(body) > limit:
        raise Answer(
            413,
            "ContentLengthLimitExceeded",
            f"The request body is {len(body)} bytes; the maximum is {limit} bytes per call.",
        )
    if encoding == "gzip":
        return _gunzip(body, 2 * limit + 1)
    if encoding in ("", "identity"):
        return body
    raise Answer(
        400,
        "InvalidContentEncoding",
        f"Content-Encoding '{encoding}' is not supported; use gzip or none.",
    )


def parse(data: bytes, limit: int) -> list[Any]:
    """The JSON array in ``data``, whose records (without the array's punctuation, as the SDK's
    chunking counts them) hold at most ``limit`` bytes."""
    if len(data) > 2 * limit:
        raise Answer(
            413,
            "ContentLengthLimitExceeded",
            f"The uncompressed request body is over {2 * limit} bytes; the maximum is "
            f"{limit} bytes of records per call.",
        )
    try:
        logs = json.loads(data)
    except UnicodeDecodeError as exc:
        raise Answer(400, "InvalidPayload", f"The request body is not UTF-8: {exc}.") from None
    except ValueError as exc:
        raise Answer(400, "InvalidPayload", f"The request body is malformed JSON: {exc}.") from None
    if not isinstance(logs, list):
        raise Answer(
            400,
            "InvalidPayload",
            f"The request body must be a JSON array of objects, not {json_type(logs)}.",
        )
    counted = len(data) - 2 * len(logs)
    if counted > limit:
        raise Answer(
            413,
            "ContentLengthLimitExceeded",
            f"The uncompressed request body holds {counted} bytes of records; the maximum "
            f"is {limit} bytes per call.",
        )
    return logs


def _gunzip(body: bytes, cap: int) -> bytes:
    d = zlib.decompressobj(16 + zlib.MAX_WBITS)
    try:
        data = d.decompress(body, cap)
    except zlib.error as exc:
        raise Answer(
            400, "InvalidPayload", f"Content-Encoding is gzip but the body is not: {exc}."
        ) from None
    if len(data) >= cap:
        return data  # over the limit; the caller answers 413 without inflating further
    if not d.eof:
        raise Answer(
            400, "InvalidPayload", "Content-Encoding is gzip but the gzip stream is truncated."
        )
    return data
