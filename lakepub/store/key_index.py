"""The ledger's key index: what a publish needs of the ledger, found without scanning it.

A publish looks up the ledger rows of its batch's orders. Scanning the ledger (a DuckDB join)
reads every row's keys and payload: ~20 ns per row, so the lookup grew with history (~0.23 s at
10M rows, over half of a 100k-event publish). The index is a small LSM tree of *runs*:

* a run is an uncompressed Arrow IPC file holding ledger rows (entity keys, version, state,
  floor; ``index_schema`` of the dataset's contract, ~33 bytes a row for orders, ``INDEX_SCHEMA``)
  sorted by ``k1``; runs are self-describing (their IPC schema), and it is memory-mapped, so a lookup
  binary-searches the keys in place and touches only the pages on its search paths and the rows
  it finds, not the whole ledger;
* every ledger snapshot written by a publish lists the runs that hold exactly its rows in its
  summary (``lakepub.key-index``: JSON ``[[file name, rows], ...]``, oldest first). A publish
  adds one run with its new ledger rows; the newest ``FANOUT`` runs are merged once their sizes
  are within a factor ``FANOUT`` of each other (size-tiered), so equal batches of b rows make a
  base-``FANOUT`` counter: O(log(N/b)) runs, each row rewritten ~log_FANOUT(N/b) times (at most
  log_1.75(N/b) for any sizes; ``tests/test_key_index.py`` checks the bounds);
* the invariant the projection relies on: if a snapshot names runs, they hold all of its rows.
  A snapshot without the property (a ledger from before the index, or an index switched off) is looked up by the DuckDB join; a publish on top of it
  writes no index (it would be partial). Ledger compaction writes a complete one.

Runs are immutable and named by a UUID under ``<ledger location>/index/``; files a snapshot
names are referenced for the janitor (``maintenance/reachability.py``), those no retained
snapshot names (merged away, expired, or written by a publish that lost its commit) are orphans.

Memory-mapping needs a file system: on an object store the runs are uploaded next to the ledger
and mapped from local copies in a disk cache (``store/cache.py``; the snapshot then also records
their sizes in bytes, ``lakepub.key-index-bytes``: ``[bytes, ...]`` in run order). A run that cannot
be read (deleted by hand) makes ``publish/lookup.py`` fall back to the join and stop indexing
until ``lakepub compact`` writes a complete index again.

Memory: a lookup maps the runs (file pages of the kernel's page cache, counted in the process's
RSS only while mapped, ~8 bytes per ledger row for a large batch); a merge maps its runs anew for
each key range of ``BATCH_ROWS`` rows and copies out only that range, so its memory does not grow
with the size of the runs it merges.

Runs written before a contract evolution keep their schema (without the new field, or with the
type before a promotion): lookups and merges read them ``conform``-ed to the current one.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.table.snapshots import Snapshot

from lakepub.contract.model import Contract
from lakepub.contract.orders import ORDERS_CONTRACT

INDEX_PROPERTY = "lakepub.key-index"
SIZES_PROPERTY = "lakepub.key-index-bytes"  # [bytes of each run, in run order]: runs on an object store
INDEX_FOLDER = "index"
_OWN = ("k1", "k2", "version", "compacted", "floor")  # the index's own columns


def index_schema(contract: Contract) -> pa.Schema:
    """The rows of a contract's index: ``k1 int64, k2 int32, version int64, <state fields>,
    compacted bool``. k2 keeps the low 32 bits of the ledger's k2 (with k1 a 96-bit check: the
    lookup does not compare keys), and ``compacted`` stands for ``floor``, as compaction is the
    only writer of a floor and sets it to the row's version. The version is int64 whatever the
    contract's version type (the ledger's column may be an int)."""
    clash = [n for n in contract.state_names if n in _OWN]
    if clash:
        raise ValueError(f"contract {contract.schema_ref}: field(s) {', '.join(clash)} would shadow a column of the "
                         "ledger's key index; rename them")
    return pa.schema([("k1", pa.int64()), ("k2", pa.int32()), ("version", pa.int64())]
                     + [(n, contract.field(n).type.arrow) for n in contract.state_names] + [("compacted", pa.bool_())])


def payload_schema(schema: pa.Schema) -> pa.Schema:
    """What a lookup returns per row found in runs of the index schema ``schema``: ``version,
    <state fields>, floor``."""
    return pa.schema([f for f in schema if f.name not in ("k1", "k2", "compacted")]).append(
        pa.field("floor", pa.int64()))


def conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """Rows of a run written before a contract evolution (``publish/evolution.py``), in ``schema``:
    a state field it lacks is null, a promoted one cast (int->long, float->double, decimal
    precision). Runs are never rewritten for an evolution; merges write the new schema."""
    if table.schema.equals(schema):
        return table
    return pa.table([table.column(f.name).cast(f.type) if f.name in table.column_names
                     else pa.nulls(table.num_rows, f.type) for f in schema], schema=schema)


# The orders index (~33 bytes a row): existing runs have exactly this schema.
INDEX_SCHEMA = index_schema(ORDERS_CONTRACT)
_PAYLOAD_SCHEMA = payload_schema(INDEX_SCHEMA)
PAYLOAD = _PAYLOAD_SCHEMA.names  # version, day, cents, deleted, floor

FANOUT = 4  # runs merged together once within this size factor of each other
MAX_RUNS = 16  # beyond this (runs of very uneven sizes), the cheapest FANOUT neighbours are merged
BATCH_ROWS = 1 << 17  # rows per record batch of merged and compacted runs (~6 MB): what a merge holds


@dataclass(frozen=True)
class Run:
    name: str  # file name under <ledger location>/index/
    rows: int
    size: int | None = None  # bytes, recorded for runs on an object store (store/cache.py checks copies)


def runs_of(snapshot: Snapshot | None) -> list[Run] | None:
    """The runs holding all rows of a ledger snapshot; ``[]`` before the first publish, ``None``
    when the snapshot has no index (look it up by scanning)."""
    if snapshot is None:
        return []
    raw = (snapshot.summary.additional_properties if snapshot.summary else {}).get(INDEX_PROPERTY)
    if raw is None:
        return None
    entries = json.loads(raw)
    sizes = json.loads((snapshot.summary.additional_properties if snapshot.summary else {}).get(SIZES_PROPERTY)
                       or "null")
    if not isinstance(sizes, list) or len(sizes) != len(entries):
        sizes = [None] * len(entries)
    return [Run(str(name), int(rows), int(size) if size is not None else None)
            for (name, rows), size in zip(entries, sizes)]


def encode(runs: Sequence[Run]) -> str:
    return json.dumps([[r.name, r.rows] for r in runs], separators=(",", ":"))


def properties(runs: Sequence[Run]) -> dict[str, str]:
    """The snapshot summary properties naming ``runs``: the run list, and their sizes in bytes
    when known (runs on an object store: ``store/cache.py`` checks local copies against them)."""
    out = {INDEX_PROPERTY: encode(runs)}
    if any(r.size is not None for r in runs):
        out[SIZES_PROPERTY] = json.dumps([r.size for r in runs], separators=(",", ":"))
    return out


def folder_of(table_location: str) -> Path | None:
    """The local folder of a table's index, or None if the table is not on a local file system."""
    location = table_location.rstrip("/")
    if location.startswith("file://"):
        location = location[len("file://"):]
    elif "://" in location:
        return None
    return Path(location) / INDEX_FOLDER


