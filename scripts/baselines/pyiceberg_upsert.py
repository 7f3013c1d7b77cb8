"""Baseline: what a careful user writes with pyiceberg alone — a keyed upsert.

A current-state Iceberg table ``orders_current(order_id, version, day, cents,
deleted)`` keyed by ``order_id`` (identifier field) in a pyiceberg ``SqlCatalog``
(SQLite catalog file and ``file://`` warehouse under a work dir).  For each batch
of at most ``max_batch`` records:

1. dedup the batch in pyarrow to the highest version per order;
2. scan the table for the current versions of those orders
   (``row_filter=In("order_id", keys)``) and keep only rows with a higher version;
3. ``table.upsert(rows, join_cols=["order_id"])``.

No summary table and no checkpoint: this measures the keyed upsert alone.

Run: ``python scripts/baselines/pyiceberg_upsert.py --stream DIR --work DIR``
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Iterator, Sequence
from datetime import date
from itertools import islice
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.expressions import In
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.types import BooleanType, DateType, LongType, NestedField, StringType

from lakepub.generate import partition_dirs, read_partition  # the same reader for every baseline

NAMESPACE = "bench"
TABLE = "orders_current"
DESCRIPTION = "Baseline: keyed pyiceberg upsert of a current-state table."

ICEBERG_SCHEMA = Schema(
    NestedField(1, "order_id", StringType(), required=True),
    NestedField(2, "version", LongType(), required=True),
    NestedField(3, "day", DateType(), required=False),
    NestedField(4, "cents", LongType(), required=False),
    NestedField(5, "deleted", BooleanType(), required=True),
    identifier_field_ids=[1],
)

ARROW_SCHEMA = pa.schema(
    [
        pa.field("order_id", pa.string(), nullable=False),
        pa.field("version", pa.int64(), nullable=False),
        pa.field("day", pa.date32()),
        pa.field("cents", pa.int64()),
        pa.field("deleted", pa.bool_(), nullable=False),
    ]
)


def open_table(work_dir: Path) -> Table:
    """Create (or load) the current-state table in a SQLite-backed SqlCatalog."""
    work_dir = Path(work_dir).resolve()
    warehouse = work_dir / "warehouse"
    warehouse.mkdir(parents=True, exist_ok=True)
    catalog = SqlCatalog(
        "baseline", uri=f"sqlite:///{work_dir / 'catalog.db'}", warehouse=f"file://{warehouse}"
    )
    catalog.create_namespace_if_not_exists(NAMESPACE)
    return catalog.create_table_if_not_exists(f"{NAMESPACE}.{TABLE}", schema=ICEBERG_SCHEMA)


def batches(stream_dir: Path, max_batch: int, max_events: int | None = None) -> Iterator[list[dict[str, Any]]]:
    """Batches of at most ``max_batch`` records, as ``seed_sqlite.batches`` cuts them.

    Each batch takes an equal share from every partition (a slice of stream
    time); ``max_events`` caps the total.
    """
    parts = partition_dirs(Path(stream_dir))
    readers = {p.name: read_partition(p) for p in parts}
    active, left = list(readers), max_events if max_events is not None else float("inf")
    while active and left > 0:
        batch: list[dict[str, Any]] = []
        cap = int(min(max_batch, left))
        while active and len(batch) < cap:
            share = max(1, (cap - len(batch)) // len(active))
            for name in list(active):
                want, got = min(share, cap - len(batch)), len(batch)
                batch.extend(islice(readers[name], want))
                if len(batch) - got < want:
                    active.remove(name)
        left -= len(batch)
        if batch:
            yield batch


def to_arrow(events: Sequence[dict[str, Any]]) -> pa.Table:
    """A batch of event dicts as an Arrow table in the Iceberg table's schema."""
    return pa.table(
        {
            "order_id": [e["order_id"] for e in events],
            "version": [e["version"] for e in events],
            "day": [None if e["day"] is None else date.fromisoformat(e["day"]) for e in events],
            "cents": [e["cents"] for e in events],
            "deleted": [e["deleted"] for e in events],
        },
        schema=ARROW_SCHEMA,
    )


def latest_per_order(batch: pa.Table) -> pa.Table:
    """Keep one row per order: its highest version (exact duplicates collapse)."""
    ordered = batch.sort_by([("order_id", "ascending"), ("version", "descending")])
    ids = ordered["order_id"]
    if len(ids) == 0:
        return ordered
    first = pc.not_equal(ids.slice(1), ids.slice(0, len(ids) - 1))
    mask = pa.concat_arrays([pa.array([True])] + first.chunks)
    return ordered.filter(mask)


def newer_than_current(table: Table, batch: pa.Table) -> pa.Table:
    """Drop rows whose version is not above the table's current version."""
    keys = batch["order_id"].to_pylist()
    current = table.scan(row_filter=In("order_id", keys), selected_fields=("order_id", "version")).to_arrow()
    if current.num_rows == 0:
        return batch
    current = current.rename_columns(["order_id", "current_version"])
    joined = batch.join(current, keys="order_id", join_type="left outer")
    keep = pc.or_kleene(
        pc.is_null(joined["current_version"]), pc.greater(joined["version"], joined["current_version"])
    )
    return joined.filter(keep).select(ARROW_SCHEMA.names).cast(ARROW_SCHEMA)


def run_upsert_baseline(
    stream_dir: Path, work_dir: Path, max_batch: int = 100_000, max_events: int | None = None
) -> dict[str, Any]:
    """Upsert a landing folder (at most ``max_events`` records) batch by batch."""
    table = open_table(work_dir)
    n, updated, inserted = 0, 0, 0
    batch_seconds: list[float] = []
    started = time.perf_counter()
    for chunk in batches(Path(stream_dir), max_batch, max_events):
        t0 = time.perf_counter()
        rows = newer_than_current(table, latest_per_order(to_arrow(chunk)))
        if rows.num_rows:
            result = table.upsert(rows, join_cols=["order_id"])
            updated += result.rows_updated
            inserted += result.rows_inserted
        batch_seconds.append(time.perf_counter() - t0)
        n += len(chunk)
    seconds = time.perf_counter() - started
    return {
        "events": n,
        "seconds": seconds,
        "events_per_s": n / seconds if seconds > 0 else 0.0,
        "rows_updated": updated,
        "rows_inserted": inserted,
        "batch_seconds": batch_seconds,
    }


def main(argv: Sequence[str] | None = None) -> None:
    """Command line: print the run's result as JSON."""
    parser = argparse.ArgumentParser(description=DESCRIPTION)
    parser.add_argument("--stream", type=Path, required=True, help="landing folder")
    parser.add_argument("--work", type=Path, required=True, help="catalog + warehouse folder")
    parser.add_argument("--max-batch", type=int, default=100_000)
    parser.add_argument("--max-events", type=int, default=None)
    args = parser.parse_args(argv)
    result = run_upsert_baseline(args.stream, args.work, args.max_batch, args.max_events)
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
