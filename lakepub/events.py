"""Full-state entity events: the input schema, readers and validation.

An event is the whole state of one order at a version assigned by the source::

    {"order_id": "A", "version": 2, "day": "2025-10-02", "cents": 150, "deleted": false}

``day`` and ``cents`` may be null only when ``deleted`` is true; ``day`` lies in years 1..9998
(the partition ranges of year 9999 would end in year 10000, which no date type holds), and
``order_id`` is valid UTF-8. Reading is vectorised with pyarrow; when a file fails the fast path
it is re-read line by line (row by row for Parquet) to name the exact file, line and field of the
first bad event, so bad input always yields one precise error.

Columns of an Arrow or Parquet input are converted only where the conversion is lossless in kind:
any integer -> int64 (values must fit), date64 -> date (midnights), ``YYYY-MM-DD`` strings -> date
(as for JSON Lines), large/view strings and UTF-8 binary -> string, and an all-null column to
any type. Everything else (a timestamp for ``day``, an int for ``deleted``, a string for
``version``, ...) is refused with the type found and the type expected.

``-`` reads standard input; a pipe such as ``/dev/stdin`` is read whole first, since neither
reader can seek in it. Parquet is recognised by its suffix or, without a file name, its magic.
"""

from __future__ import annotations

import io
import json
import re
import sys
from datetime import date
from pathlib import Path
from typing import Any, BinaryIO, Callable, Iterable

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
MIN_DAY, MAX_DAY = date(1, 1, 1), date(9998, 12, 31)
_DAY_RANGE = f"an ISO date YYYY-MM-DD from {MIN_DAY} to {MAX_DAY}"
_EXPECTED = {"order_id": "string", "version": "integer", "day": "date", "cents": "integer", "deleted": "bool"}
_JSON_SCHEMA = pa.schema([(f.name, pa.string() if f.name == "day" else f.type) for f in EVENT_SCHEMA])
_JSON_OPTIONS = pj.ParseOptions(explicit_schema=_JSON_SCHEMA, unexpected_field_behavior="ignore")
_ISO_DAY = re.compile(r"^\d{4}-\d{2}-\d{2}$", re.ASCII)
_INT64_MAX = 2**63 - 1
_PARQUET_SUFFIXES = (".parquet", ".pq")


def empty_events() -> pa.Table:
    return EVENT_SCHEMA.empty_table()


def read_events(path: Path | str) -> pa.Table:
    """Read and validate a JSON Lines (``.jsonl``/``.json``/``.ndjson``) or Parquet file of events;
    ``-`` is standard input."""
    if str(path) == "-":
        return events_from_bytes(sys.stdin.buffer.read(), "<stdin>")
    path = Path(path)
    if not path.exists():
        raise InvalidEvent(str(path), "-", "file does not exist")
    if path.is_dir():
        raise InvalidEvent(str(path), "-", "is a folder, not an events file")
    parquet = path.suffix.lower() in _PARQUET_SUFFIXES
    if not path.is_file():  # a pipe (/dev/stdin), FIFO or device: read it whole, then parse
        return events_from_bytes(path.read_bytes(), str(path), parquet=parquet or None)
    if parquet:
        return read_parquet_events(path)
    return read_jsonl_events(path)


def events_from_bytes(data: bytes, where: str, *, parquet: bool | None = None) -> pa.Table:
    """Events from a whole file's bytes; ``parquet=None`` decides by the Parquet magic number."""
    if parquet is None:
        parquet = data[:4] == b"PAR1"
    return read_parquet_events(data, where) if parquet else read_jsonl_events(data, where)


def read_jsonl_events(source: Path | bytes, where: str | None = None) -> pa.Table:
    """Read a JSONL file (or its bytes) of events; blank lines are skipped and do not count as records."""
    where = where or str(source)
    try:
        raw = pj.read_json(pa.BufferReader(source) if isinstance(source, bytes) else source,
                           parse_options=_JSON_OPTIONS)
        return _finish(raw)
    except (pa.ArrowInvalid, _Invalid):
        pass
    with _open(source) as fh:
        if not _locate_jsonl_error(fh, where):
            return empty_events()  # nothing but blank lines: the reader calls that an error
    raise InvalidEvent(where, "-", "could not be parsed as JSON Lines events")


