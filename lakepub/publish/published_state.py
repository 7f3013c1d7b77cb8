"""The published table's current rows and data files, kept by a publisher between its publishes.

A publish reads the current rows of the partitions it rewrites and replaces their data files.
The published table is small (a row per day), so a publisher keeps its whole content and its
files by partition, tagged with the snapshot they belong to. The next publish uses them only if
the table's current snapshot is still that one (no other writer, compaction or republish moved
it); otherwise it reads the table again (``load``). This saves a scan and its
planning per publish (~25 ms); the memory is bounded by the number of days
published, not by events or history.

Invariant: lakepub's published table holds at most one row per day. ``load`` refuses a table
where a day is read twice (``ForeignChange``: another tool appended rows), instead of keeping one
of them: the state is a dict per day, and collapsing the duplicate would hide it from the
foreign-head check and publish on top of it. The foreign-head check itself checksums the rows
exactly as ``read`` returns them (``publish/guards.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date

from pyiceberg.io.pyarrow import ArrowScan
from pyiceberg.manifest import DataFile
from pyiceberg.table import FileScanTask, Table

from lakepub.errors import ForeignChange
from lakepub.store.layout import day_partition_value
from lakepub.store.record import latest_published

Rows = dict[date, tuple[int, int]]  # day -> (cents, orders)


@dataclass(frozen=True)
class PublishedState:
    snapshot_id: int | None  # the published table's snapshot these rows and files are of
    rows: dict[int, Rows]  # Iceberg partition value -> the partition's rows
    files: dict[int, list[DataFile]]  # Iceberg partition value -> the partition's data files

    def rows_of(self, values: set[int]) -> Rows:
        return {day: v for value in values for day, v in self.rows.get(value, {}).items()}

    def files_of(self, values: set[int]) -> list[DataFile]:
        return [f for value in sorted(values) for f in self.files.get(value, [])]

    def replaced(self, snapshot_id: int | None, values: set[int], rows: dict[int, Rows],
                 new_files: list[DataFile]) -> "PublishedState":
        """The state after a publish replaced the partitions ``values`` with ``rows`` and ``new_files``."""
        kept_rows = {value: r for value, r in self.rows.items() if value not in values}
        files = {value: fs for value, fs in self.files.items() if value not in values}
        for data_file in new_files:
            files.setdefault(data_file.partition[0], []).append(data_file)
        return PublishedState(snapshot_id, {**kept_rows, **{v: r for v, r in rows.items() if r}}, files)


def read(table: Table) -> tuple[int | None, list[FileScanTask], list[tuple[date, int, int]]]:
    """The current snapshot id, its file scan tasks and its rows exactly as read (no day merged).

    Read with pyiceberg from the files its planning found (no DuckDB: a publish on the key-index
    path then never loads DuckDB's extensions, ~0.15 s of CPU per process).
    """
    snapshot_id = table.metadata.current_snapshot_id
    if snapshot_id is None:
        return None, [], []
    scan = table.scan(snapshot_id=snapshot_id)
    tasks = list(scan.plan_files())
    arrow = ArrowScan(table.metadata, table.io, scan.projection(), scan.row_filter).to_table(tasks)
    rows = list(zip(*(arrow.column(name).to_pylist() for name in ("day", "cents", "orders"))))
    return snapshot_id, tasks, rows


def from_rows(table: Table, snapshot_id: int | None, tasks: list[FileScanTask], rows: list[tuple[date, int, int]],
              grain: str) -> PublishedState:
    """The state of ``read``'s result; ``ForeignChange`` if a day was read twice."""
    by_value: dict[int, Rows] = {}
    for day, cents, orders in rows:
        partition = by_value.setdefault(day_partition_value(day, grain), {})
        if day in partition:
            raise ForeignChange(_duplicate_day(table, day, snapshot_id))
        partition[day] = (cents, orders)
    files: dict[int, list[DataFile]] = {}
    for task in tasks:
        files.setdefault(task.file.partition[0], []).append(task.file)
    return PublishedState(snapshot_id, by_value, files)


def load(table: Table, grain: str) -> PublishedState:
    """The current rows and data files of the published table (empty before its first publish);
    ``ForeignChange`` if a day is read twice (the table is not lakepub's any more)."""
    return from_rows(table, *read(table), grain)


def _duplicate_day(table: Table, day: date, snapshot_id: int | None) -> str:
    latest = latest_published(table)
    restore = (f"roll the table back to lakepub's snapshot {latest[0].snapshot_id} (pyiceberg: "
               f"table.manage_snapshots().rollback_to_snapshot({latest[0].snapshot_id}).commit())"
               if latest else "remove the rows written outside lakepub")
    return (f"dataset '{table.name()[-1]}': day {day.isoformat()} is read more than once from snapshot {snapshot_id} "
            f"of the published table (lakepub writes one row per day: rows were added outside lakepub); "
            f"nothing was published: {restore}, then publish again")
