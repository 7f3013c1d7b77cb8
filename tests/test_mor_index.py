"""The merge-on-read location index (``publish/mor_index.py``): a publish finds the rows it replaces
by binary searches of its keys' hashes and updates the published state by appending.

Checked here: ``Part.find`` is exact (a hash collision never selects a wrong row), the runs stay
few and merged, and the state a publisher keeps after each commit equals both the oracle and
what a fresh read of the table gives (``published_state.load``), including after another
writer's commit and after a compaction moved the table under it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa

from lakepub.maintenance.fold import fold_deletes
from lakepub.publish import mor_index, published_state
from lakepub.publish.mor_index import LiveRows, Merged, Part, row_count
from lakepub.workspace import Workspace
from tests.test_merge_on_read import COLUMNS, Stream, _check, _dataset, _delete_files, _workspace

KEY = ("tenant", "customer_id")


def _table(ids: list[int], tag: str = "x") -> pa.Table:
    return pa.table({"tenant": pa.array([f"t{i % 3}" for i in ids]), "customer_id": pa.array(ids, pa.int64()),
                     "value": pa.array([f"{tag}{i}" for i in ids])})


def _keys(rows: pa.Table) -> set[tuple]:
    return {(r["tenant"], r["customer_id"]) for r in rows.select(list(KEY)).to_pylist()}


def test_find_is_exact_even_when_every_hash_collides(monkeypatch):
    part = Part.of(_table(list(range(50))), "f0", KEY)
    asked = pa.table({"tenant": ["t1", "t2", "t0", "t0"], "customer_id": pa.array([4, 5, 7, 99], pa.int64())})
    # (t1, 4) and (t2, 5) exist; (t0, 7) does not (7 % 3 == 1); 99 does not
    assert part.take(part.find(asked)).column("customer_id").to_pylist() == [4, 5]
    monkeypatch.setattr(mor_index, "key_hashes", lambda rows, key: np.zeros(rows.num_rows, np.int64))
    colliding = Part.of(_table(list(range(50))), "f0", KEY)
    assert colliding.take(colliding.find(asked)).column("customer_id").to_pylist() == [4, 5]


def test_a_part_appended_to_equals_its_rows_with_deletes_applied():
    rng = np.random.default_rng(3)
    part = Part.of(_table(list(range(1000)), "v0"), "f0", KEY)
    live = {(f"t{i % 3}", i): f"v0{i}" for i in range(1000)}
    for n in range(1, 30):
        ids = sorted({int(i) for i in rng.integers(0, 1200, 80)})
        asked = _table(ids)
        found = part.find(asked)
        assert _keys(part.take(found)) == {k for k in _keys(asked) if k in live}
        located = part.locations(found)
        for path, pos, row_id in zip(located.column("file_path").to_pylist(), located.column("pos").to_pylist(), found):
            segment = part.paths.index(path)
            assert part.starts[segment] + pos == row_id
        updated = [i for i in ids if rng.random() < 0.8]  # the others are deleted
        merged = Merged({None: part}, frozenset([None]), {None: found}, {None: _table(updated, f"v{n}")}, None)
        part = part.after(found, _table(updated, f"v{n}"), f"f{n}")
        for i in ids:
            live.pop((f"t{i % 3}", i), None)
        live.update({(f"t{i % 3}", i): f"v{n}{i}" for i in updated})
        rows = part.live_rows()
        assert dict(zip(zip(rows.column("tenant").to_pylist(), rows.column("customer_id").to_pylist()),
                        rows.column("value").to_pylist())) == live
        assert part.count == len(live) == rows.num_rows == merged.count_of(None) == merged[None].num_rows
        assert len(part.runs) <= 8  # size-tiered: O(log(rows / batch))
        assert part.rows.column(0).num_chunks <= 8  # size-tiered too: appends never pile up chunks
    assert row_count(LiveRows({None: part}), None) == len(live) and row_count({}, None) == 0


def _kept(ws: Workspace, name: str) -> published_state.PublishedState:
    return ws.publisher(name).writers[name]._state  # noqa: SLF001 - the state the publisher keeps


def _same_as_a_fresh_read(ws: Workspace, name: str) -> None:
    kept = _kept(ws, name)
    table = ws.catalog.load_table((ws.config.namespace, name))
    assert kept.snapshot_id == table.metadata.current_snapshot_id
    writer = ws.publisher(name).writers[name]
    fresh = published_state.load(table, writer.schema, writer.spec.partition, KEY)
    assert set(kept.rows) == set(fresh.rows)
    for value in fresh.rows:
        assert sorted(kept.rows[value].to_pylist(), key=repr) == sorted(fresh.rows[value].to_pylist(), key=repr)
        # every live row's location is the one the files and their deletes give
        here, there = kept.located[value], fresh.located[value]
        mine = here.locations(np.flatnonzero(here.live))
        theirs = there.locations(np.flatnonzero(there.live))
        assert (sorted(zip(mine.column("file_path").to_pylist(), mine.column("pos").to_pylist()))
                == sorted(zip(theirs.column("file_path").to_pylist(), theirs.column("pos").to_pylist())))


def test_the_kept_index_equals_the_oracle_and_a_reload_after_publishes_a_foreign_commit_and_a_fold(tmp_path: Path):
    root = tmp_path / "ws"
    ws = _workspace(root, _dataset("mor", "merge-on-read"), _dataset("cow", None))
    stream = Stream(11, keys=80)
    for size in (60, 25, 30, 10, 45):
        stream.publish(ws, "mor", stream.batch(size))
        _same_as_a_fresh_read(ws, "mor")
        _check(ws, stream, "mor", "cow", datafusion=False)
    assert _delete_files(ws, "mor") > 0
    # another writer (a second workspace: another process's publisher) moves the table
    other = Workspace.open(root)
    stream.publish(other, "mor", stream.batch(30))
    stream.publish(ws, "mor", stream.batch(30))  # reloads: its kept snapshot is no longer the head
    _same_as_a_fresh_read(ws, "mor")
    _check(ws, stream, "mor", "cow", datafusion=False)
    # a compaction folds the deletes under it: the next publish locates its rows in the new files
    fold_deletes(Workspace.open(root), "mor", threshold=0.0)
    assert _delete_files(ws, "mor") == 0
    for size in (30, 20):
        stream.publish(ws, "mor", stream.batch(size))
        _same_as_a_fresh_read(ws, "mor")
    _check(ws, stream, "mor", "cow")
    assert set(COLUMNS) <= set(_kept(ws, "mor").schema.names)
