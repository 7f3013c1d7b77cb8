"""The rejects table of an entity: events a lenient publish gate kept out of the published data.

One Iceberg table per entity, ``<entity>__rejects`` (beside ``<entity>__ledger``), not one per
dataset: batches, positions and the ledger belong to the entity, and every dataset of it sees the
same events, so a per-dataset table would hold the same rejected event once per dataset. Each
row is one rejected event of one batch::

    batch_id   the batch identity (the whole batch, rejected events included)
    source     the batch's source
    rule       the first rule the event broke (not_null | range | enum | unique), ``column`` and
    column     ``detail`` (e.g. the range text); ``violations`` lists every rule:column it broke
    detail
    violations
    value      the offending value as text
    partition  the event's partition values (``day=2025-10-01``), as the gate report shows them
    event      the whole event as JSON (sorted keys): schema-independent, it survives evolution
    rejected_at

The rows are appended in the same atomic catalog commit as the ledger and the published tables
(``publish/publisher.py`` adds one more ``TableChange``), and the snapshot carries
``lakepub.batch-id``: a crash before the commit leaves neither, a retry recognised as already
published appends nothing. Under the ordered commit (non-SQL catalogs) the rejects table is
committed after the ledger and before the published tables; an append already holding the batch
id (a crash between the two) is not made twice. The janitor cleans it like the audit table
(append-only: expiry drops old snapshots, never live rows). Cost: one small Parquet file and one
more pointer in the commit per batch that rejected something (nothing for the others).
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

import pyarrow as pa
from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import NoSuchTableError
from pyiceberg.schema import Schema
from pyiceberg.table import Table, Transaction
from pyiceberg.types import NestedField, StringType, TimestamptzType

from lakepub.store.catalog import create_or_load, ensure_namespace
from lakepub.store.files import FileWriter
from lakepub.store.write import append_files, transaction

SUFFIX = "__rejects"
COLUMNS = ("batch_id", "source", "rule", "column", "detail", "violations", "value", "partition", "event")
_SCHEMA = Schema(
    *(NestedField(i + 1, name, StringType(), required=False) for i, name in enumerate(COLUMNS)),
    NestedField(len(COLUMNS) + 1, "rejected_at", TimestamptzType(), required=False),
)
ARROW = pa.schema([*((name, pa.string()) for name in COLUMNS), ("rejected_at", pa.timestamp("us", tz="UTC"))])


def rejects_id(namespace: str, entity: str) -> tuple[str, str]:
    return (namespace, f"{entity}{SUFFIX}")


def ensure_rejects(catalog: Catalog, namespace: str, entity: str) -> Table:
    ensure_namespace(catalog, namespace)
    ident = rejects_id(namespace, entity)
    return create_or_load(catalog, ident, lambda: catalog.create_table(ident, schema=_SCHEMA))


def load_rejects(catalog: Catalog, namespace: str, entity: str) -> Table | None:
    try:
        return catalog.load_table(rejects_id(namespace, entity))
    except NoSuchTableError:
        return None


def holds_batch(table: Table, batch_id: str) -> bool:
    """Whether an append of ``batch_id`` is already on the table (an ordered commit that crashed
    before the published tables moved)."""
    return any(s.summary is not None and s.summary.additional_properties.get("lakepub.batch-id") == batch_id
               for s in table.metadata.snapshots)


def stage(table: Table, batch_id: str, source: str, rows: list[dict[str, Any]],
          now: datetime | None = None) -> Transaction:
    """A transaction appending the rejected events (written now) to ``table``."""
    at = now or datetime.now(timezone.utc)
    data = pa.Table.from_pylist([{**r, "batch_id": batch_id, "source": source, "rejected_at": at} for r in rows],
                                schema=ARROW)
    tx = transaction(table)
    files = FileWriter(table.metadata, table.io).write([(None, data)])
    append_files(tx, files, {"lakepub.batch-id": batch_id, "lakepub.rejected": str(len(rows))})
    return tx
