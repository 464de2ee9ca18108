"""Argument types shared by the commands: a bad value is argparse's one line and exit 2, never
a traceback."""

from __future__ import annotations

import argparse
import math
from pathlib import Path


def _float(text: str, *, zero: bool) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not math.isfinite(value) or value < 0 or (value == 0 and not zero):
        raise argparse.ArgumentTypeError(
            f"must be {'zero or more' if zero else 'a positive number'}, got {text}")
    return value


def positive_float(text: str) -> float:
    return _float(text, zero=False)


def non_negative_float(text: str) -> float:
    return _float(text, zero=True)


def port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"a port is 0 to 65535, got {value}")
    return value


def directory(text: str) -> Path:
    """A directory, or a path where one can be made: not an existing file."""
    path = Path(text)
    if path.exists() and not path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} exists and is not a directory")
    return path


def _int(text: str, *, zero: bool) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 0 or (value == 0 and not zero):
        raise argparse.ArgumentTypeError(
            f"must be {'zero or more' if zero else 'a positive whole number'}, got {value}")
    return value


def positive_int(text: str) -> int:
    return _int(text, zero=False)


def non_negative_int(text: str) -> int:
    return _int(text, zero=True)
