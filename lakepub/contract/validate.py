"""Events validated against a contract: readers (JSON Lines, Parquet, Arrow, Python records).

Every reader returns a table with exactly ``contract.arrow_schema`` or raises one
``InvalidEvent`` naming the file, the line (JSON Lines), row (Parquet/Arrow) or record, and the
field. Valid input is read and checked vectorised with pyarrow; a JSON Lines file that fails that
path is re-read line by line (``contract.values``) to name its first bad line.

The rules, for every contract:

* the key fields, the version and the deleted flag are never null; the version is >= 1;
* a field not declared ``nullable: true`` may be null only on an event whose deleted flag is true
  (a contract without a deleted flag: never null);
* values: what ``contract.values`` (JSON) and ``contract.conform`` (Arrow/Parquet types) accept;
  dates and timestamps lie in years 1..9998; floats are finite (``-0.0`` is stored as ``0.0``);
* **an input field the contract does not declare is refused** (naming it and, for JSON Lines,
  the first line holding it) unless the contract says ``extra_fields: ignore`` (then dropped);
* **a missing field**: in JSON (a key absent from a record) it is null, since JSON producers
  commonly omit nulls, and the null rules above then decide. In Parquet/Arrow (a missing
  column, which a typed file does not omit by accident of serialisation) it is refused unless the
  field is declared ``nullable: true``, when it is null on every row.

The original orders contract (``Contract.is_orders_v1``) keeps its two range rules, ``order_id``
non-empty and ``cents >= 0``, with their messages: contracts have no range constraints yet (they
arrive with the contracts issue), so these live here, for that contract only.

``-`` reads standard input; a pipe such as ``/dev/stdin`` is read whole first, since neither
reader can seek in it. Parquet is recognised by its suffix or, without a file name, its magic.
"""

from __future__ import annotations

import io
import json
import os
import sys
from dataclasses import dataclass
from decimal import Decimal
from functools import lru_cache
from pathlib import Path
from typing import Any, BinaryIO, Iterable

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj
import pyarrow.parquet as pq

from lakepub.contract import values as V
from lakepub.contract.conform import conform, timestamps_from_text
from lakepub.contract.model import Contract, FieldSpec
from lakepub.errors import InvalidEvent

_PARQUET_SUFFIXES = (".parquet", ".pq")


@dataclass(frozen=True)
class _Plan:
    """What validation needs of a contract, computed once per contract."""

    contract: Contract
    checks: tuple[FieldSpec, ...]  # key fields, version, deleted flag, then the others as declared
    rules: dict[str, str]  # field -> values.convert rule
    declared: frozenset[str]
    json_options: pj.ParseOptions
    parse_float: Any

    @property
    def deleted(self) -> str | None:
        return self.contract.entity.deleted

    def role(self, name: str) -> str | None:
        entity = self.contract.entity
        if name in entity.key:
            return "key"
        return "version" if name == entity.version else "deleted" if name == entity.deleted else None


@lru_cache(maxsize=64)
def _plan(contract: Contract) -> _Plan:
    entity = contract.entity
    first = [*entity.key, entity.version, *([entity.deleted] if entity.deleted else [])]
    checks = tuple(contract.field(n) for n in first) + tuple(f for f in contract.fields if f.name not in first)
    rules = {entity.version: "version"}
    if contract.is_orders_v1:
        rules.update({"order_id": "non-empty", "cents": "non-negative"})
    json_schema = pa.schema([(f.name, pa.string() if f.type.kind in ("date", "timestamp") else f.type.arrow)
                             for f in contract.fields])
    behaviour = "ignore" if contract.extra_fields == "ignore" else "error"
    options = pj.ParseOptions(explicit_schema=json_schema, unexpected_field_behavior=behaviour)
    has_decimal = any(f.type.kind == "decimal" for f in contract.fields)
    return _Plan(contract, checks, rules, frozenset(contract.names), options, Decimal if has_decimal else None)


