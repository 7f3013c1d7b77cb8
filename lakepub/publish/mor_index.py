"""Where each row of a merge-on-read partition sits, found by a batch's keys, not by a pass over the partition.

A merge-on-read publish (``publish/merge_on_read.py``) must find, for the entities its batch
changes, the data file and position of their live rows, and after its commit know the same of
the partition as it now is. Filtering, joining or copying every row of each affected partition
makes a publish grow with the table (a bucketed table: every partition is affected), so a
partition is kept here as a ``Part`` that a publish only ever *appends to*:

* ``rows``: every row of the partition's data files, file after file in file order, deleted rows
  included (an Arrow table whose chunks are the files' rows: appending a file copies nothing);
  a row's id is its index there, its position in its file ``id - starts[segment]``;
* ``live``: a boolean per row (a publish's replaced rows are set False in a copy of it: one byte
  per row, ~0.6 ms per million);
* an index of the live rows' keys: size-tiered *runs* of (64-bit key hash ``k1`` of
  ``keys.entity_keys``, row id) sorted by hash. A publish appends one run of its new rows; the
  newest runs are merged (dropping dead rows) once the older is less than twice the newer, so a
  partition holds O(log(rows / batch)) runs.

A fold of a partition's small files (``merge_on_read.bounded``, at 8 delete files) is the one
step that removes rows: ``without`` drops the folded files' rows and renumbers the kept files'
ids and index entries (numpy over the index: no rehash of the kept rows), then ``after`` appends
the fold's new file (hashing its rows, the carried ones again); ``large_files`` picks the files a
fold keeps. Measured for a 625k-row partition folding 8 appended 6k-row files (46k rows carried):
``without`` 20-28 ms, ``after`` 21 ms CPU (16 such partitions: ~0.7 s of a fold publish's ~1.5 s
extra; reusing the carried rows' hashes would save about half of ``after``, not done).

A lookup binary-searches each run for the batch's hashes (``searchsorted``: O(batch x log
rows)), keeps the candidates that are live, and compares their key columns with the batch's
key exactly, so a hash collision can never select a wrong row. The published rows a reader
needs whole (``live_rows``: a foreign head's check, an evolution, a partition rewritten whole)
are materialised on demand and cached; a publish itself takes only the replaced rows (for the
checksums) and the new ones.

The invariant (``tests/test_merge_on_read.py``): ``live_rows()`` are exactly the partition's rows
as read with its delete files applied, and ``find`` returns the ids of the live rows of exactly
the keys asked for. Cost, measured for a 100k-event publish into 16 buckets: the lookups,
location and run updates are ~O(batch); what remains O(rows) are numpy copies of ``live``
(1 byte per row) and the occasional merge, of index runs and of row chunks: appended rows are
kept in size-tiered chunks like the runs (the newest chunks are copied into one while the older
is at most twice the newer), so each row is copied O(log rows) times in all and a partition spans
O(log rows) chunks (before: copied whole once it spanned 64 chunks). The largest merge still
copies the whole partition, once per doubling: 150 appends of 6k rows to a 625k-row, 10-column
partition cost 1.41 s CPU in all, median 8.4 ms, max 59 ms, 2 chunks at the end (the 64-chunk
rule: 1.45 s, 8.6 ms, 69 ms, 23 chunks; a reviewer saw a 0.24 s append under load 16). Memory: per row of the data files its published
row (deleted rows until the partition is rewritten whole or folded: ``merge_on_read.bounded``), a
byte, and 16 bytes per index entry.
"""

from __future__ import annotations

from typing import Any, Iterator, Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lakepub.keys import entity_keys

_MAX_CHUNKS = 64  # rows read from many files are copied into one chunk on the first append
_Run = tuple[np.ndarray, np.ndarray]  # (sorted k1, row ids)


def key_hashes(rows: pa.Table, key: tuple[str, ...]) -> np.ndarray:
    """The 64-bit hash (``k1`` of ``keys.entity_keys``) of each row's key."""
    if not rows.num_rows:
        return np.empty(0, np.int64)
    return entity_keys(rows.select(list(key)), list(key))[0]


def _run(k1: np.ndarray, ids: np.ndarray) -> _Run:
    order = np.argsort(k1, kind="stable")
    return k1[order], ids[order]