def read_parquet_events(source: Path | bytes, where: str | None = None) -> pa.Table:
    where = where or str(source)
    try:
        raw = pq.read_table(pa.BufferReader(source) if isinstance(source, bytes) else source)
    except (pa.ArrowInvalid, OSError) as exc:
        raise InvalidEvent(where, "-", f"is not a readable Parquet file ({' '.join(str(exc).split())})") from None
    return events_from_arrow(raw, where)


def events_from_arrow(raw: pa.Table, where: str = "<arrow table>") -> pa.Table:
    """Validate an Arrow table of events (vectorised) and return it in the canonical schema.

    Columns are converted only where that is lossless in kind (see the module docstring); errors
    name the 1-based row of the first bad value and its field.
    """
    columns = {}
    for field in EVENT_SCHEMA:
        if field.name not in raw.column_names:
            raise InvalidEvent(where, field.name, "is missing")
        columns[field.name] = _conform(raw.column(field.name), field, where)
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
    if not _is_utf8(oid):
        return "order_id", f"is not valid UTF-8 text, got {oid!r}"
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
        return "day", f"must be {_DAY_RANGE}, got {day!r}"
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
    if pc.any(pc.not_equal(pc.binary_length(raw.column("day")), 10)).as_py():
        raise _Invalid()
    try:
        return events_from_arrow(raw)
    except InvalidEvent:
        raise _Invalid() from None


# --- column conversions (lossless in kind only) -----------------------------------------------


def _conform(col: pa.ChunkedArray, field: pa.Field, where: str) -> pa.ChunkedArray:
    """``col`` as ``field.type``, or InvalidEvent naming the first row that stands in the way."""
    kind = col.type
    if pa.types.is_dictionary(kind):
        col, kind = pc.cast(col, kind.value_type), kind.value_type
    target = field.type
    if kind == target:
        if target == pa.string():
            _check_utf8(col, field.name, where)
        return col
    if pa.types.is_null(kind):
        return pc.cast(col, target)
    if target == pa.string() and (pa.types.is_string(kind) or pa.types.is_large_string(kind)
                                  or pa.types.is_binary(kind) or pa.types.is_large_binary(kind)
                                  or kind in (pa.string_view(), pa.binary_view())):
        return _cast_or_locate(col, target, field.name, where, lambda v: v is None or _utf8(v),
                               "is not valid UTF-8 text")
    if target == pa.int64() and pa.types.is_integer(kind):
        return _cast_or_locate(col, target, field.name, where, lambda v: v is None or v <= _INT64_MAX,
                               "does not fit a 64-bit integer")
    if target == pa.date32() and pa.types.is_date64(kind):
        return _cast_or_locate(col, target, field.name, where, lambda v: v is None or v % 86_400_000 == 0,
                               "is not a whole day (milliseconds since 1970)")
    if target == pa.date32() and (pa.types.is_string(kind) or pa.types.is_large_string(kind)):
        return _cast_or_locate(col, target, field.name, where, lambda v: v is None or _as_date(_text(v)) is not None,
                               f"must be {_DAY_RANGE}", show=_text)
    row, value = _first_value(col)
    raise InvalidEvent(f"{where} row {row + 1}", field.name,
                       f"has type {kind}, expected {_EXPECTED[field.name]} (value {value!r})")


def _cast_or_locate(col: pa.ChunkedArray, target: pa.DataType, name: str, where: str,
                    ok: Callable[[Any], bool], problem: str, show: Callable[[Any], Any] = lambda v: v,
                    ) -> pa.ChunkedArray:
    try:
        out = pc.cast(col, target)
        if target == pa.string():
            _check_utf8(out, name, where)
        return out
    except pa.ArrowInvalid:
        pass
    for row, value in enumerate(_py_values(col)):
        if not ok(value):
            raise InvalidEvent(f"{where} row {row + 1}", name, f"{problem}, got {show(value)!r}")
    raise InvalidEvent(where, name, f"cannot be read as {_EXPECTED[name]}")


def _check_utf8(col: pa.ChunkedArray, name: str, where: str) -> None:
    """Arrow's JSON and Parquet readers take string bytes as they are: validate them (~1 ms/100k)."""
    try:
        col.validate(full=True)
    except pa.ArrowInvalid:
        for row, value in enumerate(_py_values(col)):
            if isinstance(value, bytes) and not _utf8(value):
                raise InvalidEvent(f"{where} row {row + 1}", name, f"is not valid UTF-8 text, got {value!r}") from None
        raise InvalidEvent(where, name, "is not a valid string column") from None


