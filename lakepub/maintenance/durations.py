"""Durations on the command line: ``0s``, ``90m``, ``12h``, ``3d`` (also ``2w``), and the janitor's
defaults, kept here (no pyiceberg import) so ``lakepub janitor --help`` shows them without loading
the janitor."""

from __future__ import annotations

import math
import re

from lakepub.errors import UserError

DEFAULT_OLDER_THAN_S = 3 * 86400.0  # snapshots and unreferenced files younger than this are kept
DEFAULT_RETAIN_LAST = 5  # snapshots kept per branch whatever their age

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
MAX_DURATION_S = 14880 * _UNITS["w"]  # below threading.TIMEOUT_MAX and time.sleep's limit (~2**63 ns)
_PATTERN = re.compile(r"^\s*(\d+)\s*([smhdw])\s*$")


class InvalidDuration(UserError):
    """A duration option is not ``<integer><unit>`` with unit s, m, h, d or w."""


def parse_duration(text: str, option: str = "--older-than") -> float:
    """Seconds in ``text``; raises InvalidDuration (exit 2) with a one-line message."""
    match = _PATTERN.match(str(text))
    if match is None:
        raise InvalidDuration(
            f"invalid duration {text!r} for {option}: expected a whole number and a unit s, m, h, d or w "
            "(e.g. 0s, 90m, 12h, 3d)"
        )
    seconds = int(match.group(1)) * _UNITS[match.group(2)]
    if seconds > MAX_DURATION_S:  # a sleep, a wait or a timestamp that long overflows
        raise InvalidDuration(f"invalid duration {text!r} for {option}: at most {format_duration(MAX_DURATION_S)} "
                              "(about 285 years)")
    return float(seconds)


def format_duration(seconds: float) -> str:
    """The shortest exact ``<n><unit>`` spelling of a whole number of seconds (``259200`` -> ``3d``)."""
    whole = int(seconds)
    for unit in ("w", "d", "h", "m"):
        if whole and whole % _UNITS[unit] == 0:
            return f"{whole // _UNITS[unit]}{unit}"
    return f"{whole}s"


NEVER_MS = 253402300799999  # 9999-12-31T23:59:59.999Z: the end of a grace that never ends


def grace_end_ms(at_ms: int, grace_s: float) -> int:
    """When a grace of ``grace_s`` from ``at_ms`` ends (a retirement's, ``lifecycle/retirement.py``
    and the quick path's): never (``NEVER_MS``) for an infinite grace, a record that could not be
    read, or an end no timestamp can say; at ``at_ms`` itself for a negative grace (an older
    record's: no grace at all, and a timestamp that prints)."""
    if not math.isfinite(grace_s):
        return NEVER_MS
    span = grace_s * 1000  # inf for a finite grace past ~1.8e305 s: no int() of it
    if not math.isfinite(span):
        return NEVER_MS if span > 0 else at_ms
    return max(min(at_ms + int(span), NEVER_MS), at_ms)