def empty_events(contract: Contract) -> pa.Table:
    return contract.arrow_schema.empty_table()


def read_events(path: Path | str, contract: Contract) -> pa.Table:
    """Read and validate a JSON Lines (``.jsonl``/``.json``/``.ndjson``) or Parquet file of events;
    ``-`` is standard input."""
    if str(path) == "-":
        return events_from_bytes(sys.stdin.buffer.read(), contract, "<stdin>")
    path = Path(path)
    if not path.exists():
        raise InvalidEvent(str(path), "-", "file does not exist")
    if path.is_dir():
        raise InvalidEvent(str(path), "-", "is a folder, not an events file")
    parquet = path.suffix.lower() in _PARQUET_SUFFIXES
    if not path.is_file():  # a pipe (/dev/stdin), FIFO or device: read it whole, then parse
        return events_from_bytes(path.read_bytes(), contract, str(path), parquet=parquet or None)
    if parquet:
        return read_parquet_events(path, contract)
    return read_jsonl_events(path, contract)


def events_from_bytes(data: bytes, contract: Contract, where: str, *, parquet: bool | None = None) -> pa.Table:
    """Events from a whole file's bytes; ``parquet=None`` decides by the Parquet magic number."""
    if parquet is None:
        parquet = data[:4] == b"PAR1"
    return read_parquet_events(data, contract, where) if parquet else read_jsonl_events(data, contract, where)


def read_jsonl_events(source: Path | bytes, contract: Contract, where: str | None = None, *,
                      use_threads: bool = True) -> pa.Table:
    """Read a JSONL file (or its bytes) of events; blank lines are skipped and do not count as records.
    ``use_threads=False``: parse on the calling thread only (``LandingSource.prefetch``)."""
    where = where or str(source)
    plan = _plan(contract)
    try:
        raw = pj.read_json(pa.BufferReader(source) if isinstance(source, bytes) else source,
                           parse_options=plan.json_options, read_options=pj.ReadOptions(use_threads=use_threads))
        return _finish(raw, plan)
    except (pa.ArrowInvalid, _Invalid):
        pass
    with _open(source) as fh:
        longest = _locate_jsonl_error(fh, where, plan)
    if longest is None:
        return empty_events(contract)  # nothing but blank lines: the reader calls that an error
    try:  # every line is an event: one longer than Arrow's block (1 MiB) is what the reader refused
        raw = pj.read_json(pa.BufferReader(source) if isinstance(source, bytes) else source,
                           parse_options=plan.json_options,
                           read_options=pj.ReadOptions(use_threads=use_threads, block_size=max(2 * longest, 1 << 20)))
        return _finish(raw, plan)
    except (pa.ArrowInvalid, _Invalid):
        pass
    raise InvalidEvent(where, "-", "could not be parsed as JSON Lines events")


# A Parquet file of events this small is decoded on the calling thread. Arrow's threaded read of
# a 100k-event batch (1.1 MB, one row group) cost a new process 100-235 ms (65-170 ms of CPU:
# its CPU pool started, the columns decoded side by side) against 12-40 ms (11-14 ms of CPU) on
# one thread, and a warm one 48-120 ms against 10-38 ms (2-core VM, load 7-11, three fresh
# processes each; issue 16). Threads pay off on files of many row groups.
THREADED_PARQUET_FROM = 32 << 20


def read_parquet_events(source: Path | bytes, contract: Contract, where: str | None = None) -> pa.Table:
    where = where or str(source)
    try:
        size = len(source) if isinstance(source, bytes) else os.path.getsize(source)
        raw = pq.read_table(pa.BufferReader(source) if isinstance(source, bytes) else source,
                            use_threads=size >= THREADED_PARQUET_FROM)
    except (pa.ArrowInvalid, OSError) as exc:
        raise InvalidEvent(where, "-", f"is not a readable Parquet file ({' '.join(str(exc).split())})") from None
    return events_from_arrow(raw, contract, where)