class Part:
    """One partition of a merge-on-read table as its data files hold it (module docstring)."""

    __slots__ = ("rows", "live", "paths", "starts", "runs", "key", "count", "_live_rows")

    def __init__(self, rows: pa.Table, live: np.ndarray, paths: tuple[str, ...], starts: np.ndarray,
                 runs: tuple[_Run, ...], key: tuple[str, ...]):
        self.rows, self.live, self.paths, self.starts, self.runs, self.key = rows, live, paths, starts, runs, key
        self.count = int(np.count_nonzero(live))
        self._live_rows: pa.Table | None = None

    @classmethod
    def read(cls, segments: list[tuple[str, pa.Table, np.ndarray]], key: tuple[str, ...]) -> "Part":
        """A partition from its data files: (path, the file's rows in file order, live mask)."""
        rows = pa.concat_tables([rows for _, rows, _ in segments])
        live = np.concatenate([mask for _, _, mask in segments])
        starts = np.cumsum([0] + [r.num_rows for _, r, _ in segments], dtype=np.int64)
        ids = np.flatnonzero(live)
        k1 = key_hashes(rows.filter(pa.array(live)) if len(ids) < len(live) else rows, key)
        return cls(rows, live, tuple(p for p, _, _ in segments), starts, (_run(k1, ids),), key)

    @classmethod
    def of(cls, rows: pa.Table, path: str, key: tuple[str, ...]) -> "Part":
        """A partition written as one new data file holding ``rows``."""
        return cls.read([(path, rows, np.ones(rows.num_rows, dtype=bool))], key)

    # --- finding rows ---------------------------------------------------------------------------

    def find(self, keys: pa.Table) -> np.ndarray:
        """The ids (sorted) of the live rows whose key is one of the rows of ``keys``."""
        if not keys.num_rows or not self.count:
            return np.empty(0, np.int64)
        wanted = key_hashes(keys, self.key)
        by_hash = np.argsort(wanted)  # sorted needles: each search starts from the last one's bounds
        wanted = wanted[by_hash]
        found, asked = [], []
        for k1, ids in self.runs:
            lo = np.searchsorted(k1, wanted, "left")
            count = np.searchsorted(k1, wanted, "right") - lo
            hit = np.flatnonzero(count)
            if not hit.size:
                continue
            count = count[hit]
            at = np.repeat(lo[hit], count) + (np.arange(int(count.sum())) - np.repeat(np.cumsum(count) - count, count))
            found.append(ids[at])
            asked.append(by_hash[np.repeat(hit, count)])
        if not found:
            return np.empty(0, np.int64)
        ids, asked = np.concatenate(found), np.concatenate(asked)
        alive = self.live[ids]
        ids, asked = ids[alive], asked[alive]
        order = np.argsort(ids, kind="stable")
        ids, asked = ids[order], asked[order]
        if not len(ids):
            return ids
        # the hash only narrows the search: the key columns themselves must be equal
        candidates = self.take(ids, self.key)
        asked_keys = keys.select(list(self.key)).take(pa.array(asked))
        same = np.ones(len(ids), dtype=bool)
        for name in self.key:
            equal = pc.equal(candidates.column(name), asked_keys.column(name).cast(candidates.schema.field(name).type))
            same &= np.asarray(pc.fill_null(equal, False).to_numpy(zero_copy_only=False), dtype=bool)
        return np.unique(ids[same])

    def locations(self, ids: np.ndarray) -> pa.Table:
        """(file_path, pos) of the rows ``ids`` (sorted)."""
        segment = np.searchsorted(self.starts, ids, "right") - 1
        paths = pa.DictionaryArray.from_arrays(pa.array(segment.astype(np.int32)), pa.array(self.paths, pa.string()))
        return pa.table({"file_path": paths, "pos": pa.array(ids - self.starts[segment], pa.int64())})

    def take(self, ids: np.ndarray, columns: tuple[str, ...] | None = None) -> pa.Table:
        """The rows ``ids`` (sorted), chunk by chunk (a take over a many-chunk table would copy it whole)."""
        rows = self.rows if columns is None else self.rows.select(list(columns))
        batches = rows.to_batches()
        if len(batches) <= 1:
            return rows.take(pa.array(ids, pa.int64()))
        bounds = np.cumsum([0] + [b.num_rows for b in batches], dtype=np.int64)
        cuts = np.searchsorted(ids, bounds)
        pieces = [batches[i].take(pa.array(ids[cuts[i]:cuts[i + 1]] - bounds[i], pa.int64()))
                  for i in range(len(batches)) if cuts[i + 1] > cuts[i]]
        return pa.Table.from_batches(pieces, schema=rows.schema) if pieces else rows.schema.empty_table()

    def live_rows(self) -> pa.Table:
        """The partition's rows with its deletes applied (computed once)."""
        if self._live_rows is None:
            self._live_rows = self.rows if self.count == len(self.live) else self.rows.filter(pa.array(self.live))
        return self._live_rows

    def live_rows_after(self, removed: np.ndarray | None) -> pa.Table:
        if removed is None or not len(removed):
            return self.live_rows()
        return self.rows.filter(pa.array(self.live_after(removed)))

    def live_after(self, removed: np.ndarray | None) -> np.ndarray:
        """The live flags once the rows ``removed`` are deleted (a copy when they change)."""
        if removed is None or not len(removed):
            return self.live
        live = self.live.copy()
        live[removed] = False
        return live

    # --- its files ------------------------------------------------------------------------------

    def large_files(self, added: int) -> frozenset[str]:
        """The data files (paths) each larger than all smaller ones and ``added`` new rows together:
        what a fold of the partition's small files keeps (``merge_on_read.bounded``). Whatever is
        rewritten is then smaller than every file kept, so a row is rewritten O(log rows) times
        before it sits in a file that is kept (as the index runs are merged)."""
        sizes = np.diff(self.starts)
        rest = int(sizes.sum()) + added
        kept = []
        for i in np.argsort(-sizes, kind="stable"):
            rest -= int(sizes[i])
            if sizes[i] <= rest:
                break
            kept.append(self.paths[i])
        return frozenset(kept)

    def ids_in(self, paths: frozenset[str], mask: np.ndarray) -> np.ndarray:
        """The ids (sorted) of the rows of the data files ``paths`` whose flag in ``mask`` is set."""
        found = [self.starts[i] + np.flatnonzero(mask[self.starts[i]:self.starts[i + 1]])
                 for i, path in enumerate(self.paths) if path in paths]
        return np.concatenate(found).astype(np.int64) if found else np.empty(0, np.int64)

    # --- after a commit -------------------------------------------------------------------------

    def after(self, removed: np.ndarray | None, added: pa.Table | None, path: str | None) -> "Part":
        """The partition after a commit that deleted the rows ``removed`` and added ``added`` as
        the new data file ``path``."""
        live = self.live
        if removed is not None and len(removed):
            live = live.copy()
            live[removed] = False
        rows, paths, starts, runs = self.rows, self.paths, self.starts, list(self.runs)
        if added is not None and added.num_rows and path is not None:
            first = rows.num_rows
            rows = _tiered(pa.concat_tables([rows, added.select(rows.column_names).cast(rows.schema)]))
            live = np.concatenate([live, np.ones(added.num_rows, dtype=bool)])
            paths, starts = paths + (path,), np.append(starts, first + added.num_rows)
            runs.append(_run(key_hashes(added, self.key), np.arange(first, first + added.num_rows, dtype=np.int64)))
            while len(runs) >= 2 and len(runs[-2][0]) <= 2 * len(runs[-1][0]):
                newer, older = runs.pop(), runs.pop()
                k1, ids = np.concatenate([older[0], newer[0]]), np.concatenate([older[1], newer[1]])
                alive = live[ids]
                runs.append(_run(k1[alive], ids[alive]))  # timsort: two sorted runs merge in ~linear time
        return Part(rows, live, paths, starts, tuple(runs), self.key)

    def without(self, dropped: frozenset[str], removed: np.ndarray | None) -> "Part":
        """The partition after a commit that deleted the rows ``removed`` and removed the data
        files ``dropped`` (their live rows rewritten elsewhere: ``after`` appends that file). The
        files kept keep their rows, positions and index entries (renumbered: O(index) numpy)."""
        live = self.live_after(removed)
        keep = [i for i, path in enumerate(self.paths) if path not in dropped]
        if len(keep) == len(self.paths):
            return Part(self.rows, live, self.paths, self.starts, self.runs, self.key)
        sizes = np.diff(self.starts)[keep]
        starts = np.cumsum(np.concatenate([[0], sizes]), dtype=np.int64)
        renumbered = np.full(len(live), -1, dtype=np.int64)
        for i, start, size in zip(keep, starts, sizes):
            renumbered[self.starts[i]:self.starts[i + 1]] = np.arange(start, start + size, dtype=np.int64)
        rows = pa.concat_tables([self.rows.slice(int(self.starts[i]), int(self.starts[i + 1] - self.starts[i]))
                                 for i in keep]) if keep else self.rows.schema.empty_table()
        runs = []
        for k1, ids in self.runs:
            ok = (renumbered[ids] >= 0) & live[ids]
            if ok.any():
                runs.append((k1[ok], renumbered[ids[ok]]))
        new_live = np.concatenate([live[self.starts[i]:self.starts[i + 1]] for i in keep]) if keep else live[:0]
        return Part(rows, new_live, tuple(self.paths[i] for i in keep), starts, tuple(runs), self.key)


