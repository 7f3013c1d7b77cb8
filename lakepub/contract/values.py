"""One JSON value against its declared type: the per-record path of event validation.

The vectorised readers (``contract.validate``) never call this on valid input. It serves
``events_from_records`` (Python dicts as parsed from JSON) and the error path of JSON Lines, which
re-reads a failing file line by line to name the exact line and field; both must accept exactly
what the vectorised path accepts, so the grammars below are shared with it.

What a JSON event may hold, by declared type:

* ``string``: a string (valid UTF-8). ``int``/``long``: an integer within 32/64 bits (not
  ``1.0``, not ``true``). ``float``/``double``: a number, finite in the declared width (``float``
  rounds to the nearest 32-bit value, which is what declaring ``float`` means). ``boolean``:
  ``true``/``false``. ``date``: ``YYYY-MM-DD``, years 1..9998 (the partition ranges of year 9999
  would end in year 10000, which no date type holds).
* ``timestamp``: RFC 3339 text, ``YYYY-MM-DDTHH:MM:SS[.fraction](Z|+HH:MM|-HH:MM)`` (a space may
  replace the ``T``), converted to UTC microseconds; fraction digits beyond the 6th must be 0. **An
  explicit offset is required**: a timestamp without one is a local time whose instant depends on
  the producer's zone; reading it as UTC would shift it silently (and bake the shift into the
  batch digest), while a refusal is fixed once, at the producer, by writing ``Z``. The instant
  must lie in years 1..9998 UTC, as dates do.
* ``decimal(p,s)``: a JSON number or a string holding one (``"12.50"``; strings keep exactness
  through producers whose JSON numbers are binary floats), taken exactly as written: more
  non-zero fractional digits than ``s`` or more than ``p - s`` integer digits are refused, never
  rounded (``1.50000`` is exactly ``1.50`` and accepted). A Python float in a record is taken as
  its shortest text (``repr``), the number a JSON encoder would write.
* A field missing from a record is null (JSON producers commonly omit nulls); the nullability
  rules then decide (a key, the version or the deleted flag is never null; another field not
  declared ``nullable: true`` is null only on a delete).
"""

from __future__ import annotations

import math
import re
import struct
from datetime import date, datetime, timedelta
from decimal import Decimal, InvalidOperation, localcontext
from typing import Any

from lakepub.contract.types import FieldType

MIN_DAY, MAX_DAY = date(1, 1, 1), date(9998, 12, 31)
DAY_RANGE = f"an ISO date YYYY-MM-DD from {MIN_DAY} to {MAX_DAY}"
ISO_DAY = re.compile(r"^\d{4}-\d{2}-\d{2}$", re.ASCII)

# RFC 3339 with seconds; group 7 is the fraction, group 8 the offset (absent: a naive local time).
TIMESTAMP_PATTERN = r"^(\d{4})-(\d{2})-(\d{2})[T ](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?(Z|[+-]\d{2}:\d{2})?$"
_TIMESTAMP = re.compile(TIMESTAMP_PATTERN, re.ASCII)
# What the vectorised path hands to Arrow's parser: an offset, at most 6 significant fraction digits.
TIMESTAMP_FAST_PATTERN = r"^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(\.\d{1,6}0{0,3})?(Z|[+-]\d{2}:\d{2})$"
_EPOCH = datetime(1970, 1, 1)
MIN_TS_US = (datetime(1, 1, 1) - _EPOCH) // timedelta(microseconds=1)
MAX_TS_US = (datetime(9998, 12, 31, 23, 59, 59, 999999) - _EPOCH) // timedelta(microseconds=1)
TS_RANGE = "a timestamp from 0001-01-01T00:00:00Z to 9998-12-31T23:59:59.999999Z"
TS_FORMAT = "an RFC 3339 timestamp with seconds and an offset (e.g. 2025-01-02T03:04:05.123456Z or +02:00)"
NAIVE_TIMESTAMP = ("has no UTC offset (a local time is ambiguous): write it with Z or +HH:MM, "
                   "e.g. 2025-01-02T03:04:05Z")

INT_RANGE = {"int": (-(2**31), 2**31 - 1), "long": (-(2**63), 2**63 - 1)}
_DECIMAL_TEXT = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$", re.ASCII)
_FLOAT32_MAX = struct.unpack("<f", b"\xff\xff\x7f\x7f")[0]


def expected(ftype: FieldType) -> str:
    """The type as error messages name it ("has type large_binary, expected string")."""
    return {"long": "integer", "int": "32-bit integer", "boolean": "bool",
            "timestamp": "timestamp (UTC)"}.get(ftype.kind, ftype.name)


class Bad(Exception):
    """A value's problem, phrased to follow "field 'x' "."""


def show(value: Any) -> str:
    """A value in an error message: JSON numbers as written (Decimal text), others as repr."""
    return str(value) if isinstance(value, Decimal) else repr(value)


