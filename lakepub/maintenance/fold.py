"""Folding position deletes back into data files (``lakepub compact DATASET``).

A merge-on-read publish (``publish/merge_on_read.py``) adds a small data file per affected
partition and a delete file naming the rows it replaced; readers then read more files and apply
more deletes with every publish. Folding rewrites every data file whose deleted fraction
(positions its delete files remove / its records) is at least ``threshold`` into one new file
per partition (its live rows, sorted by key), and drops every delete file that no longer names a
live data file. Small files are folded too: a data file of fewer than ``SMALL_ROWS`` records is
rewritten with the others of its partition once the partition holds more than one file.

It commits like a publish: ONE snapshot (``store/deletes.stage_row_delta``) carrying the newest
lakepub record of the table (same positions, same data: ``checksums`` empty, as a ledger
compaction's), compare-and-set on the table's metadata location (the atomic commit on a SQL
catalog, the catalog's own single-table commit under ``commit: ordered``, e.g. Glue). A publish that commits first
makes the fold start again from the new snapshot; a fold that commits first makes the publish
reload the table and locate its rows again (its rebase, as after any concurrent commit).

The invariant: the table's rows (deletes applied) are the same before and after; every delete
file kept names a live data file. Cost: reading and writing the folded files plus one read of
every live delete file: 1.3-4.5 s (machine load) to fold the 160 data files (888k rows, 465k of
them deleted) and 144 delete files of 10 merge-on-read publishes into 16 files
(``scripts/bench/merge_on_read.py``).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.io.pyarrow import ArrowScan
from pyiceberg.manifest import DataFile, ManifestContent
from pyiceberg.table import FileScanTask

from lakepub.errors import CommitContention, UserError
from lakepub.identity import fingerprint
from lakepub.publish.published_state import value_of
from lakepub.store.commit import CommitConflict, TableChange, commit_atomically, commit_in_order, commit_mode
from lakepub.store.deletes import deleted_positions, stage_row_delta
from lakepub.store.record import Counts
from lakepub.store.write import submit_partitions, transaction
from lakepub.workspace import Workspace

DEFAULT_THRESHOLD = 0.1
SMALL_ROWS = 10_000


@dataclass(frozen=True)
class FoldResult:
    """What folding did (or would do) to one dataset's table."""

    dataset: str
    data_files_before: int
    data_files_rewritten: int
    data_files_after: int
    delete_files_before: int
    delete_files_dropped: int
    deleted_rows_folded: int
    snapshot_id: int | None
    dry_run: bool

    def as_dict(self) -> dict[str, object]:
        return asdict(self)

    def line(self) -> str:
        verb = "would fold" if self.dry_run else "folded"
        return (f"{verb} {self.dataset} deletes: {self.data_files_rewritten} of {self.data_files_before} data files "
                f"rewritten ({self.deleted_rows_folded} deleted rows), {self.delete_files_dropped} of "
                f"{self.delete_files_before} delete files dropped, {self.data_files_after} data files now")


