"""What a publish checks about a published table before building on it.

The published table is an ordinary Iceberg table: other tools (a user's pyiceberg script, an
engine's maintenance job) can commit to it. Invariant: **a publish builds only on published
data**. Positions, totals and the ledger snapshot always come from the newest lakepub record in
the current snapshot's ancestry (``store/record.py``), never from "no record on the current
snapshot" (which once meant starting over and double counting). When the current snapshot was
written by another tool, its content is compared, partition by partition, with the checksums
lakepub recorded: equal content (an overwrite with the same rows, a file rewrite) is built upon;
any difference refuses the publish (``ForeignChange``, exit 3) naming the foreign snapshot, the
partitions and the lakepub snapshot to roll back to. Cost: one read of the published table and
a checksum per partition, only when the head is foreign, once per head.

The table's real definition also wins over the YAML: a ``partition:``, projection, group-by,
measure or key that changed under published data is refused (``DefinitionChanged``, exit 2)
instead of writing a second layout beside the first (which read every day twice).
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Mapping

import pyarrow as pa
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Snapshot

from lakepub.config import DatasetSpec
from lakepub.errors import DefinitionChanged, ForeignChange
from lakepub.identity import checksum_matches
from lakepub.projection.checksum import partition_checksum
from lakepub.projection.partitioning import PartitionBy
from lakepub.publish.published_state import split
from lakepub.store.published import partition_of, recorded_definition
from lakepub.store.record import PublishRecord, foreign_head, recorded_checksums

_ADVICE = ("nothing was published; set it back, or publish the new definition as a new dataset "
           "(a definition change applies to a rebuild, not to published partitions)")


def check_definition(spec: DatasetSpec, table: Table) -> None:
    """The published table must be what the definition declares."""
    published = partition_of(table)
    if published is None:
        raise ForeignChange(
            f"the partition spec of the published table '{spec.name}' was changed outside lakepub "
            f"({table.metadata.spec()}); nothing was published: restore its original spec ({spec.partition})")
    if published != str(spec.partition):
        raise DefinitionChanged(spec.path or spec.name, "partition", published, str(spec.partition), _ADVICE)
    recorded = recorded_definition(table)
    if recorded is not None:
        current = spec.kind.describe()
        for key in sorted(set(recorded) | set(current)):
            if recorded.get(key) != current.get(key):
                where = "partition" if key == "partition" else f"projection.{key}"
                raise DefinitionChanged(spec.path or spec.name, where, recorded.get(key), current.get(key), _ADVICE)
        return
    columns = [(f.name, str(f.type)) for f in spec.kind.output_schema()]
    have = [(f.name, str(f.field_type)) for f in table.schema().fields]
    if [n for n, _ in columns] != [n for n, _ in have]:
        raise DefinitionChanged(spec.path or spec.name, "projection", [n for n, _ in have], [n for n, _ in columns],
                                _ADVICE)


def partition_mismatches(recorded: Mapping[str, str], rows: pa.Table, partition: PartitionBy) -> tuple[int, list[str]]:
    """Compare the published rows with the recorded checksums: (partitions checked, mismatches)."""
    by_label = {partition.label(value): part for value, part in split(rows, partition).items()}
    mismatches = []
    labels = sorted(set(recorded) | set(by_label))
    for label in labels:
        actual = partition_checksum(by_label[label]) if label in by_label else partition_checksum(rows.slice(0, 0))
        if label not in recorded:
            mismatches.append(f"partition {label}: has data but no recorded checksum")
        elif not checksum_matches(recorded[label], actual):
            mismatches.append(f"partition {label}: checksum {actual[:12]} != recorded {recorded[label][:12]}")
    return len(labels), mismatches


def describe(snapshot: Snapshot) -> str:
    when = datetime.fromtimestamp(snapshot.timestamp_ms / 1000, tz=timezone.utc).isoformat(timespec="seconds")
    operation = snapshot.summary.operation.value if snapshot.summary is not None else "unknown"
    return f"snapshot {snapshot.snapshot_id} ({operation} at {when}) was written outside lakepub"


def check_foreign(summary: Table, latest: tuple[Snapshot, PublishRecord] | None, rows: pa.Table,
                  partition: PartitionBy) -> None:
    """Refuse to build on a foreign head whose data (``rows``) differ from the published data."""
    head = foreign_head(summary)
    if head is None:
        return
    _, mismatches = partition_mismatches(recorded_checksums(summary), rows, partition)
    if not mismatches:
        return
    restore = (f"roll the table back to lakepub's snapshot {latest[0].snapshot_id} "
               f"(pyiceberg: table.manage_snapshots().rollback_to_snapshot({latest[0].snapshot_id}).commit())"
               if latest else "remove the data written outside lakepub")
    raise ForeignChange(
        f"dataset '{summary.name()[-1]}': {describe(head)} and changed the published data "
        f"({len(mismatches)} partition(s); {mismatches[0]}); nothing was published: {restore}, then publish again")
