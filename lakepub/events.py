"""Order events: the original orders contract over ``lakepub.contract.validate``.

An event is the whole state of one order at a version assigned by the source::

    {"order_id": "A", "version": 2, "day": "2025-10-02", "cents": 150, "deleted": false}

``day`` and ``cents`` may be null only when ``deleted`` is true; ``day`` lies in years 1..9998
(the partition ranges of year 9999 would end in year 10000, which no date type holds), and
``order_id`` is a non-empty, valid UTF-8 string; ``cents >= 0``. Reading is vectorised with
pyarrow; when a file fails the fast path it is re-read line by line (row by row for Parquet) to
name the exact file, line and field of the first bad event, so bad input always yields one
precise error.

Columns of an Arrow or Parquet input are converted only where the conversion is lossless in kind:
any integer -> int64 (values must fit), date64 -> date (midnights), ``YYYY-MM-DD`` strings -> date
(as for JSON Lines), large/view strings and UTF-8 binary -> string, and an all-null column to
any type. Everything else (a timestamp for ``day``, an int for ``deleted``, a string for
``version``, ...) is refused with the type found and the type expected.

These functions keep the behaviour they had before contracts, which includes **dropping input
fields the orders contract does not declare**: the orders contract is in the original format
(no ``entity:``), whose default is ``extra_fields: ignore``.

``-`` reads standard input; a pipe such as ``/dev/stdin`` is read whole first, since neither
reader can seek in it. Parquet is recognised by its suffix or, without a file name, its magic.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable

import pyarrow as pa

from lakepub.contract import validate as _v
from lakepub.contract.orders import ORDERS_CONTRACT
from lakepub.contract.values import MAX_DAY, MIN_DAY

ORDERS_INPUT = ORDERS_CONTRACT  # the original contract format drops undeclared input fields
EVENT_SCHEMA = ORDERS_CONTRACT.arrow_schema
FIELDS = tuple(EVENT_SCHEMA.names)
__all__ = ["EVENT_SCHEMA", "FIELDS", "MAX_DAY", "MIN_DAY", "ORDERS_CONTRACT", "ORDERS_INPUT", "empty_events",
           "events_from_arrow", "events_from_bytes", "events_from_records", "read_events", "read_jsonl_events",
           "read_parquet_events", "validate_record"]


def empty_events() -> pa.Table:
    return EVENT_SCHEMA.empty_table()


def read_events(path: Path | str) -> pa.Table:
    """Read and validate a JSON Lines (``.jsonl``/``.json``/``.ndjson``) or Parquet file of events;
    ``-`` is standard input."""
    return _v.read_events(path, ORDERS_INPUT)


def events_from_bytes(data: bytes, where: str, *, parquet: bool | None = None) -> pa.Table:
    """Events from a whole file's bytes; ``parquet=None`` decides by the Parquet magic number."""
    return _v.events_from_bytes(data, ORDERS_INPUT, where, parquet=parquet)


def read_jsonl_events(source: Path | bytes, where: str | None = None) -> pa.Table:
    """Read a JSONL file (or its bytes) of events; blank lines are skipped and do not count as records."""
    return _v.read_jsonl_events(source, ORDERS_INPUT, where)


def read_parquet_events(source: Path | bytes, where: str | None = None) -> pa.Table:
    return _v.read_parquet_events(source, ORDERS_INPUT, where)


def events_from_arrow(raw: pa.Table, where: str = "<arrow table>") -> pa.Table:
    """Validate an Arrow table of events (vectorised) and return it in the canonical schema.

    Columns are converted only where that is lossless in kind (see the module docstring); errors
    name the 1-based row of the first bad value and its field.
    """
    return _v.events_from_arrow(raw, ORDERS_INPUT, where)


def events_from_records(records: Iterable[dict[str, Any]], where: str = "<records>") -> pa.Table:
    """Validate python dicts (as parsed from JSON) and return the canonical events table."""
    return _v.events_from_records(records, ORDERS_INPUT, where)


def validate_record(record: Any) -> tuple[str, str] | None:
    """Return ``(field, problem)`` for the first problem of one parsed JSON record, else None."""
    return _v.validate_record(record, ORDERS_INPUT)