def events_from_arrow(raw: pa.Table, contract: Contract, where: str = "<arrow table>") -> pa.Table:
    """Validate an Arrow table of events (vectorised) and return it in ``contract.arrow_schema``.

    Columns are converted only where that is lossless in kind (``contract.conform``); errors
    name the 1-based row of the first bad value and its field.
    """
    plan = _plan(contract)
    names = raw.column_names
    twice = [n for n in names if names.count(n) > 1 and (n in plan.declared or contract.extra_fields != "ignore")]
    if twice:
        raise InvalidEvent(where, twice[0], "is a column twice")
    if contract.extra_fields != "ignore":
        for name in names:
            if name not in plan.declared:
                raise InvalidEvent(where, name, _undeclared(contract))
    columns = {}
    for spec in contract.fields:
        if spec.name in names:
            columns[spec.name] = conform(raw.column(spec.name), spec, where)
        elif spec.nullable:
            columns[spec.name] = pa.nulls(raw.num_rows, spec.type.arrow)
        else:
            raise InvalidEvent(where, spec.name, "is missing")
    table = pa.table(columns)
    bad = _first_invalid_row(table, plan)
    if bad is not None:
        row, field, problem = bad
        raise InvalidEvent(f"{where} row {row + 1}", field, problem)
    for spec in contract.fields:  # -0.0 is 0.0: one value, one digest
        if spec.type.kind in ("float", "double"):
            col = table.column(spec.name)
            table = table.set_column(table.schema.get_field_index(spec.name), spec.name,
                                     pc.add(col, pa.scalar(0.0, col.type)))
    return table.cast(contract.arrow_schema)


def events_from_records(records: Iterable[dict[str, Any]], contract: Contract,
                        where: str = "<records>") -> pa.Table:
    """Validate Python dicts (as parsed from JSON; see ``contract.values`` for what each type
    takes) and return them in ``contract.arrow_schema``."""
    plan = _plan(contract)
    columns: list[list[Any]] = [[] for _ in plan.checks]
    for index, record in enumerate(records):
        try:
            for column, value in zip(columns, _convert_record(record, plan)):
                column.append(value)
        except _Bad as bad:
            raise InvalidEvent(f"{where} record {index + 1}", bad.field, bad.problem) from None
    arrays = {spec.name: _array(values, spec) for spec, values in zip(plan.checks, columns)}
    return pa.table({name: arrays[name] for name in contract.names}, schema=contract.arrow_schema)


def validate_record(record: Any, contract: Contract) -> tuple[str, str] | None:
    """Return ``(field, problem)`` for the first problem of one parsed JSON record, else None."""
    try:
        _convert_record(record, _plan(contract))
    except _Bad as bad:
        return bad.field, bad.problem
    return None


# --- one record (the records API and the error path of JSON Lines) ----------------------------


class _Bad(Exception):
    def __init__(self, field: str, problem: str):
        super().__init__(field, problem)
        self.field, self.problem = field, problem


def _convert_record(record: Any, plan: _Plan) -> list[Any]:
    """The record's values in ``plan.checks`` order, or ``_Bad`` for its first problem."""
    if not isinstance(record, dict):
        raise _Bad("-", "record is not a JSON object")
    contract = plan.contract
    if contract.extra_fields != "ignore":
        for name in record:
            if name not in plan.declared:
                raise _Bad(str(name), _undeclared(contract))
    out: list[Any] = []
    deleted = False
    for spec in plan.checks:
        value = record.get(spec.name)
        role = plan.role(spec.name)
        if value is None and role is None:
            if not spec.nullable and not deleted:
                raise _Bad(spec.name, _null_problem(plan))
            out.append(None)
            continue
        if value is None and role == "key" and spec.name not in plan.rules:
            raise _Bad(spec.name, "is null but is a key field (never null)")
        try:
            out.append(V.convert(spec.type, value, plan.rules.get(spec.name)))
        except V.Bad as bad:
            raise _Bad(spec.name, str(bad)) from None
        if role == "deleted":
            deleted = value
    return out


