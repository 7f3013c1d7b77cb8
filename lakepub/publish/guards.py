"""What a publish checks about the published table before building on it.

The published table is an ordinary Iceberg table: other tools (a user's pyiceberg script, an
engine's maintenance job) can commit to it. Invariant: **a publish builds only on published
data**. Positions, totals and the ledger snapshot always come from the newest lakepub record in
the current snapshot's ancestry (``store/record.py``), never from "no record on the current
snapshot" (which once meant starting over and double counting). When the current snapshot was
written by another tool, its content is compared, partition by partition, with the checksums
lakepub recorded: equal content (an overwrite with the same rows, a file rewrite) is built upon;
any difference refuses the publish (``ForeignChange``, exit 3) naming the foreign snapshot, the
partitions and the lakepub snapshot to roll back to. The number of non-empty partitions must
also equal the newest record's ``lakepub.partition-count`` (``partition_count_mismatches``): a
partition deleted outside lakepub is detected even after the janitor (or a user's expiry) removed
its last checksum record. Cost: one read of the published table
(a row per day) and a sha256 per partition, only when the head is foreign, once per head.

The table's real partition spec also wins over the definition: a ``partition:`` that changed in
the YAML is refused (``DefinitionChanged``, exit 2) instead of writing a second layout beside the
first (which read every day twice).
Only the table's current default spec is checked (Iceberg keeps old specs for good, so an
evolution that was undone is fine), but every live data file must have been written with it
(``check_file_specs``): a publish replaces a partition's files by their partition value under the
default spec, so files of another spec are refused (``ForeignChange``) until rewritten.

A schema change makes no snapshot, so the foreign-head check cannot see it: ``check_schemas``
requires the published table's current schema to be lakepub's (``SUMMARY_SCHEMA``: column names
and types) and the ledger's to be one lakepub writes (``layout.ledger_arrow``), else
``ForeignChange`` naming the table and the extra, missing or changed columns.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import date, datetime, timezone
from typing import Iterable, Mapping

import pyarrow as pa
from pyiceberg.manifest import DataFile
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Snapshot
from pyiceberg.types import IcebergType, ListType, StructType

from lakepub.config import DatasetSpec
from lakepub.errors import DefinitionChanged, ForeignChange
from lakepub.identity import checksum_matches, partition_checksum
from lakepub.store.layout import SUMMARY_SCHEMA, grain_of, ledger_arrow, partition_label
from lakepub.store.record import PublishRecord, foreign_head, recorded_checksums


def table_grain(spec: DatasetSpec, summary: Table) -> str:
    """The grain of the published table, which must be the definition's."""
    grain = grain_of(summary)
    if grain is None:
        raise ForeignChange(
            f"the partition spec of the published table '{spec.name}' was changed outside lakepub "
            f"({summary.metadata.spec()}); nothing was published: restore its original spec "
            f"(partitioned by {spec.partition}(day))")
    if grain != spec.partition:
        raise DefinitionChanged(
            spec.path or spec.name, "partition", grain, spec.partition,
            f"nothing was published; set it back to '{grain}', or publish the new layout as a new dataset "
            "(a definition change applies to a rebuild, not to published partitions)")
    return grain


def check_schemas(summary: Table, ledger: Table) -> None:
    """Refuse (``ForeignChange``) unless both tables have the columns lakepub writes, with its types."""
    expected_summary = {f.name: _iceberg_shape(f.field_type) for f in SUMMARY_SCHEMA.fields}
    expected_ledger = {f.name: _arrow_shape(f.type) for f in ledger_arrow(ledger)}
    for table, expected in ((summary, expected_summary), (ledger, expected_ledger)):
        actual = {f.name: _iceberg_shape(f.field_type) for f in table.schema().fields}
        extra = [n for n in actual if n not in expected]
        missing = [n for n in expected if n not in actual]
        changed = [n for n in expected if n in actual and actual[n] != expected[n]]
        if not (extra or missing or changed):
            continue
        what = "; ".join(part for part in (
            extra and "extra column(s) " + ", ".join(f"{n} ({actual[n]})" for n in extra),
            missing and "missing column(s) " + ", ".join(f"{n} ({expected[n]})" for n in missing),
            changed and "changed column(s) " + ", ".join(f"{n} ({expected[n]} -> {actual[n]})" for n in changed),
        ) if part)
        fixes = [f"drop {', '.join(extra)} again (pyiceberg: with table.update_schema() as u: "
                 f"{'; '.join(f'u.delete_column({n!r})' for n in extra)})"] if extra else []
        if missing or changed:
            fixes.append("restore the column(s) " + ", ".join(missing + changed) + " with their types ("
                         + ", ".join(f"{n} {expected[n]}" for n in missing + changed) + ")")
        raise ForeignChange(
            f"the schema of table '{'.'.join(table.name())}' was changed outside lakepub ({what}); "
            f"lakepub writes only its own columns ({', '.join(f'{n} {t}' for n, t in expected.items())}); "
            f"nothing was published: {' and '.join(fixes)}, then publish again")


def _iceberg_shape(t: IcebergType) -> str:
    """A type's name and nesting, without field ids or nullability."""
    if isinstance(t, ListType):
        return f"list<{_iceberg_shape(t.element_type)}>"
    if isinstance(t, StructType):
        return "struct<" + ", ".join(f"{f.name}: {_iceberg_shape(f.field_type)}" for f in t.fields) + ">"
    return str(t)


