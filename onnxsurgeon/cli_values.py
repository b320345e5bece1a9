"""The value types of the ``onnxsurgeon`` command line: each turns one flag value into what the
command takes, or raises ``argparse.ArgumentTypeError`` with a one-line message (exit 2)."""

from __future__ import annotations

import argparse
import math


def one_name(value: str) -> str:
    """One name (any selector): a value holding ',' and '=' is a list or pairs given to a flag
    that takes one name, a typo."""
    if "," in value and "=" in value:
        raise argparse.ArgumentTypeError(
            f"{value!r} looks like a list of pairs, but this flag takes one name")
    return value


def pair(value: str) -> tuple[str, str]:
    """``A=B`` -> (A, B), both sides non-empty."""
    left, sep, right = value.partition("=")
    if not sep or not left or not right:
        raise argparse.ArgumentTypeError(f"expected A=B, got {value!r}")
    return left, right


def one_pair(value: str, right_name: str, spelling: str, flag: str, why: str) -> tuple[str, str]:
    """``A=B`` for a flag whose commas belong to the value (``split=whole``): a right side that
    also holds ``=`` is two pairs run together, refused in one line."""
    left, right = pair(value)
    if "," in right and "=" in right:
        raise argparse.ArgumentTypeError(
            f"the {right_name} in {value!r} holds ',' and '=': give each {spelling} its own "
            f"{flag} ({why})")
    return left, right


def attr(value: str) -> tuple[str, str]:
    """``NODE.KEY=VALUE`` of ``set --attr`` (commas belong to the value: ints ``1,2,3``)."""
    return one_pair(value, "value", "NODE.KEY=VALUE", "--attr",
                     "commas belong to the value here: ints 1,2,3")


def regex(value: str) -> tuple[str, str]:
    """``PATTERN=REPLACEMENT`` of ``rename --regex`` (commas are regex syntax)."""
    return one_pair(value, "replacement", "PATTERN=REPLACEMENT", "--regex",
                     "commas are regex syntax here, they do not split")


def tolerance(value: str) -> tuple[float, float]:
    """``RTOL,ATOL`` -> (rtol, atol), both >= 0."""
    try:
        rtol, atol = (float(v) for v in value.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected RTOL,ATOL (two numbers), got {value!r}") from None
    if not (0 <= rtol < math.inf and 0 <= atol < math.inf):  # NaN fails both
        raise argparse.ArgumentTypeError(f"tolerances must be finite numbers >= 0, got {value!r}")
    return rtol, atol


def tolerance_value(value: str) -> float:
    """One tolerance (``--verify-rtol``, ``--atol``...): a finite number >= 0 (NaN made every
    comparison inconclusive, a negative one failed every comparison)."""
    try:
        number = float(value)
    except ValueError:
        number = -1.0
    if not 0 <= number < math.inf:
        raise argparse.ArgumentTypeError(f"expected a finite number >= 0, got {value!r}")
    return number


def dim(value: str) -> tuple[str, int]:
    """``NAME=SIZE`` of a symbolic dimension -> (NAME, SIZE), SIZE >= 1."""
    name, right = pair(value)
    if not right.isdigit() or int(right) < 1:
        raise argparse.ArgumentTypeError(f"dimension size must be a positive integer in {value!r}")
    return name, int(right)


def input_range(value: str) -> tuple[str, tuple[float, float]]:
    """``LO,HI`` or ``NAME=LO,HI`` of the random inputs -> (NAME or ``*``, (LO, HI)), LO < HI."""
    name, sep, bounds = value.rpartition("=")
    lo, comma, hi = bounds.partition(",")
    try:
        low, high = float(lo), float(hi)
    except ValueError:
        comma = ""
    if not comma or (sep and not name) or not -math.inf < low < high < math.inf:
        raise argparse.ArgumentTypeError(
            f"expected LO,HI or NAME=LO,HI with finite LO < HI, got {value!r} (negative bounds: "
            "--range=-1,1)")
    return (name if sep else "*"), (low, high)


def budget(value: str) -> tuple[float, float]:
    """``RTOL,ATOL`` of a precision budget -> (rtol, atol), both >= 0 (NaN refused)."""
    lo, comma, hi = value.partition(",")
    try:
        rtol, atol = float(lo), float(hi)
    except ValueError:
        comma = ""
    if not comma or not (rtol >= 0 and atol >= 0):
        raise argparse.ArgumentTypeError(f"expected RTOL,ATOL (two numbers >= 0), got {value!r}")
    return rtol, atol


def positive_float(value: str) -> float:
    """A positive, finite number of seconds."""
    try:
        number = float(value)
    except ValueError:
        number = -1.0
    if not number > 0 or number == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got {value!r}")
    return number


def _whole(value: str, least: int, expected: str) -> int:
    """A whole number >= ``least``, else the one-line error ``expected <expected>, got ...``."""
    if not value.isdigit() or int(value) < least:
        raise argparse.ArgumentTypeError(f"expected {expected}, got {value!r}")
    return int(value)


def seed(value: str) -> int:
    """A random seed: a whole number >= 0 (numpy refuses a negative one)."""
    return _whole(value, 0, "a whole number >= 0")


def positive_count(value: str) -> int:
    """A whole number >= 1 (samples, threads)."""
    return _whole(value, 1, "a positive whole number")


def positive_int(value: str) -> int:
    """A whole number >= 1 of MB."""
    return _whole(value, 1, "a positive whole number of MB")


def byte_size(value: str) -> int:
    """A size in bytes >= 0."""
    return _whole(value, 0, "a size in bytes >= 0")


def context(value: str) -> int:
    """A whole number of hops >= 0."""
    return _whole(value, 0, "a whole number of hops >= 0")


def jobs(value: str) -> int:
    """A positive number of parallel jobs."""
    return _whole(value, 1, "a positive number of jobs")