def referenced_paths(table_location: str, snapshot: Snapshot) -> list[str]:
    """Locations (as the table spells them) of the runs a snapshot names, for the janitor."""
    runs = runs_of(snapshot) or []
    base = table_location.rstrip("/")
    return [f"{base}/{INDEX_FOLDER}/{run.name}" for run in runs]


# --- writing --------------------------------------------------------------------------------


def as_index_rows(rows: pa.Table, contract: Contract = ORDERS_CONTRACT) -> pa.Table:
    """Ledger rows of the contract (k1, k2, its version field, its state fields; floor optional,
    null or the version) in the index's schema (``index_schema``), in their order."""
    schema = index_schema(contract)
    k2 = low_k2(rows.column("k2").to_numpy())
    compacted = (pc.is_valid(rows.column("floor")) if "floor" in rows.column_names
                 else pa.array(np.zeros(rows.num_rows, dtype=bool)))
    columns = {**{n: rows.column(n) for n in ("k1", *contract.state_names)},
               "version": rows.column(contract.entity.version).cast(pa.int64()), "k2": pa.array(k2),
               "compacted": compacted}
    return pa.table([columns[n] for n in schema.names], schema=schema)


def index_rows(rows: pa.Table, contract: Contract = ORDERS_CONTRACT) -> pa.Table:
    """Ledger rows (``as_index_rows``) as index rows sorted by k1."""
    table = as_index_rows(rows, contract)
    return table.take(pa.array(np.argsort(_np(table.column("k1")))))


def low_k2(k2: np.ndarray) -> np.ndarray:
    """The part of a ledger k2 the index keeps."""
    return np.asarray(k2, dtype=np.int64).astype(np.int32)


