"""Baseline: the seed design's single-process SQLite protocol, done faithfully.

Tables::

    ledger(order_id, version, payload, PRIMARY KEY(order_id, version))
    current(order_id PRIMARY KEY, version, day, cents, deleted)
    summary(day, cents, orders)
    checkpoint(id = 1, offset)   -- offset: JSON position vector {"p0": n0, ...}

``publish`` applies one batch in ONE transaction: check the start position
against the checkpoint; per event validate, serialise the payload
(``json.dumps(sort_keys=True)``), look it up in the ledger for a conflict,
``INSERT OR IGNORE`` it into the ledger and upsert ``current`` keeping the higher
version; then delete and fully recompute ``summary`` and advance the checkpoint.

Run: ``python scripts/baselines/seed_sqlite.py --stream DIR --db PATH --max-batch N``
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import time
from collections.abc import Iterator, Sequence
from datetime import date
from itertools import islice
from pathlib import Path
from typing import Any

from lakepub.generate import partition_dirs, read_partition  # the same reader for every baseline

Position = dict[str, int]  # partition folder name -> records consumed
DESCRIPTION = "Baseline: the seed design's single-process SQLite protocol."

SCHEMA = """
CREATE TABLE IF NOT EXISTS ledger (
    order_id TEXT NOT NULL, version INTEGER NOT NULL, payload TEXT NOT NULL,
    PRIMARY KEY (order_id, version));
