"""Review of ``DatasetWriter.prefetch`` (issue 16): a new process reads its published rows in the
background while it looks up the ledger. A foreign commit landing between the prefetch and the
commit must not let the prefetched rows (of the older snapshot) be built on: the compare-and-set
fails, the retry reads the new snapshot, and the tables equal the oracle; also for a merge-on-read
``current`` dataset (its location index is part of the prefetched state). And a process that
does not publish a new batch (compaction, fold, a retried or stale batch) reads no rows at all."""

from __future__ import annotations

from pathlib import Path

import pytest

from lakepub.publish import lookup, published_state
from lakepub.workspace import Workspace
from tests.test_merge_on_read import Stream, _check, _dataset, _workspace


def _counted_loads(monkeypatch) -> list[tuple[str, int]]:
    """(thread name, snapshot id) of every read of a published table's rows from now on."""
    import threading

    loads: list[tuple[str, int]] = []
    real_load = published_state.load

    def counted(table, *args, **kwargs):
        loads.append((threading.current_thread().name, table.metadata.current_snapshot_id))
        return real_load(table, *args, **kwargs)

    monkeypatch.setattr(published_state, "load", counted)
    return loads


def _prefetches_finished() -> None:
    from lakepub.publish import datasets

    pool = getattr(datasets, "_PREFETCH", None)
    if pool is not None:
        pool.submit(lambda: None).result()


@pytest.mark.parametrize("mode", ["merge-on-read", None])
def test_a_foreign_commit_between_the_prefetch_and_the_commit(tmp_path: Path, monkeypatch, mode):
    root = tmp_path / "ws"
    _workspace(root, _dataset("pub", mode), _dataset("other", None if mode else "merge-on-read"))
    stream = Stream(21)
    first, foreign, mine = stream.batch(40), stream.batch(20), stream.batch(20)
    Workspace.open(root).publish("pub", first, source="s0", start={}, end={"p0": len(first)})

    real_rows = lookup.LedgerLookup.rows
    sneaked: list[int] = []

    def rows(self, *args, **kwargs):
        if not sneaked:  # the new process's first lookup: its prefetch is under way or done
            sneaked.append(1)
            Workspace.open(root).publish("pub", foreign, source="s1", start={}, end={"p0": len(foreign)})
        return real_rows(self, *args, **kwargs)

    loads = _counted_loads(monkeypatch)
    monkeypatch.setattr(lookup.LedgerLookup, "rows", rows)
    fresh = Workspace.open(root)  # a new process
    fresh.publish("pub", mine, source="s2", start={}, end={"p0": len(mine)})
    publisher = fresh.publisher("pub")
    assert sneaked and publisher.rebases >= 1  # the race happened and was lost once
    assert any(name.startswith("lakepub-state") for name, _ in loads)  # read in the background
    assert len({snapshot for _, snapshot in loads}) >= 2  # and read again at the foreign snapshot
    monkeypatch.undo()
    _check(Workspace.open(root), stream, "pub", "other", datafusion=False)


def test_maintenance_in_a_new_process_does_not_read_the_published_rows(tmp_path: Path, monkeypatch):
    """``Publisher.load`` serves compaction, folding and the DUAL_WRITE companion too: none of them
    uses the published rows, so a new process must not read the whole published table for them
    (CPU, memory, and the process's exit waits for the read)."""
    from lakepub.maintenance.compact import compact_ledger
    from lakepub.maintenance.fold import fold_deletes

    root = tmp_path / "ws"
    _workspace(root, _dataset("mor", "merge-on-read"), _dataset("cow", None))
    stream = Stream(22)
    for size in (40, 20, 20):
        stream.publish(Workspace.open(root), "mor", stream.batch(size))
    loads = _counted_loads(monkeypatch)
    compact_ledger(Workspace.open(root), "mor")
    fold_deletes(Workspace.open(root), "mor", threshold=0.0, dry_run=True)
    _prefetches_finished()
    assert loads == []
    monkeypatch.undo()
    _check(Workspace.open(root), stream, "mor", "cow", datafusion=False)


def test_a_batch_already_published_or_refused_reads_no_published_rows(tmp_path: Path, monkeypatch):
    """A cron retry of a batch that is already published (exit 0) or starts at a stale position
    (exit 3) uses no published rows: a new process must not read the whole table for it (its
    exit would wait for the background read)."""
    from lakepub.errors import BlockedError

    root = tmp_path / "ws"
    _workspace(root, _dataset("mor", "merge-on-read"), _dataset("cow", None))
    stream = Stream(23)
    first, second = stream.batch(40), stream.batch(20)
    Workspace.open(root).publish("mor", first, start={}, end={"p0": 40})
    Workspace.open(root).publish("mor", second, start={"p0": 40}, end={"p0": 60})
    loads = _counted_loads(monkeypatch)
    again = Workspace.open(root).publish("mor", second, start={"p0": 40}, end={"p0": 60})
    assert again.status != "published"  # found in the history: nothing to do
    with pytest.raises(BlockedError):
        Workspace.open(root).publish("mor", stream.batch(5), start={"p0": 10}, end={"p0": 15})  # stale start
    _prefetches_finished()
    assert loads == []