def _array(values: list[Any], spec: FieldSpec) -> pa.Array:
    if spec.type.kind == "timestamp":  # microseconds since 1970 UTC
        return pa.array(values, pa.int64()).view(spec.type.arrow)
    return pa.array(values, spec.type.arrow)


def _null_problem(plan: _Plan) -> str:
    if plan.deleted is None:
        return "is null but is not declared nullable (the contract has no deleted flag)"
    return "is null but the event is not a delete"


def _undeclared(contract: Contract) -> str:
    return (f"is not declared by {contract.schema_ref} (fields: {', '.join(contract.names)}); remove it from "
            "the input, declare it in the contract, or set 'extra_fields: ignore' there to drop such fields")


# --- the vectorised checks ---------------------------------------------------------------------


class _Invalid(Exception):
    pass


def _finish(raw: pa.Table, plan: _Plan) -> pa.Table:
    """The fast path's checks; any failure sends the caller to the line-by-line locator."""
    for spec in plan.contract.fields:
        kind = spec.type.kind
        if kind == "date" and pc.any(pc.not_equal(pc.binary_length(raw.column(spec.name)), 10)).as_py():
            raise _Invalid()
        if kind == "timestamp":
            try:
                ts = timestamps_from_text(raw.column(spec.name), spec, "-")
            except InvalidEvent:
                raise _Invalid() from None
            raw = raw.set_column(raw.schema.get_field_index(spec.name), spec.name, ts)
    try:
        return events_from_arrow(raw, plan.contract)
    except InvalidEvent:
        raise _Invalid() from None


def _first_invalid_row(table: pa.Table, plan: _Plan) -> tuple[int, str, str] | None:
    """Vectorised checks; (row, field, problem) of the first failing row, if any (on the same
    row, the first check in ``plan.checks`` order). Each check costs one pass, or none when the
    column holds no null and its min/max lie in range."""
    deleted = table.column(plan.deleted) if plan.deleted else None
    live = None
    first: tuple[int, str, str] | None = None

    def hit(mask: Any, field: str, problem: str, show: bool = False) -> None:
        nonlocal first
        hits = pc.indices_nonzero(mask)
        if len(hits):
            row = hits[0].as_py()
            if first is None or row < first[0]:
                # as text: a date outside Python's range (year 0) has no Python value
                value = table[field].slice(row, 1).cast(pa.string())[0].as_py() if show else None
                first = (row, field, f"{problem}, got {value}" if show else problem)

    for spec in plan.checks:
        name, col, kind = spec.name, table.column(spec.name), spec.type.kind
        role, rule = plan.role(name), plan.rules.get(name)
        if rule == "non-empty":
            length = pc.binary_length(col)
            if col.null_count or _lowest(length, 1):
                hit(pc.invert(pc.fill_null(pc.greater(length, 0), False)), name, "must be a non-empty string")
        elif role == "key":
            if col.null_count:
                hit(pc.is_null(col), name, "is null but is a key field (never null)")
        elif role == "version":
            if col.null_count or _lowest(col, 1):
                hit(pc.fill_null(pc.less(col, 1), True), name, "must be an integer >= 1")
        elif role == "deleted":
            if col.null_count:
                hit(pc.is_null(col), name, "must be true or false")
        elif col.null_count and not spec.nullable:
            if live is None:
                live = pc.invert(pc.fill_null(deleted, True)) if deleted is not None else True
            mask = pc.is_null(col) if live is True else pc.and_(live, pc.is_null(col))
            hit(mask, name, _null_problem(plan))
        # the values' ranges, key fields included
        if kind in _BOUNDS:
            low, high, problem = _bounds(spec)
            if _outside(col, low, high):
                hit(pc.fill_null(pc.or_(pc.less(col, low), pc.greater(col, high)), False), name, problem, True)
        elif kind in ("float", "double"):
            finite = pc.is_finite(col)
            if not pc.all(finite).as_py():
                hit(pc.invert(pc.fill_null(finite, True)), name,
                    f"must be a finite number within the range of a {kind}", True)
        elif rule == "non-negative" and _lowest(col, 0):
            hit(pc.fill_null(pc.less(col, 0), False), name, "must be an integer >= 0")
    return first