_ARROW_PRIMITIVES = {pa.int64(): "long", pa.string(): "string", pa.large_string(): "string", pa.date32(): "date",
                     pa.bool_(): "boolean", pa.int32(): "int", pa.float64(): "double"}


def _arrow_shape(t: pa.DataType) -> str:
    """``_iceberg_shape`` of the Iceberg type an Arrow column of lakepub's is stored as."""
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return f"list<{_arrow_shape(t.value_type)}>"
    if pa.types.is_struct(t):
        return "struct<" + ", ".join(f"{f.name}: {_arrow_shape(f.type)}" for f in t) + ">"
    return _ARROW_PRIMITIVES.get(t, str(t))


def check_file_specs(summary: Table, files: Iterable[DataFile]) -> None:
    """Refuse (``ForeignChange``) if a live data file has another partition spec than the default."""
    default = summary.metadata.default_spec_id
    other: dict[int, int] = defaultdict(int)
    for data_file in files:
        if data_file.spec_id != default:
            other[data_file.spec_id] += 1
    if not other:
        return
    specs = summary.metadata.specs()
    found = ", ".join(f"{n} with spec {spec_id} ({_spec_text(specs.get(spec_id))})" for spec_id, n in sorted(other.items()))
    raise ForeignChange(
        f"dataset '{summary.name()[-1]}': {sum(other.values())} live data file(s) of the published table were written "
        f"outside lakepub with another partition spec than its current one, spec {default} "
        f"({_spec_text(specs.get(default))}): {found}; a publish would replace them wrongly; nothing was published: "
        f"rewrite those files with the current spec (pyiceberg: table.overwrite(table.scan().to_arrow())), "
        f"then publish again")


def _spec_text(spec) -> str:
    return ", ".join(f"{f.name}: {f.transform}({f.source_id})" for f in spec.fields) if spec is not None else "unknown"


def partition_mismatches(recorded: Mapping[str, str], rows: Iterable[tuple[date, int, int]], grain: str) -> tuple[int, list[str]]:
    """Compare the published rows with the recorded checksums: (partitions checked, mismatches)."""
    by_partition: dict[str, list[tuple[date, int, int]]] = defaultdict(list)
    for day, cents, orders in rows:
        by_partition[partition_label(day, grain)].append((day, cents, orders))
    mismatches = []
    labels = sorted(set(recorded) | set(by_partition))
    for label in labels:
        actual = partition_checksum(by_partition.get(label, []))
        if label not in recorded:
            mismatches.append(f"partition {label}: has data but no recorded checksum")
        elif not checksum_matches(recorded[label], actual):
            mismatches.append(f"partition {label}: checksum {actual[:12]} != recorded {recorded[label][:12]}")
    return len(labels), mismatches


def partition_count_mismatches(latest: tuple[Snapshot, PublishRecord] | None, rows: Iterable[tuple[date, int, int]],
                               grain: str) -> list[str]:
    """Compare the number of non-empty partitions of ``rows`` with the count the newest record
    left (none for records written before lakepub recorded it)."""
    if latest is None or latest[1].partition_count is None:
        return []
    actual = len({partition_label(day, grain) for day, _, _ in rows})
    expected = latest[1].partition_count
    if actual == expected:
        return []
    change = "removed" if actual < expected else "added"
    return [f"partitions: the table has {actual} non-empty partition(s) but lakepub's last publish "
            f"(snapshot {latest[0].snapshot_id}) left {expected}: {abs(expected - actual)} partition(s) {change} "
            f"outside lakepub"]


def describe(snapshot: Snapshot) -> str:
    when = datetime.fromtimestamp(snapshot.timestamp_ms / 1000, tz=timezone.utc).isoformat(timespec="seconds")
    operation = snapshot.summary.operation.value if snapshot.summary is not None else "unknown"
    return f"snapshot {snapshot.snapshot_id} ({operation} at {when}) was written outside lakepub"


def check_foreign(summary: Table, latest: tuple[Snapshot, PublishRecord] | None,
                  rows: Iterable[tuple[date, int, int]], grain: str) -> None:
    """Refuse to build on a foreign head whose data differ from the published data. ``rows`` are the
    table's rows exactly as read (``published_state.read``, as ``verify`` reads them): a day read
    twice is checksummed twice, so an appended duplicate is a mismatch."""
    head = foreign_head(summary)
    if head is None:
        return
    rows = list(rows)
    _, mismatches = partition_mismatches(recorded_checksums(summary), rows, grain)
    mismatches += partition_count_mismatches(latest, rows, grain)
    if not mismatches:
        return
    restore = (f"roll the table back to lakepub's snapshot {latest[0].snapshot_id} "
               f"(pyiceberg: table.manage_snapshots().rollback_to_snapshot({latest[0].snapshot_id}).commit())"
               if latest else "remove the data written outside lakepub")
    raise ForeignChange(
        f"dataset '{summary.name()[-1]}': {describe(head)} and changed the published data "
        f"({len(mismatches)} mismatch(es); {mismatches[0]}); nothing was published: {restore}, then publish again")