def write_run(folder: Path, batches: Iterable[pa.RecordBatch | pa.Table], schema: pa.Schema = INDEX_SCHEMA) -> Run:
    """Write sorted index rows (already in k1 order across ``batches``) as one run of ``schema``."""
    folder.mkdir(parents=True, exist_ok=True)
    name = f"{uuid.uuid4()}.arrow"
    rows = 0
    with pa.OSFile(str(folder / name), "wb") as sink, pa.ipc.new_file(sink, schema) as writer:
        for batch in batches:
            if batch.num_rows:
                table = batch if isinstance(batch, pa.Table) else pa.Table.from_batches([batch])
                writer.write_table(table.cast(schema).combine_chunks(), max_chunksize=max(table.num_rows, 1))
                rows += batch.num_rows
    return Run(name, rows)


def plan_merge(sizes: Sequence[int]) -> tuple[int, int] | None:
    """The slice ``[i, j)`` of runs (given by their row counts, oldest first) to merge next, or None.

    The newest ``FANOUT`` runs are merged when the largest is less than ``FANOUT`` times the
    smallest (equal appends then cascade like a counter in base ``FANOUT``, and a merge grows
    every row's run at least 1.75x); if uneven sizes leave more than ``MAX_RUNS`` runs, the
    ``FANOUT`` neighbours with the fewest rows are merged.
    """
    n = len(sizes)
    if n >= FANOUT:
        newest = sizes[n - FANOUT:]
        if max(newest) < FANOUT * min(newest):
            return n - FANOUT, n
    if n > MAX_RUNS:
        window = [sum(sizes[i:i + FANOUT]) for i in range(n - FANOUT + 1)]
        i = int(np.argmin(window))
        return i, i + FANOUT
    return None


def plan_append(runs: Sequence[Run], new_rows: int) -> list[list[Run | None]]:
    """The runs after appending a run of ``new_rows`` rows and merging as ``plan_merge`` says,
    each given by the runs it is made of (``None``: the new rows). Merges are planned before any
    file is written, so a run that a cascade would merge away at once is never written."""
    groups: list[list[Run | None]] = [[run] for run in runs] + [[None]]
    sizes = [run.rows for run in runs] + [new_rows]
    while (merge := plan_merge(sizes)) is not None:
        i, j = merge
        groups[i:j] = [[part for group in groups[i:j] for part in group]]
        sizes[i:j] = [sum(sizes[i:j])]
    return groups


