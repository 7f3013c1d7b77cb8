"""Full-state entity events: the input schema, readers and validation.

An event is the whole state of one order at a version assigned by the source::

    {"order_id": "A", "version": 2, "day": "2025-10-02", "cents": 150, "deleted": false}

``day`` and ``cents`` may be null only when ``deleted`` is true. Reading is vectorised with
pyarrow; when a file fails the fast path it is re-read line by line to name the exact file,
line and field of the first bad event, so bad input always yields one precise error.
"""

from __future__ import annotations

import json
import re
from datetime import date
from pathlib import Path
from typing import Any, Iterable

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj
import pyarrow.parquet as pq

from lakepub.errors import InvalidEvent

EVENT_SCHEMA = pa.schema(
    [
        pa.field("order_id", pa.string(), nullable=False),
        pa.field("version", pa.int64(), nullable=False),
        pa.field("day", pa.date32()),
        pa.field("cents", pa.int64()),
        pa.field("deleted", pa.bool_(), nullable=False),
    ]
)
FIELDS = tuple(EVENT_SCHEMA.names)
_JSON_SCHEMA = pa.schema([(f.name, pa.string() if f.name == "day" else f.type) for f in EVENT_SCHEMA])
_JSON_OPTIONS = pj.ParseOptions(explicit_schema=_JSON_SCHEMA, unexpected_field_behavior="ignore")
_ISO_DAY = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_INT64_MAX = 2**63 - 1


def empty_events() -> pa.Table:
    return EVENT_SCHEMA.empty_table()


def read_events(path: Path) -> pa.Table:
    """Read and validate a JSON Lines (``.jsonl``/``.json``/``.ndjson``) or Parquet file of events."""
    path = Path(path)
    if not path.exists():
        raise InvalidEvent(str(path), "-", "file does not exist")
    if path.suffix.lower() in (".parquet", ".pq"):
        return read_parquet_events(path)
    return read_jsonl_events(path)


def read_jsonl_events(path: Path) -> pa.Table:
    """Read a JSONL file of events (blank lines are skipped and do not count as records)."""
    try:
        raw = pj.read_json(path, parse_options=_JSON_OPTIONS)
        table = _finish(raw)
    except (pa.ArrowInvalid, _Invalid):
        _locate_jsonl_error(path)
        raise InvalidEvent(str(path), "-", "could not be parsed as JSON Lines events") from None
    return table


def read_parquet_events(path: Path) -> pa.Table:
    try:
        raw = pq.read_table(path)
    except (pa.ArrowInvalid, OSError) as exc:
        raise InvalidEvent(str(path), "-", f"is not a readable Parquet file ({exc})") from None
    return events_from_arrow(raw, str(path))


def events_from_arrow(raw: pa.Table, where: str = "<arrow table>") -> pa.Table:
    """Validate an Arrow table of events (vectorised) and return it in the canonical schema.

    Columns are cast to the event schema when the cast is lossless in kind (int32 -> int64,
    ISO date strings -> date); errors name the column, or the 1-based row of the first bad value.
    """
    columns = {}
    for field in EVENT_SCHEMA:
        if field.name not in raw.column_names:
            raise InvalidEvent(where, field.name, "is missing")
        col = raw.column(field.name)
        try:
            columns[field.name] = col if col.type == field.type else pc.cast(col, field.type)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            raise InvalidEvent(where, field.name, f"has type {col.type}, expected {field.type}") from None
    table = pa.table(columns)
    bad = _first_invalid_row(table)
    if bad is not None:
        row, field, problem = bad
        raise InvalidEvent(f"{where} row {row + 1}", field, problem)
    return table.cast(EVENT_SCHEMA)


def events_from_records(records: Iterable[dict[str, Any]], where: str = "<records>") -> pa.Table:
    """Validate python dicts (as parsed from JSON) and return the canonical events table."""
    rows = list(records)
    for index, record in enumerate(rows):
        problem = validate_record(record)
        if problem:
            raise InvalidEvent(f"{where} record {index + 1}", *problem)
    return pa.Table.from_pylist(
        [{**{k: r.get(k) for k in FIELDS}, "day": _as_date(r.get("day"))} for r in rows], schema=EVENT_SCHEMA
    )