def convert(ftype: FieldType, value: Any, rule: str | None = None) -> Any:
    """The Python value to build the Arrow column from, or ``Bad``; ``value`` is not None.

    ``rule``: ``"version"`` (the entity's version, >= 1), or one of the original orders
    contract's own rules, ``"non-empty"`` (order_id) and ``"non-negative"`` (cents), kept with
    their messages for that contract only (contracts have no range constraints yet).
    """
    kind = ftype.kind
    if kind == "string":
        if not isinstance(value, str) or (rule == "non-empty" and not value):
            raise Bad(f"must be a {'non-empty ' if rule == 'non-empty' else ''}string, got {show(value)}")
        if not is_utf8(value):
            raise Bad(f"is not valid UTF-8 text, got {value!r}")
        return value
    if kind in INT_RANGE:
        low, high = INT_RANGE[kind]
        if rule == "version":
            if not _is_int(value) or not 1 <= value <= high:
                raise Bad(f"must be an integer >= 1, got {show(value)}" if kind == "long"
                          else f"must be an integer from 1 to {high}, got {show(value)}")
        elif rule == "non-negative":
            if not _is_int(value) or not 0 <= value <= high:
                raise Bad(f"must be an integer >= 0, got {show(value)}")
        elif not _is_int(value) or not low <= value <= high:
            raise Bad(f"must be a {32 if kind == 'int' else 64}-bit integer, got {show(value)}")
        return value
    if kind == "boolean":
        if not isinstance(value, bool):
            raise Bad(f"must be true or false, got {show(value)}")
        return value
    if kind in ("float", "double"):
        return _float(kind, value)
    if kind == "date":
        day = as_date(value) if isinstance(value, str) else None
        if day is None:
            raise Bad(f"must be {DAY_RANGE}, got {show(value)}")
        return day
    if kind == "timestamp":
        return timestamp_us(value)
    if kind == "decimal":
        return as_decimal(ftype, value)
    raise AssertionError(kind)  # pragma: no cover - FieldType is a closed list


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _float(kind: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, Decimal)):
        raise Bad(f"must be a number, got {show(value)}")
    try:
        number = float(value)
    except OverflowError:
        number = math.inf
    limit = _FLOAT32_MAX if kind == "float" else math.inf
    if not math.isfinite(number) or (kind == "float" and abs(_round32(number)) > limit):
        raise Bad(f"must be a finite number within the range of a {kind}, got {show(value)}")
    return number + 0.0  # -0.0 is 0.0: one value, one digest


def _round32(number: float) -> float:
    try:
        return struct.unpack("<f", struct.pack("<f", number))[0]
    except OverflowError:
        return math.inf


def as_date(value: Any) -> date | None:
    if isinstance(value, date) and not isinstance(value, datetime):
        return value if MIN_DAY <= value <= MAX_DAY else None
    if not isinstance(value, str) or not ISO_DAY.match(value):
        return None
    try:
        day = date.fromisoformat(value)
    except ValueError:
        return None
    return day if day <= MAX_DAY else None


def timestamp_us(value: Any) -> int:
    """Microseconds since 1970-01-01 UTC of an RFC 3339 string with an offset, or ``Bad``."""
    m = _TIMESTAMP.match(value) if isinstance(value, str) else None
    if m is None:
        raise Bad(f"must be {TS_FORMAT}, got {show(value)}")
    if m.group(8) is None:
        raise Bad(f"{NAIVE_TIMESTAMP}, got {value!r}")
    fraction = (m.group(7) or "").ljust(9, "0")
    if fraction[6:] != "000":
        raise Bad(f"has more than microsecond precision (digits after the 6th must be 0), got {value!r}")
    offset = m.group(8)
    try:
        local = datetime(*(int(m.group(i)) for i in range(1, 7)), int(fraction[:6]))
        minutes = 0 if offset == "Z" else int(offset[1:3]) * 60 + int(offset[4:6])
        if offset != "Z" and (int(offset[1:3]) > 23 or int(offset[4:6]) > 59):
            raise ValueError(offset)
    except ValueError:
        raise Bad(f"must be {TS_FORMAT}, got {value!r}") from None
    sign = -1 if offset.startswith("-") else 1
    us = (local - _EPOCH) // timedelta(microseconds=1) - sign * minutes * 60_000_000
    if not MIN_TS_US <= us <= MAX_TS_US:
        raise Bad(f"must be {TS_RANGE}, got {value!r}")
    return us


def as_decimal(ftype: FieldType, value: Any) -> Decimal:
    p, s = ftype.precision, ftype.scale
    assert p is not None and s is not None
    if isinstance(value, float):
        value = Decimal(repr(value))
    if _is_int(value):
        number = Decimal(value)
    elif isinstance(value, Decimal) or (isinstance(value, str) and _DECIMAL_TEXT.match(value)):
        try:
            number = Decimal(value)
        except InvalidOperation:  # pragma: no cover - the pattern admits only numbers
            number = Decimal("NaN")
    else:
        raise Bad(f"must be a {ftype} as a JSON number or a string holding one, got {show(value)}")
    if not number.is_finite():
        raise Bad(f"must be a finite {ftype}, got {show(value)}")
    with localcontext() as ctx:  # exact arithmetic: abs() and quantize() round to the context's precision
        ctx.prec = 200
        if number.copy_abs() >= Decimal(10) ** (p - s):
            raise Bad(f"does not fit {ftype} (at most {p - s} integer digits), got {show(value)}")
        exact = number.quantize(Decimal(1).scaleb(-s), rounding="ROUND_DOWN")
    if exact != number:
        raise Bad(f"has more than {s} fractional digits ({ftype} is never rounded), got {show(value)}")
    return exact


def decimal_bound(ftype: FieldType) -> Decimal:
    """The largest magnitude a ``decimal(p,s)`` holds: p-s nines, then s nines after the point."""
    assert ftype.precision is not None and ftype.scale is not None
    with localcontext() as ctx:
        ctx.prec = 200
        return Decimal(10) ** (ftype.precision - ftype.scale) - Decimal(1).scaleb(-ftype.scale)


def is_utf8(value: str) -> bool:
    try:
        value.encode("utf-8")
        return True
    except UnicodeEncodeError:
        return False