class KeyIndex:
    """Looks keys up in a dataset's runs and writes runs. Runs are mapped per use and unmapped
    after it: their pages stay in the kernel's page cache for the next publish, but not in this
    process's resident memory between publishes (re-mapping a 10M-row index costs ~5 ms).

    ``schema``: the index schema of the dataset's contract (``index_schema``), what new runs are
    written with; a lookup reads each run by its own IPC schema."""

    def __init__(self, folder: Path, schema: pa.Schema = INDEX_SCHEMA):
        self.folder = folder
        self.schema = schema

    def batches(self, run: Run) -> list[pa.RecordBatch]:
        """The record batches of a run, memory-mapped (released with the last reference)."""
        reader = _map(self.folder / run.name)
        return [reader.get_batch(i) for i in range(reader.num_record_batches)]

    def lookup(self, runs: Sequence[Run], k1: np.ndarray, k2: np.ndarray) -> tuple[pa.Table, np.ndarray]:
        """The index rows (``payload_schema``: version, state fields, floor) of the keys
        ``(k1[i], k2[i])`` and, per row, its ``i``."""
        order = np.argsort(k1)
        q1, q2 = k1[order], low_k2(k2)[order]
        payload = payload_schema(self.schema)
        found: list[pa.Table] = []
        positions: list[np.ndarray] = []
        for run in runs:
            for batch in self.batches(run):
                rows, at = _search(batch, q1, q2)
                if rows.size:
                    found.append(conform(_payload(batch, rows), payload))
                    positions.append(order[at])
        if not found:
            return empty_payload(self.schema), np.zeros(0, dtype=np.int64)
        return pa.concat_tables(found), np.concatenate(positions)

    def append(self, runs: Sequence[Run], new_rows: pa.Table) -> list[Run]:
        """Write the index rows ``new_rows`` (``index_rows``) on top of ``runs``: the new run list."""
        out = []
        for group in plan_append(runs, new_rows.num_rows):
            if group == [None]:
                out.append(write_run(self.folder, [new_rows], self.schema))
            elif len(group) == 1:
                out.append(group[0])
            else:
                sources = [_Source.of_table(new_rows) if run is None else _Source.of_file(self.folder / run.name)
                           for run in group]
                out.append(self.merge(sources, sum(new_rows.num_rows if r is None else r.rows for r in group)))
        return out

    def merge(self, sources: Sequence["_Source"], rows: int) -> Run:
        """One run with the ``rows`` rows of ``sources``, written key range by key range."""
        chunks = max(1, -(-rows // BATCH_ROWS))
        # k1 is a uniform 64-bit hash (lakepub.keys): equal slices of its range hold ~equal rows.
        bounds = [-(1 << 63) + (i << 64) // chunks for i in range(chunks)] + [None]
        return write_run(self.folder, _merged(sources, bounds, self.schema), self.schema)


@dataclass(frozen=True)
class _Source:
    """Rows to merge: k1-sorted record batches, from a run file or in memory, with each batch's
    first and last k1 (so that a key range only touches the batches overlapping it)."""

    open: Callable[[], Callable[[int], pa.RecordBatch]]  # -> get_batch(i); a run is mapped anew each time
    ranges: list[tuple[int, int]]

    @classmethod
    def of_file(cls, path: Path) -> "_Source":
        reader = _map(path)
        ranges = [_key_range(reader.get_batch(i)) for i in range(reader.num_record_batches)]
        return cls(lambda: _map(path).get_batch, ranges)

    @classmethod
    def of_table(cls, table: pa.Table) -> "_Source":
        batches = [b for b in table.to_batches() if b.num_rows]
        return cls(lambda: batches.__getitem__, [_key_range(b) for b in batches])


def _map(path: Path) -> pa.ipc.RecordBatchFileReader:
    """A run file, memory-mapped (unmapped when the reader and its batches are released)."""
    return pa.ipc.open_file(pa.memory_map(str(path)))


def _key_range(batch: pa.RecordBatch) -> tuple[int, int]:
    k1 = _np(batch.column("k1"))
    return int(k1[0]), int(k1[-1])


def _merged(sources: Sequence[_Source], bounds: list[int | None], schema: pa.Schema) -> Iterator[pa.Table]:
    """The rows of the sources, one k1-sorted table per key range ``[bound, next bound)``.

    Each range maps its runs afresh and copies out only its slices of the batches overlapping
    it, so the memory (resident mapped pages included) is ~3 key ranges' rows whatever the size
    of the runs merged, and the work is linear in the rows."""
    for lo_key, hi_key in zip(bounds[:-1], bounds[1:]):
        parts = []
        for source in sources:
            get = None
            for i, (first, last) in enumerate(source.ranges):
                if last < lo_key or (hi_key is not None and first >= hi_key):
                    continue
                get = get or source.open()
                batch = get(i)
                k1 = _np(batch.column("k1"))
                lo = int(np.searchsorted(k1, lo_key, "left"))
                hi = len(k1) if hi_key is None else int(np.searchsorted(k1, hi_key, "left"))
                if hi > lo:
                    parts.append(conform(pa.Table.from_batches([batch.slice(lo, hi - lo)]), schema))
        if parts:
            chunk = pa.concat_tables(parts).combine_chunks()  # copied out: the mappings can go
            del parts, get, batch, k1  # unmap
            # stable sort is timsort: it merges the already sorted slices in ~linear time
            yield chunk.take(pa.array(np.argsort(_np(chunk.column("k1")), kind="stable")))


def _search(batch: pa.RecordBatch, q1: np.ndarray, q2: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rows of a k1-sorted batch matching sorted needles: (row numbers, needle numbers)."""
    k1 = _np(batch.column("k1"))
    if not len(k1):
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    # Only the needles within the batch's key range are searched.
    first, last = np.searchsorted(q1, k1[0], "left"), np.searchsorted(q1, k1[-1], "right")
    needles = q1[first:last]
    lo = np.searchsorted(k1, needles, "left")
    hit = np.flatnonzero(k1[np.minimum(lo, len(k1) - 1)] == needles)
    if not hit.size:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    hi = np.searchsorted(k1, needles[hit], "right")  # an order has a row per version
    count = hi - lo[hit]
    rows = np.repeat(lo[hit], count) + (np.arange(int(count.sum())) - np.repeat(np.cumsum(count) - count, count))
    at = np.repeat(hit + first, count)
    same = batch.column("k2").to_numpy()[rows] == q2[at]
    return rows[same], at[same]


def _payload(batch: pa.RecordBatch, rows: np.ndarray) -> pa.Table:
    """The payload columns (``payload_schema``) of some rows of an index batch (floor from the
    compacted flag)."""
    names = [n for n in batch.schema.names if n not in ("k1", "k2")]
    taken = pa.Table.from_batches([batch.select(names)]).take(pa.array(rows))
    floor = pc.if_else(taken.column("compacted"), taken.column("version"), pa.scalar(None, pa.int64()))
    return taken.drop_columns(["compacted"]).append_column("floor", floor)


def empty_payload(schema: pa.Schema = INDEX_SCHEMA) -> pa.Table:
    """No rows, in the payload schema of index rows of ``schema``."""
    return payload_schema(schema).empty_table()


def _np(column: pa.Array | pa.ChunkedArray) -> np.ndarray:
    return np.asarray(column.to_numpy(zero_copy_only=False) if isinstance(column, pa.ChunkedArray)
                      else column.to_numpy(zero_copy_only=column.null_count == 0), dtype=np.int64)