def validate_record(record: Any) -> tuple[str, str] | None:
    """Return ``(field, problem)`` for the first problem of one parsed JSON record, else None."""
    if not isinstance(record, dict):
        return "-", "record is not a JSON object"
    oid = record.get("order_id")
    if not isinstance(oid, str) or not oid:
        return "order_id", f"must be a non-empty string, got {oid!r}"
    version = record.get("version")
    if isinstance(version, bool) or not isinstance(version, int) or not 1 <= version <= _INT64_MAX:
        return "version", f"must be an integer >= 1, got {version!r}"
    deleted = record.get("deleted")
    if not isinstance(deleted, bool):
        return "deleted", f"must be true or false, got {deleted!r}"
    day = record.get("day")
    if day is None:
        if not deleted:
            return "day", "is null but the event is not a delete"
    elif not isinstance(day, str) or _as_date(day) is None:
        return "day", f"must be an ISO date YYYY-MM-DD, got {day!r}"
    cents = record.get("cents")
    if cents is None:
        if not deleted:
            return "cents", "is null but the event is not a delete"
    elif isinstance(cents, bool) or not isinstance(cents, int) or not 0 <= cents <= _INT64_MAX:
        return "cents", f"must be an integer >= 0, got {cents!r}"
    return None


class _Invalid(Exception):
    pass


def _finish(raw: pa.Table) -> pa.Table:
    """The fast path's checks; any failure sends the caller to the line-by-line locator."""
    if pc.any(pc.not_equal(pc.utf8_length(raw.column("day")), 10)).as_py():
        raise _Invalid()
    try:
        return events_from_arrow(raw)
    except InvalidEvent:
        raise _Invalid() from None


def _first_invalid_row(table: pa.Table) -> tuple[int, str, str] | None:
    """Vectorised checks; return (row, field, problem) of the first failing row, if any."""
    deleted = table.column("deleted")
    live = pc.invert(pc.fill_null(deleted, True))
    checks = [
        ("order_id", pc.or_(pc.is_null(table["order_id"]), pc.equal(pc.utf8_length(table["order_id"]), 0)),
         "must be a non-empty string"),
        ("version", pc.fill_null(pc.less(table["version"], 1), True), "must be an integer >= 1"),
        ("deleted", pc.is_null(deleted), "must be true or false"),
        ("day", pc.and_(live, pc.is_null(table["day"])), "is null but the event is not a delete"),
        ("cents", pc.and_(live, pc.is_null(table["cents"])), "is null but the event is not a delete"),
        ("cents", pc.fill_null(pc.less(table["cents"], 0), False), "must be an integer >= 0"),
    ]
    first: tuple[int, str, str] | None = None
    for field, mask, problem in checks:
        hits = pc.indices_nonzero(mask)
        if len(hits):
            row = hits[0].as_py()
            if first is None or row < first[0]:
                first = (row, field, problem)
    return first


def _locate_jsonl_error(path: Path) -> None:
    """Re-read line by line and raise InvalidEvent for the first bad line."""
    with open(path, encoding="utf-8", errors="strict") as fh:
        try:
            for lineno, line in enumerate(fh, start=1):
                if not line.strip():
                    continue
                try:
                    record = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise InvalidEvent(f"{path}:{lineno}", "-", f"is not valid JSON ({exc.msg})") from None
                problem = validate_record(record)
                if problem:
                    raise InvalidEvent(f"{path}:{lineno}", *problem)
        except UnicodeDecodeError:
            raise InvalidEvent(str(path), "-", "is not UTF-8 text") from None


def _as_date(value: Any) -> date | None:
    if isinstance(value, date):
        return value
    if not isinstance(value, str) or not _ISO_DAY.match(value):
        return None
    try:
        return date.fromisoformat(value)
    except ValueError:
        return None
