"""Iceberg table layouts of a dataset and the partition grain of its published table.

Per dataset ``D`` in namespace ``N``:

* ``N.D``: the published table ``day DATE, cents BIGINT, orders BIGINT``, partitioned by a
  transform of ``day`` (month by default). A publish rewrites only the partitions it affects.
* ``N.D__ledger``: append-only ledger of every distinct (key, version) ever accepted, with its
  payload (the fields of the dataset's contract, ``ledger_schema``) and the batch that brought
  it: for orders, (order_id, version, day, cents, deleted). The current state of an entity is its
  highest version; a deleted highest version is a tombstone.

Both tables move together in one atomic catalog commit (see ``lakepub.store.commit``).
"""

from __future__ import annotations

import json

from dataclasses import dataclass
from datetime import date

import pyarrow as pa
from pyiceberg.catalog import Catalog
from pyiceberg.partitioning import PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.table.sorting import SortField, SortOrder
from pyiceberg.transforms import DayTransform, IdentityTransform, MonthTransform, YearTransform
from pyiceberg.types import DateType, ListType, LongType, NestedField, StringType, StructType

from lakepub.contract.model import Contract
from lakepub.contract.orders import ORDERS_CONTRACT
from lakepub.errors import ConfigError
from lakepub.keys import ORDER_KEYS_VERSION, ORDER_KEYS_VERSIONS
from lakepub.store.catalog import create_or_load, ensure_namespace

SUMMARY_SCHEMA = Schema(
    NestedField(1, "day", DateType(), required=False),
    NestedField(2, "cents", LongType(), required=False),
    NestedField(3, "orders", LongType(), required=False),
)
SUMMARY_ARROW = pa.schema([("day", pa.date32()), ("cents", pa.int64()), ("orders", pa.int64())])


def ledger_schema(contract: Contract) -> tuple[Schema, pa.Schema]:
    """The ledger's Iceberg and Arrow schemas for a contract: its fields in declared order with
    their types (all optional, like every ledger column), then ``batch_id``, ``floor`` (set by
    compaction: every version <= floor of this entity was seen; lower ones stay rejected) and
    ``k1``/``k2`` (``lakepub.keys.entity_keys`` of the key: the keys of the ledger's lookup, key
    index or join). Field ids are 1.. in that order, so the orders contract gives exactly the
    ledger lakepub has always created (``tests/test_ledger_generic.py`` pins it). ``history`` is
    added by the first compaction (``history_arrow``)."""
    own = [("batch_id", StringType(), pa.string()), ("floor", LongType(), pa.int64()),
           ("k1", LongType(), pa.int64()), ("k2", LongType(), pa.int64())]
    columns = [(f.name, f.type.iceberg, f.type.arrow) for f in contract.fields] + own
    iceberg = Schema(*(NestedField(i, name, itype, required=False) for i, (name, itype, _) in enumerate(columns, 1)))
    return iceberg, pa.schema([(name, atype) for name, _, atype in columns])


def history_arrow(contract: Contract) -> pa.Field:
    """The ``history`` column compaction adds (``maintenance/compact.py``): on an entity's kept
    row, the (version, state) of every version compaction dropped below it."""
    return pa.field("history", pa.list_(pa.struct(
        [("version", pa.int64())] + [(n, contract.field(n).type.arrow) for n in contract.state_names])))


def history_iceberg(contract: Contract) -> ListType:
    """``history_arrow`` as the Iceberg type compaction adds (ids are reassigned when added)."""
    state = [NestedField(i, n, contract.field(n).type.iceberg, required=False)
             for i, n in enumerate(contract.state_names, 3)]
    return ListType(element_id=1, element_required=False,
                    element=StructType(NestedField(2, "version", LongType(), required=False), *state))


LEDGER_SCHEMA, LEDGER_ARROW = ledger_schema(ORDERS_CONTRACT)  # the orders ledger (field ids 1..9)
ORDER_KEYS_PROPERTY = "lakepub.order-keys"  # the lakepub.keys version whose k1/k2 the ledger stores
HISTORY_ARROW = history_arrow(ORDERS_CONTRACT)  # (version, day, cents, deleted)