CREATE TABLE IF NOT EXISTS current (
    order_id TEXT PRIMARY KEY, version INTEGER NOT NULL,
    day TEXT, cents INTEGER, deleted INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS summary (
    day TEXT PRIMARY KEY, cents INTEGER NOT NULL, orders INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS checkpoint (
    id INTEGER PRIMARY KEY CHECK (id = 1), offset TEXT NOT NULL);
"""

UPSERT_CURRENT = """
INSERT INTO current (order_id, version, day, cents, deleted) VALUES (?, ?, ?, ?, ?)
ON CONFLICT (order_id) DO UPDATE SET
    version = excluded.version, day = excluded.day,
    cents = excluded.cents, deleted = excluded.deleted
WHERE excluded.version > current.version
"""

RECOMPUTE_SUMMARY = """
INSERT INTO summary (day, cents, orders)
SELECT day, SUM(cents), COUNT(*) FROM current WHERE deleted = 0 GROUP BY day
"""


class ConflictError(ValueError):
    """One (order_id, version) arrived with two different payloads."""


class CheckpointMismatch(RuntimeError):
    """A batch's start position is not the committed checkpoint."""


def validate(event: dict[str, Any]) -> tuple[str, int, str | None, int | None, bool]:
    """Check one event's shape; return (order_id, version, day, cents, deleted)."""
    oid, version = event.get("order_id"), event.get("version")
    day, cents, deleted = event.get("day"), event.get("cents"), event.get("deleted")
    if not isinstance(oid, str) or not oid:
        raise ValueError(f"bad order_id in {event!r}")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise ValueError(f"bad version in {event!r}")
    if not isinstance(deleted, bool):
        raise ValueError(f"bad deleted in {event!r}")
    if day is None or cents is None:
        if not deleted:
            raise ValueError(f"live event without day/cents: {event!r}")
    if day is not None:
        if not isinstance(day, str):
            raise ValueError(f"bad day in {event!r}")
        date.fromisoformat(day)
    if cents is not None and (not isinstance(cents, int) or isinstance(cents, bool) or cents < 0):
        raise ValueError(f"bad cents in {event!r}")
    return oid, version, day, cents, deleted


def connect(db_path: Path) -> sqlite3.Connection:
    """Open (and create) the baseline database; autocommit, explicit transactions."""
    db = sqlite3.connect(db_path, isolation_level=None)
    db.executescript(SCHEMA)
    return db


def read_checkpoint(db: sqlite3.Connection) -> Position | None:
    """The committed position vector, or None before the first publish."""
    row = db.execute("SELECT offset FROM checkpoint WHERE id = 1").fetchone()
    return None if row is None else json.loads(row[0])


def _nonzero(pos: Position) -> Position:
    """A position without its zero entries (a partition not yet read is at 0)."""
    return {name: n for name, n in pos.items() if n}


def publish(db: sqlite3.Connection, events: Sequence[dict[str, Any]], start: Position, end: Position) -> None:
    """Apply ``events`` (records between ``start`` and ``end``) in one transaction."""
    db.execute("BEGIN IMMEDIATE")
    try:
        committed = read_checkpoint(db) or {}
        if _nonzero(committed) != _nonzero(start):
            raise CheckpointMismatch(f"batch starts at {start}, checkpoint is {committed}")
        for event in events:
            oid, version, day, cents, deleted = validate(event)
            payload = json.dumps(event, sort_keys=True)
            row = db.execute(
                "SELECT payload FROM ledger WHERE order_id = ? AND version = ?", (oid, version)
            ).fetchone()
            if row is not None and row[0] != payload:
                raise ConflictError(f"{oid} v{version}: {row[0]} != {payload}")
            db.execute("INSERT OR IGNORE INTO ledger VALUES (?, ?, ?)", (oid, version, payload))
            db.execute(UPSERT_CURRENT, (oid, version, day, cents, int(deleted)))
        db.execute("DELETE FROM summary")
        db.execute(RECOMPUTE_SUMMARY)
        db.execute(
            "INSERT INTO checkpoint (id, offset) VALUES (1, ?) "
            "ON CONFLICT (id) DO UPDATE SET offset = excluded.offset",
            (json.dumps(end, sort_keys=True),),
        )
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        raise


def batches(
    stream_dir: Path, start: Position, max_batch: int
) -> Iterator[tuple[list[dict[str, Any]], Position, Position]]:
    """Yield (events, start, end) batches of at most ``max_batch`` records.

    Like a consumer polling every partition, a batch takes an equal share from
    each partition (in partition order; the share of an exhausted partition goes
    to the others), so a batch is a slice of stream time.  Positions count the
    records consumed per partition.
    """
    parts = partition_dirs(stream_dir)
    readers = {p.name: islice(read_partition(p), start.get(p.name, 0), None) for p in parts}
    pos: Position = {p.name: start.get(p.name, 0) for p in parts}
    active = list(readers)
    while active:
        begin, batch = dict(pos), []
        while active and len(batch) < max_batch:
            share = max(1, (max_batch - len(batch)) // len(active))
            for name in list(active):
                want = min(share, max_batch - len(batch))
                got = len(batch)
                batch.extend(islice(readers[name], want))
                pos[name] += len(batch) - got
                if len(batch) - got < want:
                    active.remove(name)
        if batch:
            yield batch, begin, dict(pos)


def summary_of(db: sqlite3.Connection) -> dict[str, list[int]]:
    """The published summary as {day_iso: [cents, orders]}."""
    rows = db.execute("SELECT day, cents, orders FROM summary ORDER BY day").fetchall()
    return {day: [cents, orders] for day, cents, orders in rows}


def run_seed_baseline(stream_dir: Path, db_path: Path, max_batch: int = 100_000) -> dict[str, Any]:
    """Publish a whole landing folder batch by batch; resumes from the checkpoint."""
    db = connect(Path(db_path))
    try:
        started = time.perf_counter()
        n = 0
        batch_seconds: list[float] = []
        resume = read_checkpoint(db) or {}
        for events, begin, end in batches(Path(stream_dir), resume, max_batch):
            t0 = time.perf_counter()
            publish(db, events, begin, end)
            batch_seconds.append(time.perf_counter() - t0)
            n += len(events)
        seconds = time.perf_counter() - started
        return {
            "events": n,
            "seconds": seconds,
            "events_per_s": n / seconds if seconds > 0 else 0.0,
            "batches": len(batch_seconds),
            "publish_seconds": sum(batch_seconds),
            "summary": summary_of(db),
        }
    finally:
        db.close()


def main(argv: Sequence[str] | None = None) -> None:
    """Command line: print the run's result as JSON."""
    parser = argparse.ArgumentParser(description=DESCRIPTION)
    parser.add_argument("--stream", type=Path, required=True, help="landing folder")
    parser.add_argument("--db", type=Path, required=True, help="SQLite file")
    parser.add_argument("--max-batch", type=int, default=100_000)
    args = parser.parse_args(argv)
    print(json.dumps(run_seed_baseline(args.stream, args.db, args.max_batch), indent=1))


if __name__ == "__main__":
    main()
