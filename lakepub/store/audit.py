"""Audit log of refused publishes (conflicts, stale starts, strict publish gates), kept as an Iceberg table.

Published batches are recorded in the published table's own snapshots; batches the protocol
refused leave no snapshot there, so they are appended here for ``lakepub status`` and
``lakepub log``. The audit table is not part of any published state.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone

import pyarrow as pa
from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import NoSuchTableError
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.types import LongType, NestedField, StringType, TimestamptzType

from lakepub.config import AUDIT_TABLE  # noqa: F401 - defined where dataset names are checked (a light import)
from lakepub.store.catalog import create_or_load, ensure_namespace

_SCHEMA = Schema(
    NestedField(1, "at", TimestamptzType(), required=False),
    NestedField(2, "dataset", StringType(), required=False),
    NestedField(3, "source", StringType(), required=False),
    NestedField(4, "batch_id", StringType(), required=False),
    NestedField(5, "outcome", StringType(), required=False),
    NestedField(6, "detail", StringType(), required=False),
    NestedField(7, "events", LongType(), required=False),
)
_ARROW = pa.schema(
    [("at", pa.timestamp("us", tz="UTC")), ("dataset", pa.string()), ("source", pa.string()),
     ("batch_id", pa.string()), ("outcome", pa.string()), ("detail", pa.string()), ("events", pa.int64())]
)


@dataclass(frozen=True)
class AuditEntry:
    dataset: str
    source: str
    batch_id: str
    outcome: str  # "conflict" | "stale-start" | "gate-refused"
    detail: str
    events: int


def audit_table(catalog: Catalog, namespace: str, create: bool = False) -> Table | None:
    ident = (namespace, AUDIT_TABLE)
    try:
        return catalog.load_table(ident)
    except NoSuchTableError:
        if not create:
            return None
    ensure_namespace(catalog, namespace)
    return create_or_load(catalog, ident, lambda: catalog.create_table(ident, schema=_SCHEMA))


def record(catalog: Catalog, namespace: str, entry: AuditEntry, now: datetime | None = None) -> None:
    table = audit_table(catalog, namespace, create=True)
    assert table is not None
    at = now or datetime.now(timezone.utc)
    row = {"at": at, **entry.__dict__}
    table.append(pa.Table.from_pylist([row], schema=_ARROW))
