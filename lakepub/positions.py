"""Position vectors: one offset per source partition, never a single max.

A vector is a mapping ``{partition: offset}``; a partition absent from a vector is at offset 0.
Vectors are kept per source name: ``{source: {partition: offset}}``.

Source and partition names are also folder names (``landing/<source>/<partition>/``), so both
must match ``NAME``: letters, digits, ``_``, ``.`` and ``-``, not starting with ``.`` or ``-``
(hidden folders are a producer's temp folders; ``..`` would leave the landing folder).
"""

from __future__ import annotations

import json
import re
from typing import Mapping

from lakepub.errors import InvalidPosition

Vector = dict[str, int]
NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")
NAME_RULE = "letters, digits, '_', '.', '-', not starting with '.' or '-', at most 128 characters"


def valid_name(name: object) -> bool:
    return isinstance(name, str) and NAME.fullmatch(name) is not None


def check_name(name: object, what: str) -> str:
    """``name`` if it is a valid source or partition name, else InvalidPosition naming ``what``."""
    if not valid_name(name):
        raise InvalidPosition(f"{what} name {name!r} is not valid: use {NAME_RULE}")
    return name  # type: ignore[return-value]


def parse_vector(text: str | Mapping[str, int], what: str = "position") -> Vector:
    """Parse a JSON object (or mapping) of partition -> non-negative int offset."""
    if isinstance(text, str):
        try:
            raw = json.loads(text)
        except json.JSONDecodeError as exc:
            raise InvalidPosition(f"{what} vector is not valid JSON: {text!r} ({exc.msg})") from None
        except ValueError:  # Python's limit on integer literals (4300 digits), not an offset anyway
            raise InvalidPosition(f"{what} vector holds an integer of more than 4300 digits, which is no "
                                  f"offset: {text[:40]!r}...") from None
    else:
        raw = dict(text)
    if not isinstance(raw, dict):
        raise InvalidPosition(f"{what} vector must be a JSON object like {{\"p0\": 4}}, got {text!r}")
    vector: Vector = {}
    for key, value in raw.items():
        check_name(key, f"{what} vector partition")
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise InvalidPosition(f"{what} vector offset for partition '{key}' must be an int >= 0, got {value!r}")
        vector[key] = value
    return vector


def normalize(vector: Mapping[str, int]) -> Vector:
    """Drop zero offsets so that equal positions compare equal."""
    return {k: int(v) for k, v in sorted(vector.items()) if v}


def same_position(a: Mapping[str, int], b: Mapping[str, int]) -> bool:
    return normalize(a) == normalize(b)


def check_range(start: Vector, end: Vector) -> int:
    """Validate that ``end`` does not go back from ``start``; return the number of records covered."""
    total = 0
    for part in sorted(set(start) | set(end)):
        lo, hi = start.get(part, 0), end.get(part, 0)
        if hi < lo:
            raise InvalidPosition(f"end offset {hi} of partition '{part}' is before its start offset {lo}")
        total += hi - lo
    return total


def advance(positions: Mapping[str, Mapping[str, int]], source: str, end: Vector) -> dict[str, Vector]:
    """Return the full per-source positions with ``source`` moved to ``end``."""
    out = {s: normalize(v) for s, v in positions.items()}
    merged = dict(out.get(source, {}))
    merged.update(end)
    out[source] = normalize(merged)
    return dict(sorted(out.items()))


def dumps(value: object) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))
