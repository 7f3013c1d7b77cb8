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

import json

from collections import defaultdict
from datetime import datetime, timezone
from typing import Callable, Iterable, Mapping

import pyarrow as pa
from pyiceberg.manifest import DataFile
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Snapshot
from pyiceberg.types import IcebergType, ListType, StructType

from lakepub.config import DatasetSpec
from lakepub.errors import DefinitionChanged, ForeignChange
from lakepub.identity import checksum_matches
from lakepub.projection.checksum import checksum_of, partition_checksum
from lakepub.projection.partitioning import PartitionBy
from lakepub.publish import evolution
from lakepub.publish.published_state import split
from lakepub.contract.model import Contract
from lakepub.contract.orders import ORDERS_CONTRACT
from lakepub.store.layout import CONTRACT_SHAPE_PROPERTY, contract_shape, ledger_iceberg
from lakepub.store.published import definition_of, partition_of, published_schema, recorded_definition
from lakepub.store.record import PublishRecord, foreign_head, recorded_checksums

_ADVICE = ("nothing was published; set it back, or publish the new definition as a new dataset "
           "(a definition change applies to a rebuild, not to published partitions)")


def check_contract(contract: Contract, ledger: Table, ref: str | Callable[[], str | None] | None = None) -> bool:
    """The ledger was written for this contract's shape (roles and field types), or the contract
    is a compatible evolution of that one (``publish/evolution.py``: True, the schemas evolve with
    the next publish's data); an incompatible one is refused (``IncompatibleContract``, exit 3)
    naming the contract file, the key and the finding. ``ref``: the published contract version."""
    text = ledger.metadata.properties.get(CONTRACT_SHAPE_PROPERTY)
    if text is None:
        if contract.is_orders_v1 or not ledger.metadata.current_snapshot_id:
            return False  # ledgers from before the property are orders ledgers
        text = ORDERS_SHAPE
    return evolution.check_contract(contract, json.loads(text), json.loads(contract_shape(contract)), ref)


ORDERS_SHAPE = contract_shape(ORDERS_CONTRACT)


def check_definition(spec: DatasetSpec, table: Table, ledger: Table | None = None) -> None:
    """The published table must be what the definition declares (or, given the ``ledger``, gain
    only columns of fields the ledger did not have when the table was last published:
    ``evolution.definition_evolves``)."""
    published = partition_of(table)
    if published is None:
        raise ForeignChange(
            f"the partition spec of the published table '{spec.name}' was changed outside lakepub "
            f"({table.metadata.spec()}); nothing was published: restore its original spec ({spec.partition})")
    if published != str(spec.partition):
        raise DefinitionChanged(spec.path or spec.name, "partition", published, str(spec.partition), _ADVICE)
    recorded = recorded_definition(table)
    if recorded is not None:
        current = definition_of(spec)
        if ledger is not None and evolution.definition_evolves(recorded, current, table, ledger):
            return  # new columns of a current-state table: evolved with the next publish's data
        for key in sorted(set(recorded) | set(current)):
            if recorded.get(key) != current.get(key):
                where = key if key in ("partition", "entity") else f"projection.{key}"
                raise DefinitionChanged(spec.path or spec.name, where, recorded.get(key), current.get(key), _ADVICE)
        return
    columns = [f.name for f in spec.kind.output_schema()]
    have = [f.name for f in table.schema().fields]
    if columns != have:
        raise DefinitionChanged(spec.path or spec.name, "projection", have, columns, _ADVICE)


def check_schemas(spec: DatasetSpec, summary: Table, ledger: Table) -> None:
    """Refuse (``ForeignChange``) unless both tables have the columns lakepub writes, with its
    types (a schema change makes no snapshot: checked on every publish), or lack only what a
    compatible new contract version adds or promotes (``evolution.plan``: staged by the publish)."""
    for table, schema in ((summary, published_schema(spec)), (ledger, ledger_iceberg(ledger, spec.contract))):
        if not evolution.plan(table, schema).problems:
            continue  # lakepub's columns, or a compatible contract's new columns and promotions to come
        expected = {f.name: _shape(f.field_type) for f in schema.fields}
        actual = {f.name: _shape(f.field_type) for f in table.schema().fields}
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


def _shape(t: IcebergType) -> str:
    """A type's name and nesting, without field ids or nullability."""
    if isinstance(t, ListType):
        return f"list<{_shape(t.element_type)}>"
    if isinstance(t, StructType):
        return "struct<" + ", ".join(f"{f.name}: {_shape(f.field_type)}" for f in t.fields) + ">"
    return str(t)


def check_file_specs(table: Table, files: Iterable[DataFile]) -> None:
    """Refuse (``ForeignChange``) if a live data file has another partition spec than the default
    (written by another tool after an evolution of the spec: a publish would replace it wrongly)."""
    default = table.metadata.default_spec_id
    other: dict[int, int] = defaultdict(int)
    for data_file in files:
        if data_file.spec_id != default:
            other[data_file.spec_id] += 1
    if not other:
        return
    specs = table.metadata.specs()
    found = ", ".join(f"{n} with spec {spec_id} ({specs.get(spec_id)})" for spec_id, n in sorted(other.items()))
    raise ForeignChange(
        f"dataset '{table.name()[-1]}': {sum(other.values())} live data file(s) of the published table were written "
        f"outside lakepub with another partition spec than its current one, spec {default} "
        f"({specs.get(default)}): {found}; a publish would replace them wrongly; nothing was published: "
        f"rewrite those files with the current spec (pyiceberg: table.overwrite(table.scan().to_arrow())), "
        f"then publish again")


def partition_count_mismatches(latest: tuple[Snapshot, PublishRecord] | None, rows: pa.Table,
                               partition: PartitionBy) -> list[str]:
    """Compare the number of non-empty partitions of ``rows`` with the count the newest record
    left (none for records written before lakepub recorded it): the checksums cover only the
    partitions a publish rewrote, and a checksum record may have been expired since."""
    if latest is None or latest[1].partition_count is None:
        return []
    actual = len(split(rows, partition))
    expected = latest[1].partition_count
    if actual == expected:
        return []
    change = "removed" if actual < expected else "added"
    return [f"partitions: the table has {actual} non-empty partition(s) but lakepub's last publish "
            f"(snapshot {latest[0].snapshot_id}) left {expected}: {abs(expected - actual)} partition(s) {change} "
            f"outside lakepub"]


def partition_mismatches(recorded: Mapping[str, str], rows: pa.Table, partition: PartitionBy) -> tuple[int, list[str]]:
    """Compare the published rows with the recorded checksums: (partitions checked, mismatches)."""
    by_label = {partition.label(value): part for value, part in split(rows, partition).items()}
    mismatches = []
    labels = sorted(set(recorded) | set(by_label))
    for label in labels:
        part = by_label[label] if label in by_label else rows.slice(0, 0)
        # the version the record was written with (``projection/checksum.py``: v1 or ``v2:``)
        actual = checksum_of(recorded[label], part) if label in recorded else partition_checksum(part)
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
    mismatches += partition_count_mismatches(latest, rows, partition)
    if not mismatches:
        return
    restore = (f"roll the table back to lakepub's snapshot {latest[0].snapshot_id} "
               f"(pyiceberg: table.manage_snapshots().rollback_to_snapshot({latest[0].snapshot_id}).commit())"
               if latest else "remove the data written outside lakepub")
    raise ForeignChange(
        f"dataset '{summary.name()[-1]}': {describe(head)} and changed the published data "
        f"({len(mismatches)} mismatch(es); {mismatches[0]}); nothing was published: {restore}, then publish again")
