"""Arrow columns converted to a declared type, only where the conversion is lossless in kind.

Accepted (everything else is refused naming the row of the first value, the type found and the
type expected):

* any integer -> ``int``/``long`` (each value must fit);
* ``float16``/``float32`` -> ``float``; any float -> ``double``;
* ``date64`` holding whole days -> ``date``; ``YYYY-MM-DD`` strings -> ``date``;
* large/view strings and UTF-8 binary -> ``string`` (string bytes are validated as UTF-8);
* a timestamp **with** a time zone, any unit -> ``timestamp`` (the same instant in UTC
  microseconds; nanoseconds only when whole microseconds); RFC 3339 strings with an offset ->
  ``timestamp`` (the JSON grammar of ``contract.values``). A timestamp without a time zone is a
  local time and is refused, as in JSON;
* a decimal of smaller or equal scale -> ``decimal(p,s)`` (each value must fit the precision);
* a dictionary column as its values; an all-null column to any type.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable

import pyarrow as pa
import pyarrow.compute as pc

from lakepub.contract import values as V
from lakepub.contract.model import FieldSpec
from lakepub.errors import InvalidEvent

_TS_US = pa.timestamp("us", tz="UTC")


def conform(col: pa.ChunkedArray, spec: FieldSpec, where: str) -> pa.ChunkedArray:
    """``col`` as the declared type, or InvalidEvent naming the first row that stands in the way."""
    kind = col.type
    if pa.types.is_dictionary(kind):
        col, kind = pc.cast(col, kind.value_type), kind.value_type
    found = kind
    if kind in (pa.string_view(), pa.binary_view()):  # as their plain forms: every kernel takes those
        kind = pa.string() if kind == pa.string_view() else pa.binary()
        col = pc.cast(col, kind)
    target = spec.type.arrow
    if kind == target:
        if target == pa.string():
            check_utf8(col, spec.name, where)
        return col
    if pa.types.is_null(kind):
        return pc.cast(col, target)
    name, declared = spec.name, spec.type.kind
    textual = pa.types.is_string(kind) or pa.types.is_large_string(kind)
    if declared == "string" and (textual or pa.types.is_binary(kind) or pa.types.is_large_binary(kind)):
        return _cast_or_locate(col, spec, where, lambda v: v is None or _utf8(v), "is not valid UTF-8 text")
    if declared in V.INT_RANGE and pa.types.is_integer(kind):
        low, high = V.INT_RANGE[declared]
        return _cast_or_locate(col, spec, where, lambda v: v is None or low <= v <= high,
                               f"does not fit a {32 if declared == 'int' else 64}-bit integer")
    if declared in ("float", "double") and pa.types.is_floating(kind) and (declared == "double"
                                                                           or kind != pa.float64()):
        return pc.cast(col, target)
    if declared == "date" and pa.types.is_date64(kind):
        return _cast_or_locate(col, spec, where, lambda v: v is None or v % 86_400_000 == 0,
                               "is not a whole day (milliseconds since 1970)")
    if declared == "date" and textual:
        return _cast_or_locate(col, spec, where, lambda v: v is None or V.as_date(_text(v)) is not None,
                               f"must be {V.DAY_RANGE}", show=_text)
    if declared == "timestamp" and pa.types.is_timestamp(kind) and kind.tz is not None:
        return _cast_or_locate(col, spec, where, None, "is not a whole microsecond within the range of a timestamp")
    if declared == "timestamp" and textual:
        return timestamps_from_text(col, spec, where)
    if (declared == "decimal" and (pa.types.is_decimal128(kind) or pa.types.is_decimal256(kind))
            and kind.scale <= spec.type.scale):
        return _cast_or_locate(col, spec, where, None, f"does not fit {spec.type}")
    row, value = _first_value(col)
    advice = ""
    if declared == "timestamp" and pa.types.is_timestamp(kind):
        advice = "; a timestamp without a time zone is a local time (ambiguous): write it with tz='UTC'"
    raise InvalidEvent(f"{where} row {row + 1}", name,
                       f"has type {found}, expected {V.expected(spec.type)} (value {value!r}){advice}")


def timestamps_from_text(col: pa.ChunkedArray, spec: FieldSpec, where: str) -> pa.ChunkedArray:
    """RFC 3339 strings with an offset as UTC microseconds (vectorised; precise on failure)."""
    try:
        ok = pc.match_substring_regex(col, V.TIMESTAMP_FAST_PATTERN)
        if pc.all(pc.fill_null(ok, True)).as_py():
            text = pc.cast(col, pa.string())
            try:
                return pc.cast(text, _TS_US)
            except pa.ArrowInvalid:  # Arrow parses 6 fraction digits at most: drop the zeros after them
                return pc.cast(pc.replace_substring_regex(text, r"(\.\d{6})0{1,3}", r"\1"), _TS_US)
    except pa.ArrowInvalid:
        pass
    for row, value in enumerate(py_values(col)):
        if value is not None:
            try:
                V.timestamp_us(_text(value))
            except V.Bad as bad:
                raise InvalidEvent(f"{where} row {row + 1}", spec.name, str(bad)) from None
    raise InvalidEvent(where, spec.name, f"cannot be read as {V.expected(spec.type)}")  # pragma: no cover


def _cast_or_locate(col: pa.ChunkedArray, spec: FieldSpec, where: str, ok: Callable[[Any], bool] | None,
                    problem: str, show: Callable[[Any], Any] = lambda v: v) -> pa.ChunkedArray:
    """Cast (Arrow's safe cast refuses every loss); on failure, name the first failing row: by
    ``ok`` over its Python value, or (``ok=None``) by casting each value on its own."""
    target = spec.type.arrow
    try:
        out = pc.cast(col, target)
        if target == pa.string():
            check_utf8(out, spec.name, where)
        return out
    except pa.ArrowInvalid:
        pass
    if ok is None:
        for row, one in enumerate(_single_values(col)):
            try:
                pc.cast(one, target)
            except pa.ArrowInvalid:
                raise InvalidEvent(f"{where} row {row + 1}", spec.name, f"{problem}, got {_display(one)}") from None
    else:
        for row, value in enumerate(py_values(col)):
            if not ok(value):
                raise InvalidEvent(f"{where} row {row + 1}", spec.name, f"{problem}, got {show(value)!r}")
    raise InvalidEvent(where, spec.name, f"cannot be read as {V.expected(spec.type)}")


def check_utf8(col: pa.ChunkedArray, name: str, where: str) -> None:
    """Arrow's JSON and Parquet readers take string bytes as they are: validate them (~1 ms/100k)."""
    try:
        col.validate(full=True)
    except pa.ArrowInvalid:
        for row, value in enumerate(py_values(col)):
            if isinstance(value, bytes) and not _utf8(value):
                raise InvalidEvent(f"{where} row {row + 1}", name, f"is not valid UTF-8 text, got {value!r}") from None
        raise InvalidEvent(where, name, "is not a valid string column") from None


def py_values(col: pa.ChunkedArray) -> Iterable[Any]:
    """Python values of a column, string bytes undecoded and date64 as its milliseconds (only on
    the error path)."""
    for chunk in col.chunks:
        if pa.types.is_string(chunk.type) or pa.types.is_large_string(chunk.type):
            chunk = chunk.view(pa.binary() if pa.types.is_string(chunk.type) else pa.large_binary())
        elif pa.types.is_date64(chunk.type):
            chunk = chunk.view(pa.int64())
        yield from chunk.to_pylist()


def _single_values(col: pa.ChunkedArray) -> Iterable[pa.Array]:
    for chunk in col.chunks:
        for i in range(len(chunk)):
            yield chunk.slice(i, 1)


def _display(one: pa.Array) -> str:
    """One value as text (a timestamp or decimal outside Python's range has no Python value)."""
    try:
        return str(pc.cast(one, pa.string())[0].as_py())
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return repr(one.to_pylist()[0])


def _text(value: bytes) -> str:
    return value.decode("utf-8", errors="replace")


def _first_value(col: pa.ChunkedArray) -> tuple[int, Any]:
    valid = pc.indices_nonzero(pc.is_valid(col)) if len(col) else pa.array([], pa.uint64())
    row = valid[0].as_py() if len(valid) else 0
    if not len(col):
        return row, None
    try:
        return row, col[row].as_py()
    except (ValueError, OverflowError):
        return row, _display(col.slice(row, 1).combine_chunks())


def _utf8(value: bytes) -> bool:
    try:
        value.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False
