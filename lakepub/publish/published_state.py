"""The published table's current rows and data files, kept by a publisher between its publishes.

A publish reads the current rows of the partitions it rewrites and replaces their data files.
A publisher keeps the table's content and its files by partition value, tagged with the snapshot
they belong to. The next publish uses them only if the table's current snapshot is still that one
(no other writer, compaction or republish moved it); otherwise it reads the table again
(``load``). This saves a scan and its planning per publish (~25 ms for orders_daily). Memory:
the published table's size (a row per group for an aggregate, per live entity for a
current-state table: a copy-on-write table is read whole once per process).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.io.pyarrow import ArrowScan
from pyiceberg.manifest import DataFile
from pyiceberg.table import Table

from lakepub.projection.partitioning import PartitionBy


@dataclass(frozen=True)
class PublishedState:
    snapshot_id: int | None  # the published table's snapshot these rows and files are of
    schema: pa.Schema  # the published rows' schema
    # Iceberg partition value (None: unpartitioned) -> the partition's rows; merge-on-read: a
    # ``mor_index.LiveRows`` computing them from ``located`` when asked
    rows: Mapping[Any, pa.Table]
    files: dict[Any, list[DataFile]]  # Iceberg partition value -> the partition's data files
    # merge-on-read (``publish/merge_on_read.py``): the partition's position delete files, and
    # where each live row sits (``mor_index.Part``: its files' rows, live flags, key index); None: not tracked
    deletes: dict[Any, list[DataFile]] = field(default_factory=dict)
    located: dict[Any, Any] | None = None
    # version 2 checksum sums of partitions' rows (``projection/checksum.py``), a cache filled
    # when first needed (``sum_of``) and carried to the next state for partitions a commit kept
    sums: dict[Any, int] = field(default_factory=dict)

    def sum_of(self, value: Any) -> int:
        """The version 2 checksum sum of a partition's rows (computed once, then kept)."""
        if value not in self.sums:
            from lakepub.projection.checksum import multiset_sum

            rows = self.rows.get(value)
            self.sums[value] = multiset_sum(rows) if rows is not None else 0
        return self.sums[value]

    def carry_sums(self, before: "PublishedState", values: Iterable[Any], new: dict[Any, int] | None) -> None:
        """After a commit that rewrote the partitions ``values``: the sums ``before`` held for
        the others, and ``new`` (the rewritten partitions' sums, when the publish computed them)."""
        changed = set(values)
        self.sums.update({v: s for v, s in before.sums.items() if v not in changed})
        self.sums.update(new or {})

    def rows_of(self, values: Iterable[Any]) -> pa.Table:
        tables = [self.rows[v] for v in values if v in self.rows]
        return pa.concat_tables(tables) if tables else self.schema.empty_table()

    def all_rows(self) -> pa.Table:
        return self.rows_of(list(self.rows))

    def files_of(self, values: Iterable[Any]) -> list[DataFile]:
        return [f for value in values for f in self.files.get(value, [])]

    def replaced(self, snapshot_id: int | None, values: set[Any], rows: dict[Any, pa.Table],
                 new_files: list[DataFile]) -> "PublishedState":
        """The state after a publish replaced the partitions ``values`` with ``rows`` and ``new_files``."""
        kept_rows = {value: r for value, r in self.rows.items() if value not in values}
        files = {value: fs for value, fs in self.files.items() if value not in values}
        for data_file in new_files:
            files.setdefault(_value(data_file), []).append(data_file)
        return PublishedState(snapshot_id, self.schema, {**kept_rows, **{v: r for v, r in rows.items() if r.num_rows}},
                              files, {value: fs for value, fs in self.deletes.items() if value not in values})


def split(rows: pa.Table, partition: PartitionBy) -> dict[Any, pa.Table]:
    """Rows by Iceberg partition value (None for an unpartitioned table)."""
    if not rows.num_rows:
        return {}
    if partition.kind == "none":
        return {None: rows}
    values = partition.values(rows)
    out = {}
    for value in pc.unique(values).to_pylist():
        mask = pc.is_null(values) if value is None else pc.fill_null(pc.equal(values, pa.scalar(value, values.type)), False)
        out[value] = rows.filter(mask)
    return out


def conform(rows: pa.Table, schema: pa.Schema) -> pa.Table:
    """``rows`` read from the table as ``schema``: a column a compatible contract adds is null
    until the publish that evolves the table (``publish/evolution.py``), a promoted one is cast."""
    for name in schema.names:
        if name not in rows.column_names:
            rows = rows.append_column(name, pa.nulls(rows.num_rows, schema.field(name).type))
    return rows.select(schema.names).cast(schema)


def load(table: Table, schema: pa.Schema, partition: PartitionBy, located: tuple[str, ...] | None = None
         ) -> PublishedState:
    """The current rows and data files of the published table (empty before its first publish);
    ``located``: the key columns of a merge-on-read table, whose rows' locations are kept too.

    Read with pyiceberg from the files its planning found (no DuckDB: a publish on the key-index
    path then never loads DuckDB's extensions, ~0.15 s of CPU per process).
    """
    snapshot_id = table.metadata.current_snapshot_id
    if snapshot_id is None:
        return PublishedState(None, schema, {}, {})
    scan = table.scan(snapshot_id=snapshot_id)
    tasks = list(scan.plan_files())
    if located is not None:
        from lakepub.publish.merge_on_read import load_located

        return load_located(table, tasks, schema, partition, located)
    arrow = conform(ArrowScan(table.metadata, table.io, scan.projection(), scan.row_filter).to_table(tasks), schema)
    files: dict[Any, list[DataFile]] = {}
    deletes: dict[Any, dict[str, DataFile]] = {}
    for task in tasks:
        files.setdefault(_value(task.file), []).append(task.file)
        for delete_file in task.delete_files:
            deletes.setdefault(_value(delete_file), {})[delete_file.file_path] = delete_file
    return PublishedState(snapshot_id, schema, split(arrow, partition), files,
                          {v: list(d.values()) for v, d in deletes.items()})


def value_of(data_file: DataFile) -> Any:
    """The Iceberg partition value of a data or delete file (None: unpartitioned)."""
    return _value(data_file)


def _value(data_file: DataFile) -> Any:
    return data_file.partition[0] if len(data_file.partition) else None