def _tiered(rows: pa.Table) -> pa.Table:
    """``rows`` with its newest chunks copied into one while the one before is at most twice
    their size (as the index runs): O(log rows) chunks, each row copied O(log rows) times."""
    batches = rows.to_batches()
    if len(batches) > _MAX_CHUNKS:
        return rows.combine_chunks()
    tail = 1
    while tail < len(batches) and batches[-tail - 1].num_rows <= 2 * sum(b.num_rows for b in batches[-tail:]):
        tail += 1
    if tail == 1:
        return rows
    merged = pa.Table.from_batches(batches[-tail:], schema=rows.schema).combine_chunks().to_batches()
    return pa.Table.from_batches(batches[:-tail] + merged, schema=rows.schema)


# --- the rows as mappings -----------------------------------------------------------------------


class LiveRows(Mapping):
    """Partition value -> its live rows, materialised only when asked for (``PublishedState.rows``)."""

    def __init__(self, parts: Mapping[Any, Part]):
        self.parts = {v: p for v, p in parts.items() if p.count}

    def __getitem__(self, value: Any) -> pa.Table:
        return self.parts[value].live_rows()

    def __iter__(self) -> Iterator[Any]:
        return iter(self.parts)

    def __len__(self) -> int:
        return len(self.parts)

    def count_of(self, value: Any) -> int:
        part = self.parts.get(value)
        return part.count if part is not None else 0