_TABLE_PROPERTIES = {
    "write.parquet.compression-codec": "zstd",
    # Appends (the ledger's) merge small manifests so that planning and reads stay flat as
    # publishes accumulate; the published table's overwrites compact theirs (store/write.py).
    "commit.manifest-merge.enabled": "true",
    "commit.manifest.min-count-to-merge": "4",
    "format-version": "2",
}
# The published table has one small file per partition, and every query reads its manifest: its
# cents/orders column stats serve no filter and are left out (DuckDB's Iceberg read of the
# 37-file table: 1.31x -> ~1.23x of the same files as plain Parquet, scripts/bench/reads.py).
# Stats on day are kept: pyiceberg's own overwrite/delete with a day filter (a user's republish
# script) needs them to tell whole-file matches from partial ones, else it rewrites every file.
TABLE_PROPERTIES = _TABLE_PROPERTIES  # shared with store/published.py
_SUMMARY_PROPERTIES = {"write.metadata.metrics.default": "none", "write.metadata.metrics.column.day": "full"}
_TRANSFORMS = {"day": DayTransform(), "month": MonthTransform(), "year": YearTransform()}


@dataclass(frozen=True)
class DatasetTables:
    summary: Table
    ledger: Table


def summary_id(namespace: str, dataset: str) -> tuple[str, str]:
    return (namespace, dataset)


def ledger_id(namespace: str, dataset: str) -> tuple[str, str]:
    return (namespace, f"{dataset}__ledger")


def ensure_ledger(catalog: Catalog, namespace: str, entity: str, contract: Contract = ORDERS_CONTRACT) -> Table:
    """Create the entity's ledger if it does not exist yet, and load it (also when other writers
    create it at the same time: ``lakepub.store.catalog``). The ledger has the contract's fields
    (``ledger_schema``) and is sorted by its key fields."""
    ensure_namespace(catalog, namespace)
    schema = ledger_schema(contract)[0]
    ledger_sort = SortOrder(*(SortField(source_id=schema.find_field(name).field_id, transform=IdentityTransform())
                              for name in contract.entity.key))
    return _create_or_load(catalog, ledger_id(namespace, entity), schema, PartitionSpec(), ledger_sort,
                           {ORDER_KEYS_PROPERTY: ORDER_KEYS_VERSION, CONTRACT_SHAPE_PROPERTY: contract_shape(contract)})


CONTRACT_SHAPE_PROPERTY = "lakepub.contract-shape"  # what the ledger's rows mean: roles and field types


def contract_shape(contract: Contract) -> str:
    """The contract's roles and field types as the ledger stores them (JSON), recorded on the
    ledger when it is created: keys are hashed from the key fields and states compared field by
    field, so a contract whose shape changed cannot read the ledger it wrote."""
    e = contract.entity
    return json.dumps({"key": list(e.key), "version": e.version, "deleted": e.deleted,
                       "fields": {f.name: f.type.name for f in contract.fields}}, sort_keys=True)


def has_order_keys(ledger: Table) -> bool:
    """Whether the ledger stores order keys (created by lakepub >= 0.2); older ledgers are
    looked up by order_id, which is correct, only slower."""
    return order_keys_version(ledger) is not None


def order_keys_version(ledger: Table) -> str | None:
    """The ``lakepub.keys`` version the ledger's k1/k2 are made with (kept for the ledger's life:
    its stored keys are looked up with it), None for a ledger without order keys."""
    version = ledger.metadata.properties.get(ORDER_KEYS_PROPERTY)
    if version is not None and version not in ORDER_KEYS_VERSIONS:
        raise ConfigError(f"ledger {'.'.join(ledger.name())} stores order keys '{version}', unknown to this "
                          "lakepub version; upgrade lakepub to publish to it")
    return version


def ledger_arrow(ledger: Table, contract: Contract = ORDERS_CONTRACT) -> pa.Schema:
    """The Arrow schema of the ledger's rows (``ledger_schema``; without k1/k2 for a ledger
    created before them; with ``history`` once compacted)."""
    schema = ledger_schema(contract)[1]
    if not has_order_keys(ledger):
        schema = pa.schema([f for f in schema if f.name not in ("k1", "k2")])
    return schema.append(history_arrow(contract)) if has_history(ledger) else schema