_BOUNDS = ("date", "timestamp", "decimal")


@lru_cache(maxsize=256)
def _bounds(spec: FieldSpec) -> tuple[pa.Scalar, pa.Scalar, str]:
    """The lowest and highest value of a date, timestamp or decimal field, and the message."""
    arrow = spec.type.arrow
    if spec.type.kind == "date":
        return pa.scalar(V.MIN_DAY, arrow), pa.scalar(V.MAX_DAY, arrow), f"must be {V.DAY_RANGE}"
    if spec.type.kind == "timestamp":
        low, high = (pa.scalar(v, pa.int64()).cast(arrow) for v in (V.MIN_TS_US, V.MAX_TS_US))
        return low, high, f"must be {V.TS_RANGE}"
    top = V.decimal_bound(spec.type)  # Arrow's JSON reader does not check a decimal's precision
    digits = spec.type.precision - spec.type.scale
    return (pa.scalar(top.copy_negate(), arrow), pa.scalar(top, arrow),
            f"does not fit {spec.type} (at most {digits} integer digits)")


def _lowest(col: Any, floor: int) -> bool:
    """Whether some value of ``col`` is below ``floor``."""
    low = pc.min(col).as_py()
    return low is not None and low < floor


def _outside(col: pa.ChunkedArray, low: pa.Scalar, high: pa.Scalar) -> bool:
    bounds = pc.min_max(col)
    return bounds["min"].is_valid and (pc.less(bounds["min"], low).as_py() or pc.greater(bounds["max"], high).as_py())


# --- the error path of JSON Lines -------------------------------------------------------------


def _open(source: Path | bytes) -> BinaryIO:
    return io.BytesIO(source) if isinstance(source, bytes) else open(source, "rb")


def _locate_jsonl_error(fh: BinaryIO, where: str, plan: _Plan) -> int | None:
    """Re-read line by line and raise InvalidEvent for the first bad line; return the length of
    the longest line, None when no line holds a record (a file of blank lines holds 0 events)."""
    seen: int | None = None
    for lineno, raw in enumerate(fh, start=1):
        if not raw.strip():
            continue
        seen = max(seen or 0, len(raw))
        # Undecodable bytes survive as lone surrogates, so the field holding them can be named.
        line = raw.decode("utf-8", errors="surrogateescape")
        try:
            record = json.loads(line, parse_float=plan.parse_float, object_pairs_hook=_unique_keys)
        except json.JSONDecodeError as exc:
            raise InvalidEvent(f"{where}:{lineno}", "-", f"is not valid JSON ({exc.msg})") from None
        except ValueError:  # Python's limit on integer literals: no field of an event holds one that long
            raise InvalidEvent(f"{where}:{lineno}", "-", "holds an integer of more than 4300 digits") from None
        except RecursionError:  # arrays or objects nested thousands deep: no event is
            raise InvalidEvent(f"{where}:{lineno}", "-", "is not an event (JSON nested too deeply)") from None
        except _Bad as bad:
            raise InvalidEvent(f"{where}:{lineno}", bad.field, bad.problem) from None
        try:
            _convert_record(record, plan)
        except _Bad as bad:
            raise InvalidEvent(f"{where}:{lineno}", bad.field, bad.problem) from None
    return seen


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object; a key given twice is an error (Arrow's reader refuses it too)."""
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        raise _Bad(next(k for k, _ in pairs if k in seen or seen.add(k)), "is given twice in the object")
    return out


__all__ = ["empty_events", "events_from_arrow", "events_from_bytes", "events_from_records", "read_events",
           "read_jsonl_events", "read_parquet_events", "validate_record"]