class Merged(Mapping):
    """Partition value -> its rows after a publish (``merge_on_read.merged``), materialised only
    when asked for: the live rows not ``removed``, then the ``added`` ones."""

    def __init__(self, parts: Mapping[Any, Part], values: frozenset[Any], removed: Mapping[Any, np.ndarray],
                 added: Mapping[Any, pa.Table], schema: pa.Schema):
        self.parts, self.values, self.removed, self.added, self.schema = parts, values, removed, added, schema
        self._done: dict[Any, pa.Table] = {}

    def __getitem__(self, value: Any) -> pa.Table:
        if value not in self.values:
            raise KeyError(value)
        if value not in self._done:
            part, added = self.parts.get(value), self.added.get(value)
            pieces = [part.live_rows_after(self.removed.get(value))] if part is not None else []
            pieces += [added] if added is not None else []
            self._done[value] = pa.concat_tables(pieces) if pieces else self.schema.empty_table()
        return self._done[value]

    def __iter__(self) -> Iterator[Any]:
        return iter(self.values)

    def __len__(self) -> int:
        return len(self.values)

    def count_of(self, value: Any) -> int:
        if value not in self.values:
            return 0
        part, added, removed = self.parts.get(value), self.added.get(value), self.removed.get(value)
        return ((part.count if part is not None else 0) - (len(removed) if removed is not None else 0)
                + (added.num_rows if added is not None else 0))


def row_count(rows: Mapping[Any, pa.Table], value: Any) -> int:
    """The number of rows of a partition in a mapping of rows, without materialising a lazy one."""
    counted = getattr(rows, "count_of", None)
    if counted is not None:
        return counted(value)
    found = rows.get(value)
    return found.num_rows if found is not None else 0
