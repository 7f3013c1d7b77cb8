"""Adversarial review of the merge-on-read location index (``publish/mor_index.py``): the state a
publisher keeps between its commits must be what a fresh read of the table gives, whatever
happened to the commits in between.

Driven here, beyond ``tests/test_mor_index.py``: commits that fail before landing (a conflict, and
a real one: a fold committed by another process between the publish's rewrite and its commit),
commits that land but whose outcome the publisher never learns (``OutcomeUnknown``), partitions
rewritten whole every other delete (``MAX_DELETE_FILES`` lowered to 2), entities moving between
partitions, deletes and re-creates, another process's publishes; the data and delete files and the version 2 checksum sums
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


def _same_files_and_sums_as_a_fresh_read(ws: Workspace, name: str) -> None:
    kept = _kept(ws, name)
    writer = ws.publisher(name).writers[name]
    table = ws.catalog.load_table((ws.config.namespace, name))
    fresh = published_state.load(table, writer.schema, writer.spec.partition, tuple(writer.spec.kind.row_key))
    def paths(by_value: dict) -> dict:
        return {v: sorted(f.file_path for f in fs) for v, fs in by_value.items() if fs}

    # the files a whole rewrite drops (``bounded``) and the delete files it counts
    assert paths(kept.files) == paths(fresh.files) and paths(kept.deletes) == paths(fresh.deletes)
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
            _same_files_and_sums_as_a_fresh_read(ws, "mor")
        if i == 8:  # another process publishes: the kept state is read again by the next publish
            stream.publish(Workspace.open(root), "mor", stream.batch(15))
    assert seen.count("fold") == 1 and seen[seen.index("fold") + 1] == "ok"  # the racing fold made a retry
    assert _delete_files(ws, "mor") > 0
    _check(ws, stream, "mor", datafusion=False)


def test_a_dual_written_merge_on_read_dataset_keeps_both_indexes_over_many_batches_of_one_run(ws_path: Path, cli,
                                                                                                  monkeypatch):
    """DUAL_WRITE (``publish/dual.py``): the new major version's writer keeps its own index, built
    in the run's first commit (a build: every partition written whole), then updated by every
    batch of the same run (``--max-batch``: one process), through moves, deletes, re-creates and
    whole rewrites; both tables equal the oracle read by DuckDB, and verify --deep passes."""
    from tests.test_any_dataset import _event, _land, _setup
    from tests.test_dual_write import V2, _oracle, _scan
    from tests.test_lifecycle import V1_0
    from tests.test_shadow import ALL_COLUMNS

    monkeypatch.setattr(merge_on_read, "MAX_DELETE_FILES", 2)
    landing = _setup(ws_path, {**ALL_COLUMNS, "write_mode": "merge-on-read"})
    contracts = ws_path / "catalog" / "contracts"
    (contracts / "customers@v1.0.yaml").write_text(V1_0)
    rng = random.Random(8)
    versions: dict[str, int] = {}

    def events(n: int) -> list[dict]:
        out = []
        for _ in range(n):
            cid = f"c{rng.randrange(25)}"
            versions[cid] = versions.get(cid, 0) + 1
            out.append(_event(cid, versions[cid], rng.choice(["FR", "DE", None]), rng.choice(["pro", "basic"]),
                              rng.randrange(1000), deleted=rng.random() < 0.2))
        return out

    first = events(40)
    _land(landing, "0001.jsonl", first)
    assert cli("run", "customers_all").code == 0
    (contracts / "customers@v2.0.yaml").write_text(V2 + "status: DUAL_WRITE\n")  # set by hand: the publish path only
    more = events(120)
    _land(landing, "0002.jsonl", more)
    r = cli("run", "customers_all", "--max-batch", "9")  # v2.0 built beside, then 14 batches in one process
    assert r.code == 0, r.err
    want = _oracle(first + more)
    assert _scan(ws_path, "customers_all") == (want, "BIGINT")
    assert _scan(ws_path, "customers_all__v2") == (want, "INTEGER")
    v2 = Workspace.open(ws_path).catalog.load_table(("lakepub", "customers_all__v2"))
    assert len(v2.metadata.snapshots) >= 14  # the build, then one snapshot per batch
    v = cli("verify", "customers_all", "--deep")
    assert v.code == 0, (v.out, v.err)