def _py_values(col: pa.ChunkedArray) -> Iterable[Any]:
    """Python values of a column, string bytes undecoded and date64 as its milliseconds (only on
    the error path)."""
    for chunk in col.chunks:
        if pa.types.is_string(chunk.type) or pa.types.is_large_string(chunk.type):
            chunk = chunk.view(pa.binary() if pa.types.is_string(chunk.type) else pa.large_binary())
        elif pa.types.is_date64(chunk.type):
            chunk = chunk.view(pa.int64())
        yield from chunk.to_pylist()


def _text(value: bytes) -> str:
    return value.decode("utf-8", errors="replace")


def _first_value(col: pa.ChunkedArray) -> tuple[int, Any]:
    valid = pc.indices_nonzero(pc.is_valid(col)) if len(col) else pa.array([], pa.uint64())
    row = valid[0].as_py() if len(valid) else 0
    return row, (col[row].as_py() if len(col) else None)


def _first_invalid_row(table: pa.Table) -> tuple[int, str, str] | None:
    """Vectorised checks; return (row, field, problem) of the first failing row, if any."""
    deleted = table.column("deleted")
    live = pc.invert(pc.fill_null(deleted, True))
    day = table.column("day")
    out_of_range = pc.or_(pc.less(day, pa.scalar(MIN_DAY, pa.date32())), pc.greater(day, pa.scalar(MAX_DAY, pa.date32())))
    checks = [  # (field, mask, problem, whether to show the value)
        ("order_id", pc.invert(pc.fill_null(pc.greater(pc.binary_length(table["order_id"]), 0), False)),
         "must be a non-empty string", False),
        ("version", pc.fill_null(pc.less(table["version"], 1), True), "must be an integer >= 1", False),
        ("deleted", pc.is_null(deleted), "must be true or false", False),
        ("day", pc.and_(live, pc.is_null(day)), "is null but the event is not a delete", False),
        ("day", pc.fill_null(out_of_range, False), f"must be {_DAY_RANGE}", True),
        ("cents", pc.and_(live, pc.is_null(table["cents"])), "is null but the event is not a delete", False),
        ("cents", pc.fill_null(pc.less(table["cents"], 0), False), "must be an integer >= 0", False),
    ]
    first: tuple[int, str, str] | None = None
    for field, mask, problem, show in checks:
        hits = pc.indices_nonzero(mask)
        if len(hits):
            row = hits[0].as_py()
            if first is None or row < first[0]:
                # as text: a date outside Python's range (year 0) has no Python value
                value = table[field].slice(row, 1).cast(pa.string())[0].as_py() if show else None
                first = (row, field, f"{problem}, got {value}" if show else problem)
    return first


# --- the error path of JSON Lines -------------------------------------------------------------


def _open(source: Path | bytes) -> BinaryIO:
    return io.BytesIO(source) if isinstance(source, bytes) else open(source, "rb")


def _locate_jsonl_error(fh: BinaryIO, where: str) -> bool:
    """Re-read line by line and raise InvalidEvent for the first bad line; return whether any
    line holds a record (a file of blank lines holds 0 events)."""
    seen = False
    for lineno, raw in enumerate(fh, start=1):
        if not raw.strip():
            continue
        seen = True
        # Undecodable bytes survive as lone surrogates, so the field holding them can be named.
        line = raw.decode("utf-8", errors="surrogateescape")
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InvalidEvent(f"{where}:{lineno}", "-", f"is not valid JSON ({exc.msg})") from None
        problem = validate_record(record)
        if problem:
            raise InvalidEvent(f"{where}:{lineno}", *problem)
    return seen


def _utf8(value: bytes) -> bool:
    try:
        value.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


def _is_utf8(value: str) -> bool:
    try:
        value.encode("utf-8")
        return True
    except UnicodeEncodeError:
        return False


def _as_date(value: Any) -> date | None:
    if isinstance(value, date):
        return value if MIN_DAY <= value <= MAX_DAY else None
    if not isinstance(value, str) or not _ISO_DAY.match(value):
        return None
    try:
        day = date.fromisoformat(value)
    except ValueError:
        return None
    return day if day <= MAX_DAY else None
