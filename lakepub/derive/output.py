"""A window's output rows grouped by partition, with every partition's checksum from ONE sort.

``group(rows, partition)`` returns the rows sorted by (partition, then the checksum's canonical
order), the Iceberg partition value and label of each group, the group sizes, and each group's
checksum. The checksum of a group is byte-for-byte ``projection.checksum.partition_checksum`` of
that group's rows (``tests/test_derive_output.py`` compares them on random tables with nulls,
strings, floats and timestamps): the canonical order sorts on every sortable column with the
rendered row as the last tie-break, so prefixing the sort with the partition index orders each
partition's rows exactly as ``partition_checksum`` orders them alone, and the length-prefixed
stream of the whole sorted table is the concatenation of the partitions' streams; each
partition's sha256 is one ``update`` over its slice of it.

Why: a full build of a 365-partition rollup computed 365 checksums one by one (365 renders,
sorts and hashes: ~60 ms of Arrow kernel calls for 365 one-row partitions) and split the rows with
one filter per partition (quadratic in partitions x rows); here it is one render, one sort and
365 hash updates (~3 ms), and the rows come out sorted by partition for the writer.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lakepub.projection.checksum import SEED, _length_prefixed, _sortable, render
from lakepub.projection.partitioning import PartitionBy

PART = "__lakepub_partition__"
_TIE = "__lakepub_rendered__"


@dataclass
class Grouped:
    rows: pa.Table  # sorted by partition index (the ``index`` column holds it), then canonically
    index: pa.Array  # int32 partition index of each row of ``rows``
    values: list[Any]  # Iceberg partition value of each index (None: the null partition / unpartitioned)
    labels: list[str]  # label of each index
    counts: list[int]  # rows of each index
    checksums: dict[str, str]  # label -> full sha256 hex

    def part(self, i: int) -> pa.Table:
        start = sum(self.counts[:i])
        return self.rows.slice(start, self.counts[i])


def _order(value: Any) -> tuple[bool, Any]:
    return (value is None, value if value is not None else 0)


def group(rows: pa.Table, partition: PartitionBy) -> Grouped:
    """``rows`` by partition, each partition's checksum (see the module docstring)."""
    if rows.num_rows == 0:
        return Grouped(rows, pa.array([], pa.int32()), [], [], [], {})
    rows = rows.combine_chunks()
    if partition.kind == "none":
        values: list[Any] = [None]
        index = pa.array(np.zeros(rows.num_rows, dtype=np.int32))
    else:
        pv = partition.values(rows)
        values = sorted(pc.unique(pv).to_pylist(), key=_order)
        nonnull = [v for v in values if v is not None]
        index = pc.index_in(pv, value_set=pa.array(nonnull, pv.type)) if nonnull else pa.nulls(len(pv), pa.int32())
        index = pc.fill_null(index, len(nonnull)).cast(pa.int32())
    rendered = pc.binary_join_element_wise(*[render(pa.chunked_array([c]) if isinstance(c, pa.Array) else c)
                                             for c in rows.columns], "|")
    rendered = rendered.combine_chunks() if isinstance(rendered, pa.ChunkedArray) else rendered
    keys = [(name, "ascending") for name in rows.column_names if _sortable(rows.schema.field(name).type)]
    sortable = rows.select([k for k, _ in keys]).append_column(PART, index).append_column(_TIE, rendered)
    order = pc.sort_indices(sortable, sort_keys=[(PART, "ascending")] + keys + [(_TIE, "ascending")])
    rows = rows.take(order)
    index = index.take(order)
    taken = rendered.take(order)
    stream = _length_prefixed(taken)
    lengths = np.diff(_offsets(taken)).astype(np.int64) + 8  # each row: 8-byte length, then its text
    counts = np.bincount(index.to_numpy(zero_copy_only=False), minlength=len(values)).tolist()
    ends = np.concatenate([[0], np.cumsum(lengths)])
    bounds = np.concatenate([[0], np.cumsum(counts)])
    labels = [partition.label(v) for v in values]
    checksums = {}
    for i, label in enumerate(labels):
        h = hashlib.sha256(SEED)
        h.update(stream[int(ends[bounds[i]]): int(ends[bounds[i + 1]])])
        checksums[label] = h.hexdigest()
    return Grouped(rows, index, values, labels, counts, checksums)


def _offsets(strings: pa.Array) -> np.ndarray:
    n = len(strings)
    return np.frombuffer(strings.buffers()[1], dtype=np.int32)[strings.offset: strings.offset + n + 1]