def fold_deletes(ws: Workspace, dataset: str, *, threshold: float = DEFAULT_THRESHOLD, dry_run: bool = False,
                 max_attempts: int = 10) -> FoldResult:
    """Fold the delete files of ``dataset``'s published table (see the module docstring)."""
    if not 0.0 <= threshold <= 1.0:
        raise UserError(f"--fold-threshold must be between 0 and 1, got {threshold}")
    spec = ws.dataset(dataset)
    key = list(spec.kind.row_key)
    publisher = ws.publisher(dataset)
    for attempt in range(1, max_attempts + 1):
        _, tables, latest = publisher.load()
        table = tables[dataset]
        snapshot = table.current_snapshot()
        if snapshot is None or latest[dataset] is None:
            return FoldResult(dataset, 0, 0, 0, 0, 0, 0, None, dry_run)
        tasks = list(table.scan(snapshot_id=snapshot.snapshot_id).plan_files())
        all_deletes = _live_delete_files(table, snapshot)
        cache: dict[str, pa.Table] = {}
        gone = {t.file.file_path: deleted_positions(table.io, t.delete_files, t.file.file_path, cache) for t in tasks}
        by_value: dict[Any, list[FileScanTask]] = {}
        for task in tasks:
            by_value.setdefault(value_of(task.file), []).append(task)
        chosen: list[FileScanTask] = []
        for value, group in by_value.items():
            picked = [t for t in group if t.file.record_count and len(gone[t.file.file_path]) / t.file.record_count
                      >= max(threshold, 1e-12)]
            small = [t for t in group if t.file.record_count < SMALL_ROWS]
            if len(group) > 1 and (picked or len(small) > 1):
                picked = list({t.file.file_path: t for t in [*picked, *small]}.values())
            chosen += picked
        chosen_paths = {t.file.file_path for t in chosen}
        remaining = {t.file.file_path for t in tasks} - chosen_paths
        dropped = [f for f in all_deletes if not _names_any(table.io, f, remaining, cache)]
        folded = sum(len(gone[p]) for p in chosen_paths)
        result = FoldResult(dataset, len(tasks), len(chosen), len(tasks) - len(chosen) + len({value_of(t.file) for t in chosen}),
                            len(all_deletes), len(dropped), folded, None, dry_run)
        if dry_run or (not chosen and not dropped):
            return result
        reader = ArrowScan(table.metadata, table.io, table.scan().projection(), table.scan().row_filter)
        parts: dict[Any, list[pa.Table]] = {}
        for task in chosen:
            rows = reader.to_table([FileScanTask(task.file)])
            dead = gone[task.file.file_path]
            if len(dead):
                rows = rows.filter(pa.array(~np.isin(np.arange(rows.num_rows), dead)))
            parts.setdefault(value_of(task.file), []).append(rows)
        merged = {v: _sorted(pa.concat_tables(ts), key) for v, ts in parts.items()}
        new_files = [f.result() for f in submit_partitions(table, {v: r for v, r in merged.items() if r.num_rows})]
        record = replace(latest[dataset][1],
                         batch_id=fingerprint("lakepub-fold-v1", dataset, str(snapshot.snapshot_id)),
                         batch={"kind": "compaction", "source": "(compaction)", "folded_rows": folded},
                         checksums={}, counts=Counts())
        tx = transaction(table)
        stage_row_delta(tx, table, add_data=new_files, remove_data=[t.file for t in chosen], remove_deletes=dropped,
                        snapshot_properties=record.to_properties())
        try:
            # One table: the catalog's own compare-and-set is enough, so a catalog without the
            # atomic multi-table commit (Glue, REST: the ordered mode) folds too.
            if commit_mode(ws.catalog, ws.config.commit) == "atomic":
                commit_atomically(ws.catalog, [TableChange(table, tx)])
            else:
                commit_in_order(ws.catalog, [TableChange(table, tx)])
        except CommitConflict:
            time.sleep(0.02 * 2 ** min(attempt, 6))
            continue
        return replace(result, data_files_after=len(remaining) + len(new_files),
                       snapshot_id=tx.table_metadata.current_snapshot_id)
    raise CommitContention(f"folding the deletes of '{dataset}' kept losing the commit race to publishers; retry it")


def needs_folding(ws: Workspace, dataset: str) -> bool:
    """Whether ``dataset`` is written merge-on-read or its table holds delete files."""
    if ws.dataset(dataset).write_mode == "merge-on-read":
        return True
    table = ws.catalog.load_table((ws.config.namespace, dataset))
    snapshot = table.current_snapshot()
    return snapshot is not None and any(m.content == ManifestContent.DELETES for m in snapshot.manifests(table.io))


def _live_delete_files(table, snapshot) -> list[DataFile]:
    out = []
    for manifest in snapshot.manifests(table.io):
        if manifest.content == ManifestContent.DELETES:
            out += [e.data_file for e in manifest.fetch_manifest_entry(table.io, discard_deleted=True)]
    return out


def _names_any(io, delete_file: DataFile, paths: set[str], cache: dict[str, pa.Table]) -> bool:
    rows = cache.get(delete_file.file_path)
    if rows is None:
        import pyarrow.parquet as pq

        with io.new_input(delete_file.file_path).open() as stream:
            rows = cache[delete_file.file_path] = pq.read_table(stream, columns=["file_path", "pos"])
    return bool(pc.any(pc.is_in(rows.column("file_path"), value_set=pa.array(sorted(paths), pa.string()))).as_py()) \
        if paths else False


def _sorted(rows: pa.Table, key: list[str]) -> pa.Table:
    if rows.num_rows < 2 or not key:
        return rows
    return rows.take(pc.sort_indices(rows, sort_keys=[(c, "ascending") for c in key]))