def ledger_iceberg(ledger: Table, contract: Contract = ORDERS_CONTRACT) -> Schema:
    """The Iceberg columns a ledger of ``contract`` has (as ``ledger_arrow``): what lakepub writes."""
    fields = [f for f in ledger_schema(contract)[0].fields if has_order_keys(ledger) or f.name not in ("k1", "k2")]
    if has_history(ledger):
        fields.append(NestedField(len(fields) + 1, "history", history_iceberg(contract), required=False))
    return Schema(*fields)


def columns_at(table: Table, snapshot_id: int | None, nested: str | None = None) -> set[str] | None:
    """The top-level columns of a snapshot's schema (a reader of it sees those: a snapshot from
    before a contract evolution lacks the columns it added), or with ``nested`` the fields of that
    list-of-struct column's elements (``history``); None if unknown."""
    snapshot = table.metadata.snapshot_by_id(snapshot_id) if snapshot_id is not None else None
    if snapshot is None or snapshot.schema_id is None:
        return None
    schema = next((s for s in table.metadata.schemas if s.schema_id == snapshot.schema_id), None)
    if schema is None:
        return None
    if nested is None:
        return {f.name for f in schema.fields}
    element = getattr(schema.find_field(nested).field_type, "element_type", None) if nested in schema.column_names \
        else None
    return {f.name for f in element.fields} if isinstance(element, StructType) else None


def has_history(ledger: Table) -> bool:
    """Whether the ledger has the ``history`` column (it has been compacted)."""
    return "history" in ledger.schema().column_names


def load_tables(catalog: Catalog, namespace: str, dataset: str) -> DatasetTables:
    return DatasetTables(
        summary=catalog.load_table(summary_id(namespace, dataset)),
        ledger=catalog.load_table(ledger_id(namespace, dataset)),
    )


def _create_or_load(catalog: Catalog, ident: tuple[str, str], schema: Schema, spec: PartitionSpec,
                    sort: SortOrder | None, properties: dict[str, str] | None = None) -> Table:
    kwargs = {"sort_order": sort} if sort is not None else {}
    return create_or_load(catalog, ident, lambda: catalog.create_table(
        ident, schema=schema, partition_spec=spec, properties={**_TABLE_PROPERTIES, **(properties or {})}, **kwargs))


# --- partition grain ------------------------------------------------------------------------


def grain_of(summary: Table) -> str | None:
    """The partition grain of a published table, read from its real (current default) partition
    spec (the definition's ``partition:`` may have changed since the table was created); None if
    that spec is not one lakepub writes (changed by another tool). Only the default spec counts:
    Iceberg keeps every spec a table ever had, so an evolution that was undone leaves an old spec
    behind for good (live files written with another spec are refused by ``publish/guards.py``)."""
    spec = summary.metadata.spec()
    if len(spec.fields) != 1 or spec.fields[0].source_id != 1:
        return None
    transform = spec.fields[0].transform
    return next((grain for grain, t in _TRANSFORMS.items() if type(t) is type(transform)), None)


def partition_label(day: date, grain: str) -> str:
    if grain == "day":
        return day.isoformat()
    if grain == "month":
        return f"{day.year:04d}-{day.month:02d}"
    return f"{day.year:04d}"


_EPOCH = date(1970, 1, 1)


def day_partition_value(day: date, grain: str) -> int:
    """The Iceberg partition value (day/month/year transform) of a day."""
    if grain == "day":
        return (day - _EPOCH).days
    if grain == "month":
        return (day.year - 1970) * 12 + day.month - 1
    return day.year - 1970


def partition_range(label: str, grain: str) -> tuple[date, date]:
    """Half-open [first, next) day range of a partition label."""
    if grain == "day":
        first = date.fromisoformat(label)
        return first, date.fromordinal(first.toordinal() + 1)
    if grain == "month":
        year, month = (int(x) for x in label.split("-"))
        first = date(year, month, 1)
        return first, date(year + month // 12, month % 12 + 1, 1)
    year = int(label)
    return date(year, 1, 1), date(year + 1, 1, 1)
