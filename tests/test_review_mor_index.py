"""Adversarial review of the merge-on-read location index (``publish/mor_index.py``): the state a
publisher keeps between its commits must be what a fresh read of the table gives, whatever
happened to the commits in between.

Driven here, beyond ``tests/test_mor_index.py``: commits that fail before landing (a conflict, and
a real one: a fold committed by another process between the publish's rewrite and its commit),
commits that land but whose outcome the publisher never learns (``OutcomeUnknown``), partitions
rewritten whole every other delete (``MAX_DELETE_FILES`` lowered to 2), entities moving between
partitions, deletes and re-creates, another process's publishes, and the version 2 checksum sums
the publisher keeps (compared with sums of the rows read back).
"""

from __future__ import annotations

import random
from pathlib import Path

from lakepub.errors import OutcomeUnknown
from lakepub.maintenance.fold import fold_deletes
from lakepub.projection.checksum import multiset_sum
from lakepub.publish import merge_on_read, published_state
from lakepub.store.commit import CommitConflict
from lakepub.workspace import Workspace
from tests.test_merge_on_read import Stream, _check, _dataset, _delete_files, _rows, _workspace
from tests.test_mor_index import _kept, _same_as_a_fresh_read


def _same_sums_as_a_fresh_read(ws: Workspace, name: str) -> None:
    kept = _kept(ws, name)
    writer = ws.publisher(name).writers[name]
    table = ws.catalog.load_table((ws.config.namespace, name))
    fresh = published_state.load(table, writer.schema, writer.spec.partition, tuple(writer.spec.kind.row_key))
    for value, total in kept.sums.items():
        rows = fresh.rows.get(value)
        assert total == (multiset_sum(rows) if rows is not None else 0), value


def test_failed_and_unknown_commits_leave_the_kept_index_equal_to_a_fresh_read(tmp_path: Path, monkeypatch):
    import lakepub.publish.publisher as publisher

    monkeypatch.setattr(merge_on_read, "MAX_DELETE_FILES", 2)
    root = tmp_path / "ws"
    ws = _workspace(root, _dataset("mor", "merge-on-read", "identity(country)"))
    stream = Stream(21, keys=60)
    real = publisher.commit_atomically
    plan: list[str] = []  # what the next commits do: "conflict", "fold" (a racing fold), "unknown", "ok"
    seen: list[str] = []

    def commit(catalog, changes):
        what = plan.pop(0) if plan else "ok"
        seen.append(what)
        if what == "conflict":
            raise CommitConflict("injected: nothing landed")
        if what == "fold":  # another process folds the deletes between this publish's rewrite and commit
            fold_deletes(Workspace.open(root), "mor", threshold=0.0)
            return real(catalog, changes)  # fails: the table moved (CommitConflict), then retried
        out = real(catalog, changes)
        if what == "unknown":
            raise OutcomeUnknown("injected: landed, but not confirmed")
        return out

    monkeypatch.setattr(publisher, "commit_atomically", commit)
    rng = random.Random(5)
    schedule = ["ok", "ok", "conflict", "unknown", "ok", "fold", "ok", "conflict", "ok", "unknown", "ok", "ok"]
    for i, first in enumerate(schedule):
        plan[:] = [first]
        result = stream.publish(ws, "mor", stream.batch(rng.randrange(5, 25)))
        assert result.status == ("already-published" if first == "unknown" else "published"), (i, result.status)
        assert _rows(ws.query('SELECT * FROM "mor"')) == stream.expected(), i
        if first != "unknown":  # else the kept state is behind the table: the next publish reads it again
            _same_as_a_fresh_read(ws, "mor")
            _same_sums_as_a_fresh_read(ws, "mor")
        if i == 8:  # another process publishes: the kept state is read again by the next publish
            stream.publish(Workspace.open(root), "mor", stream.batch(15))
    assert seen.count("fold") == 1 and seen[seen.index("fold") + 1] == "ok"  # the racing fold made a retry
    assert _delete_files(ws, "mor") > 0
    _check(ws, stream, "mor", datafusion=False)
