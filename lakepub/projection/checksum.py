"""Checksum of a published partition, for any schema.

``partition_checksum(rows)`` is sha256, seeded with ``b"lakepub-partition-v1"``, over the rows
rendered as text, each length-prefixed (8 bytes, little endian), in a canonical order. It is
byte-for-byte ``lakepub.identity.partition_checksum`` for the orders table (day date32, cents
int64, orders int64): there a row renders as ``f"{day.isoformat()}|{cents}|{orders}"`` and rows are
sorted as tuples, which is what the typed sort below gives for dates and integers (pinned by a
test), so checksums recorded by earlier publishes stay valid.

The invariant: the checksum does not depend on row order, and two tables of one schema that
differ in any value (or in a row's multiplicity) render differently. Values render as:

* null ``null``; boolean ``true``/``false``; integers in decimal; floats ``repr`` (``-0.0``,
  ``nan``, ``inf``, shortest round-trip); decimals fixed-point at the column's scale (``1.50``);
  dates ``YYYY-MM-DD``; timestamps ISO 8601 (``2025-10-01T12:00:00+00:00``; nanosecond columns as
  an integer with an ``ns`` suffix); binary ``0x`` + hex;
* strings as JSON string literals (``json.dumps``, non-ASCII kept): quoted, with ``"`` and ``\\``
  escaped, so a string is a prefix-free token and a ``|`` inside it (or the text ``null``) can never
  be mistaken for a separator or a null.

Fields are joined by ``|``. Order: a typed sort on every column (ascending, nulls last) with the
rendered row as the last tie-break, so rows that compare equal but render differently (0.0 and
-0.0) still have one order.

This is per-row Python (rendering and one hash update per row): ~1.3 µs per row for the
3-column orders schema, ~3 µs for 8 mixed columns (measured on this VM), i.e. ~0.15 s for a
100k-row partition set. Partitions are small for aggregates; a large current-state table would
want a vectorised rendering (pyarrow casts to string + one buffer hash) under a new version seed.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Callable

import pyarrow as pa
import pyarrow.compute as pc

SEED = b"lakepub-partition-v1"


def partition_checksum(rows: pa.Table) -> str:
    """sha256 hex of a partition's rows (any schema), independent of their order."""
    h = hashlib.sha256(SEED)
    if rows.num_rows == 0:
        return h.hexdigest()
    columns = [_render(col) for col in rows.columns]
    rendered = ["|".join(parts) for parts in zip(*columns)]
    keys = [(name, "ascending") for name in rows.column_names if _sortable(rows.schema.field(name).type)]
    tie = "__lakepub_rendered__"
    table = rows.select([k for k, _ in keys]).append_column(tie, pa.array(rendered, pa.string()))
    order = pc.sort_indices(table, sort_keys=keys + [(tie, "ascending")]).to_pylist()
    for i in order:
        payload = rendered[i].encode("utf-8")
        h.update(len(payload).to_bytes(8, "little"))
        h.update(payload)
    return h.hexdigest()


def _sortable(t: pa.DataType) -> bool:
    return not (pa.types.is_nested(t) or pa.types.is_dictionary(t) or pa.types.is_null(t))


def _render(column: pa.ChunkedArray) -> list[str]:
    t = column.type
    if pa.types.is_timestamp(t) and t.unit == "ns":  # Python datetimes cannot hold nanoseconds
        return ["null" if v is None else f"{v}ns" for v in pc.cast(column, pa.int64()).to_pylist()]
    return _renderer(t)(column.to_pylist())


def _renderer(t: pa.DataType) -> Callable[[list[Any]], list[str]]:
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return _each(lambda v: json.dumps(v, ensure_ascii=False))
    if pa.types.is_boolean(t):
        return _each(lambda v: "true" if v else "false")
    if pa.types.is_integer(t):
        return _each(str)
    if pa.types.is_floating(t):
        return _each(repr)
    if pa.types.is_decimal(t):
        return _each(lambda v: format(v, "f"))
    if pa.types.is_date(t) or pa.types.is_timestamp(t):
        return _each(lambda v: v.isoformat())
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t):
        return _each(lambda v: "0x" + v.hex())
    return _each(lambda v: json.dumps(v, ensure_ascii=False, sort_keys=True, default=str))


def _each(render: Callable[[Any], str]) -> Callable[[list[Any]], list[str]]:
    return lambda values: ["null" if v is None else render(v) for v in values]
