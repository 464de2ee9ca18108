"""Argument types shared by the commands: a bad value is argparse's one line and exit 2, never
a traceback."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

N = TypeVar("N", int, float)


def _number(text: str, cast: Callable[[str], N], noun: str, *, zero: bool) -> N:
    try:
        value = cast(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a {noun}: {text!r}") from None
    if not math.isfinite(value) or value < 0 or (value == 0 and not zero):
        raise argparse.ArgumentTypeError(
            f"must be {'zero or more' if zero else f'a positive {noun}'}, got {text}"
        )
    return value


def positive_float(text: str) -> float:
    return _number(text, float, "number", zero=False)


def non_negative_float(text: str) -> float:
    return _number(text, float, "number", zero=True)


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


def positive_int(text: str) -> int:
    return _number(text, int, "whole number", zero=False)


def non_negative_int(text: str) -> int:
    return _number(text, int, "whole number", zero=True)
