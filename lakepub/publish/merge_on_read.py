"""Merge-on-read publishes of a ``current`` dataset: new rows plus position deletes of the old ones.

``write_mode: merge-on-read`` on a ``kind: current`` dataset. Copy-on-write rewrites every
partition a changed entity touches, so a batch spread over all partitions (a bucketed customer
table) rewrites the table. Here a publish writes only:

* the changed entities' new rows: one data file per affected partition, sorted by key;
* one position delete file per partition holding a replaced row, naming the (data file, position)
  of every row the batch replaces (an update, a delete, or a move to another partition);

and commits them with the ledger and every sibling dataset in the same atomic commit as today
(``store/deletes.stage_row_delta``: one snapshot, one data and one delete manifest).

Bounded reads (``bounded``). A publish that deletes rows of a partition rewrites that partition
whole instead (its live rows as one new file, its data and delete files dropped, in the same
commit) when afterwards more than ``fold_threshold`` (the dataset's; ``FOLD_THRESHOLD`` = 0.2 by
default) of its stored rows would be deleted ones. One that deletes rows of a partition already
holding ``MAX_DELETE_FILES`` delete files *folds its small files* (``_fold_small``): the data
files not larger than all smaller ones and the new rows together (``Part.large_files``: the files
earlier publishes appended, and an earlier fold's file once they outgrow it) are rewritten with
the new rows as one file, and ONE delete file naming every dead position of the files kept
replaces all the partition's delete files (no file kept, or files that are not the ones located:
rewritten whole). So after every publish a partition stores at most live / (1 - t) rows (1.25x
at 0.2; a table written before the rule or under a higher threshold, from its next publish
deleting from that partition) and applies at most 8 delete files; its data files grow by one per
publish adding rows to it, until a rewrite, a fold or ``lakepub compact`` (a fold leaves one per
size tier: O(log rows)). The cost, for a partition of S live rows whose publishes each replace c
of its rows (and add c): after k publishes kc of its S + kc stored rows are deleted, so the
fraction rule rewrites it every K = floor(tS / ((1 - t)c)) + 1 publishes at a cost of ~S rows,
~(1 - t)c / t rows per publish (4c at 0.2), whatever S is. Past S > 9(1 - t)c / t (36c at 0.2:
a 10M-row table of 16 buckets under 100k-change publishes is 100c) the count rule comes first,
every 9th publish: a fold costs the ~8c rows of the small files (and of earlier folds' files
while they are smaller than the rest: each row rewritten O(log rows) times before it sits in a
kept file) and the kept files' dead positions (at most tS / (1 - t)), not S. Before the fold (a
whole rewrite, ~S / 9 rows per publish) the mean publish into 10M rows was 1.78-1.79x CPU the
1M one over 10 publishes, 1.58-1.60x over 30; with it 1.09-1.13x and 1.26-1.31x (1.305x, over
the 1.3x line, in one of the two 30-publish runs; the 30 include the fraction rule's whole
rewrite, ~11 s CPU, and a third fold carrying the first two folds' files, ~5.8 s; medians
1.07-1.18x either way; a fold 2.7-3.4 s CPU instead of 9.8-15.0 s; loaded 3-12; ``scripts/bench/merge_on_read.py --scale``, README "Benchmarks").
What a read of the table costs between folds, per threshold: ``scripts/bench/mor_fold.py``.

The invariant of a fold: the files kept are not touched; a row of a dropped file is in the new
file exactly when it is live after the publish; the new delete file names exactly the dead rows
of the files kept (those the old delete files named and those the publish replaces)
(``tests/test_mor_small_fold.py``).

Where each live row sits is kept in the publisher's ``PublishedState.located``: per partition a
``publish/mor_index.Part`` (its data files' rows appended file after file, a live flag per row,
size-tiered runs of key hashes), updated by every commit of this publisher and read afresh
(``load_located``) when the table moved under it (another publisher, a compaction): the data
files are read without their deletes and the positions their delete files name are flagged
dead, so positions are the files' own. Keys are unique among live rows, so the rows a batch
replaces are found by binary searches of its changed keys' hashes, then compared key by key
(``Part.find``); ``PublishedState.rows`` is then a ``LiveRows`` view materialising a partition's
live rows only when something reads them whole.

The invariant, checked by ``tests/test_merge_on_read.py`` against the oracle and through DuckDB,
pyiceberg and iceberg-rust, and by ``tests/test_mor_index.py`` against a fresh read of the table:
the table read with its deletes applied is exactly the copy-on-write table (``Kind.apply`` of the
same changes); every row a delete names is a live row of a data file older than the delete.
Checksums stay per partition over the merged rows (``merged``: the rows ``Kind.apply`` gives, as
a lazy mapping); they are the version 2 checksums (``projection/checksum.py``), updated by
``publish/datasets.py`` from the rows the delta removes (``removed_rows``: a take of those rows)
and adds. Cost: what a publish writes, hashes and computes in memory follows the batch, apart
from numpy copies of the touched partitions' live flags (a byte per row) and the partitions
``bounded`` rewrites whole (that publish grows with the partition: "Bounded reads" above). Measured for 100k-event
publishes spread over all 16 buckets, 1M vs 10M live rows in one process, interleaved
(``scripts/bench/merge_on_read.py --scale``; 2-core VM at load 10-14): median CPU 0.63 s vs
0.72 s (1.13x; before the index, the same interleaving at load 10-18, 0.63 s vs 1.57 s, 2.50x:
``delta``'s join, the ``merged`` and ``after_commit`` filters over every row of the touched
partitions). Memory: per row of the
partitions' data files its published row (a replaced row until its partition is rewritten whole or
folded), a live flag, 16 bytes per index entry; a ``LiveRows`` partition once materialised.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.io.pyarrow import ArrowScan
from pyiceberg.manifest import DataFile
from pyiceberg.table import FileScanTask, Table

from lakepub.projection.current import CHANGE_SIGN
from lakepub.projection.partitioning import PartitionBy
from lakepub.publish.mor_index import LiveRows, Merged, Part
from lakepub.publish.published_state import PublishedState, conform, split, value_of
from lakepub.store.deletes import deleted_positions

WRITE_MODES = ("copy-on-write", "merge-on-read")
# A publish that would leave more than this share of a partition's stored rows deleted rewrites the
# partition whole instead (a dataset's ``fold_threshold``; module docstring "Bounded reads").
FOLD_THRESHOLD = 0.2
# A partition holding this many delete files has its small files folded by the next publish that
# deletes rows of it, leaving one delete file (one that only adds rows adds a data file). This bounds
# the files a reader opens and the small data files; DuckDB's scan cost follows the deleted rows
# and the data files carrying deletes, not the number of delete files (1 to 128 measured flat:
# ``scripts/bench/mor_scan_cost.py``, README "Benchmarks").
MAX_DELETE_FILES = 8


@dataclass(frozen=True)
class Delta:
    """What a merge-on-read publish writes: new rows and the positions they replace, by partition."""

    added: dict[Any, pa.Table]  # partition value -> the new rows (sorted by key): one data file each
    deleted: dict[Any, pa.Table]  # partition value -> (file_path, pos) of the replaced rows
    removed: dict[Any, np.ndarray]  # partition value -> the replaced rows' ids in its ``Part`` (sorted)
    whole: frozenset[Any] = frozenset()  # partitions rewritten whole instead (``bounded``)
    # partitions whose small files were folded instead (``bounded``): value -> the data files (paths)
    # rewritten into its ``added`` rows; ``deleted`` then holds every dead position of its other files,
    # one delete file replacing all of its delete files
    folded: Mapping[Any, frozenset[str]] = field(default_factory=dict)


def load_located(table: Table, tasks: list[FileScanTask], schema: pa.Schema, partition: PartitionBy,
                 key: tuple[str, ...]) -> PublishedState:
    """``published_state.load`` for a merge-on-read table: the live rows, and where each sits."""
    scan = table.scan(snapshot_id=table.metadata.current_snapshot_id)
    reader = ArrowScan(table.metadata, table.io, scan.projection(), scan.row_filter)
    cache: dict[str, pa.Table] = {}
    segments: dict[Any, list[tuple[str, pa.Table, np.ndarray]]] = {}
    files: dict[Any, list[DataFile]] = {}
    deletes: dict[Any, dict[str, DataFile]] = {}
    for task in tasks:
        value = value_of(task.file)
        files.setdefault(value, []).append(task.file)
        for delete_file in task.delete_files:
            deletes.setdefault(value_of(delete_file), {})[delete_file.file_path] = delete_file
        rows = reader.to_table([FileScanTask(task.file)])  # without its deletes: positions are the file's
        rows = conform(rows, schema)  # before its evolving publish, the table lacks a column the contract adds
        live = np.ones(rows.num_rows, dtype=bool)
        gone = deleted_positions(table.io, task.delete_files, task.file.file_path, cache)
        live[gone[gone < rows.num_rows]] = False
        segments.setdefault(value, []).append((task.file.file_path, rows, live))
    parts = {v: Part.read(s, key) for v, s in segments.items()}
    return PublishedState(table.metadata.current_snapshot_id, schema, LiveRows(parts), files,
                          {v: list(d.values()) for v, d in deletes.items()}, parts)


def delta(state: PublishedState, changes: pa.Table, values: frozenset[Any], key: tuple[str, ...],
          schema: pa.Schema, partition: PartitionBy) -> Delta:
    """The new rows and the replaced rows' positions of one batch's ``changes`` (``Kind.changes``
    of a ``current`` dataset) on the partitions ``values`` they touch.

    Only an entity with a ``before`` row (sign -1, carrying its old partition columns) has a live
    row, in the partition of that row: each partition's rows are looked up by the keys of its own
    -1 rows (``Part.find``: binary searches of their hashes, not a join over the partition)."""
    parts = state.located or {}
    signs = changes.column(CHANGE_SIGN)
    before_rows = _split_keys(changes.filter(pc.equal(signs, -1)), schema, partition, key)
    deleted, removed = {}, {}
    for value, before in before_rows.items():
        part = parts.get(value)
        if part is None or not part.count:
            continue
        ids = part.find(before)
        if len(ids):
            deleted[value] = part.locations(ids)
            removed[value] = ids
    new = changes.filter(pc.equal(signs, 1)).select(schema.names).cast(schema)
    added = {v: _sorted(t, key) for v, t in split(new, partition).items()}
    return Delta(added, deleted, removed)


def _split_keys(rows: pa.Table, schema: pa.Schema, partition: PartitionBy, key: tuple[str, ...]) -> dict[Any, pa.Table]:
    """The key columns of ``rows`` by the partition their (published) columns put them in."""
    return {v: t.select(list(key)) for v, t in split(rows.select(schema.names).cast(schema), partition).items()}


def bounded(state: PublishedState, change: Delta, rows: Mapping[Any, pa.Table],
            threshold: float | None = None) -> Delta:
    """``change`` with every partition it deletes rows of rewritten whole (its merged ``rows`` as
    one new file; its data and delete files dropped) when, after ``change``, more than
    ``threshold`` (``FOLD_THRESHOLD`` by default) of its stored rows would be deleted ones; and
    with the small files of a partition already holding ``MAX_DELETE_FILES`` delete files folded
    (``_fold_small``; module docstring: "Bounded reads")."""
    threshold = FOLD_THRESHOLD if threshold is None else threshold
    parts = state.located or {}
    whole = {v for v in change.deleted
             if _deleted_fraction(parts.get(v), change.removed.get(v), change.added.get(v)) > threshold}
    folded = {v: _fold_small(state, parts[v], change, v) for v in change.deleted
              if v not in whole and len(state.deletes.get(v, ())) >= MAX_DELETE_FILES}
    whole |= {v for v, fold in folded.items() if fold is None}
    folded = {v: fold for v, fold in folded.items() if fold is not None}
    if not whole and not folded:
        return change
    added = {**change.added, **{v: rows[v] for v in whole}, **{v: rows_ for v, (_, rows_, _) in folded.items()}}
    deleted = {v: t for v, t in change.deleted.items() if v not in whole and v not in folded}
    deleted.update({v: dead for v, (_, _, dead) in folded.items() if dead is not None})
    return Delta(added, deleted, change.removed, frozenset(whole), {v: paths for v, (paths, _, _) in folded.items()})


def _fold_small(state: PublishedState, part: Part, change: Delta, value: Any
                ) -> tuple[frozenset[str], pa.Table, pa.Table | None] | None:
    """A partition's delete files folded without rewriting its large files: the data files of
    ``part`` that are not larger than all its smaller files and the new rows together (the small
    files earlier publishes appended, and what an earlier fold made of them) rewritten with the new
    rows as one file, and ONE delete file naming every dead position of the files kept. Returns
    (the paths rewritten, the new file's rows, the delete file's (file_path, pos) or None), or None
    to rewrite the partition whole (no file is kept, or the partition's files are not the ones
    located: never copy a row into a new file while its old file might stay)."""
    added = change.added.get(value)
    kept = part.large_files(added.num_rows if added is not None else 0)
    if not kept or set(part.paths) != {f.file_path for f in state.files.get(value, ())}:
        return None
    dropped = frozenset(p for p in part.paths if p not in kept)
    live = part.live_after(change.removed.get(value))
    carried = part.take(part.ids_in(dropped, live)).select(state.schema.names).cast(state.schema)
    rows = pa.concat_tables([carried, added]) if added is not None else carried
    dead = part.ids_in(kept, ~live)
    return dropped, rows, part.locations(dead) if len(dead) else None


def _deleted_fraction(part: Part | None, removed: np.ndarray | None, added: pa.Table | None) -> float:
    """The deleted share of a partition's stored rows once ``removed`` are deleted and ``added``
    appended (0 for an unknown partition: nothing of it is located, so nothing is deleted)."""
    if part is None:
        return 0.0
    stored = len(part.live) + (added.num_rows if added is not None else 0)
    deleted = len(part.live) - part.count + (len(removed) if removed is not None else 0)
    return deleted / stored if stored else 0.0


def merged(state: PublishedState, change: Delta, values: frozenset[Any], schema: pa.Schema) -> Merged:
    """The partitions' rows after ``change``: what ``Kind.apply`` gives (the rows of the changed
    keys replaced by the new rows), as a mapping that computes a partition's rows only when asked
    (a publish itself never asks: ``bounded``'s whole rewrites, an evolution, a switch do)."""
    return Merged(state.located or {}, values, change.removed, change.added, schema)


def removed_rows(state: PublishedState, change: Delta) -> dict[Any, pa.Table]:
    """The published rows ``change`` replaces, by partition (a take of those rows only)."""
    parts = state.located or {}
    return {v: parts[v].take(ids) for v, ids in change.removed.items() if v in parts}


def dropped_files(state: PublishedState, whole: Iterable[Any], folded: Mapping[Any, frozenset[str]] = {}
                  ) -> tuple[list[DataFile], list[DataFile]]:
    """The data and delete files a commit removes: all of the partitions rewritten ``whole``; the
    small data files (``folded``: value -> their paths) and all delete files of a partition folded
    (a ``Delta``'s ``whole`` and ``folded``, ``bounded``)."""
    whole = list(whole)
    data = state.files_of(whole)
    data += [f for v, paths in folded.items() for f in state.files.get(v, ()) if f.file_path in paths]
    return data, [f for v in (*whole, *folded) for f in state.deletes.get(v, ())]


def after_commit(state: PublishedState, snapshot_id: int, values: frozenset[Any], rows: Mapping[Any, pa.Table],
                 key: tuple[str, ...], new_files: list[DataFile], new_deletes: list[DataFile],
                 change: Delta | None, replaced: bool) -> PublishedState:
    """The state after a commit that wrote ``change`` (merge-on-read) or replaced the partitions
    ``values`` whole (``replaced``: a build, or a switch from copy-on-write)."""
    by_file = {value_of(f): f for f in new_files}
    parts = dict(state.located or {})
    files = {v: list(fs) for v, fs in state.files.items()}
    deletes = {v: list(fs) for v, fs in state.deletes.items()}
    for value in values:
        new_file = by_file.get(value)
        path = new_file.file_path if new_file is not None else None
        if replaced or (change is not None and value in change.whole):
            files.pop(value, None)
            deletes.pop(value, None)
            written = rows.get(value)
            part = Part.of(written, path, key) if written is not None and written.num_rows and path else None
        elif change is not None and value in change.folded:
            dropped = change.folded[value]
            files[value] = [f for f in files.get(value, []) if f.file_path not in dropped]
            deletes.pop(value, None)
            part = parts[value].without(dropped, change.removed.get(value)).after(None, change.added.get(value), path)
        else:
            old = parts.get(value)
            added = change.added.get(value) if change is not None else None
            removed = change.removed.get(value) if change is not None else None
            if old is not None:
                part = old.after(removed, added, path)
            else:
                part = Part.of(added, path, key) if added is not None and added.num_rows and path else None
        if part is not None and part.count:
            parts[value] = part
        else:
            parts.pop(value, None)
        if new_file is not None:
            files.setdefault(value, []).append(new_file)
    for delete_file in new_deletes:
        deletes.setdefault(value_of(delete_file), []).append(delete_file)
    return PublishedState(snapshot_id, state.schema, LiveRows(parts), {v: fs for v, fs in files.items() if fs},
                          {v: fs for v, fs in deletes.items() if fs}, parts)


def _sorted(rows: pa.Table, key: tuple[str, ...]) -> pa.Table:
    if rows.num_rows < 2:
        return rows.combine_chunks()
    return rows.take(pc.sort_indices(rows, sort_keys=[(c, "ascending") for c in key])).combine_chunks()
