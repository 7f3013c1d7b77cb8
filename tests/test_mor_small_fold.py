"""Folding a partition's small files instead of rewriting it whole (issue 12 (b), ``merge_on_read.bounded``).

A publish deleting rows of a partition that holds ``MAX_DELETE_FILES`` delete files used to
rewrite the partition whole (~S rows every 9th publish: the mean publish grew with the table).
Now it rewrites only the files that are not larger than all smaller ones and its new rows
together (``Part.large_files``: the small files earlier publishes appended, and an earlier fold's
file once they outgrow it) with its new rows as one file, and replaces all the partition's
delete files by ONE naming every dead position of the files kept. Driven through
``Workspace.publish`` and the CLI (a crash, then ``lakepub compact``); after every publish the table is read back by DuckDB and
pyiceberg (and DataFusion at some steps) and compared with the oracle and a copy-on-write table
of the same entity, ``verify --deep`` passes, no partition holds more than ``MAX_DELETE_FILES``
delete files, and the large file of the first publish is never rewritten.
"""

from __future__ import annotations

import random
from pathlib import Path

from lakepub.publish import merge_on_read
from lakepub.publish.published_state import value_of
from lakepub.workspace import Workspace
from tests.test_fold_threshold import _cli, _event, _publish, _publish_args, _published_after_all
from tests.test_merge_on_read import Stream, _check, _dataset, _workspace


def _layout(ws: Workspace, name: str) -> dict:
    """partition value -> ({data file path: records}, {delete file paths}) of the current snapshot."""
    table = ws.catalog.load_table((ws.config.namespace, name))
    out: dict = {}
    for task in table.scan().plan_files():
        data, deletes = out.setdefault(value_of(task.file), ({}, set()))
        data[task.file.file_path] = task.file.record_count
        deletes.update(d.file_path for d in task.delete_files)
    return out


def test_ten_and_more_publishes_into_one_partition_fold_its_small_files_and_keep_the_base(tmp_path: Path):
    root = tmp_path / "ws"
    ws = _workspace(root, _dataset("mor", "merge-on-read", "none", fold_threshold=1.0), _dataset("ref", None, "none"))
    stream = Stream(0)
    _publish(ws, stream, [_event(stream, c) for c in range(400)])
    [(base, base_rows)] = _layout(ws, "mor")[None][0].items()
    rng = random.Random(12)
    folds = 0
    before = _layout(ws, "mor")[None]
    for n in range(1, 25):
        if n == 13:
            ws = Workspace.open(root)  # a new process: the locations are read back from the files
        keys = rng.sample(range(430), 9)  # updates, a few deletes and new entities
        _publish(ws, stream, [_event(stream, c, deleted=rng.random() < 0.15, mrr=n) for c in keys])
        _check(ws, stream, "mor", "ref", datafusion=n % 8 == 0)
        data, deletes = after = _layout(ws, "mor")[None]
        assert len(deletes) <= merge_on_read.MAX_DELETE_FILES, n
        assert data.get(base) == base_rows, f"publish {n} rewrote the base file"
        if len(before[1]) == merge_on_read.MAX_DELETE_FILES and len(deletes) < len(before[1]):
            folds += 1  # the small files became one, the deletes one file
            assert len(deletes) == 1, (n, after)
            [(folded, rows)] = [(p, r) for p, r in data.items() if p not in before[0]]
            kept = {p: r for p, r in before[0].items() if p in data}
            rewritten = sum(r for p, r in before[0].items() if p not in data)
            assert base in kept and len(before[0]) - len(kept) >= merge_on_read.MAX_DELETE_FILES - 1, (n, after)
            assert rows <= rewritten + 9 and all(r > rewritten + 9 for r in kept.values()), (n, before, after)
        before = after
    assert folds == 2, folds  # after publishes 9 and 17 (the second keeps the first one's file: larger)
    _check(Workspace.open(root), stream, "mor", "ref")
    # ``lakepub compact`` folds what the publishes left (the base and the folds' files, one delete file)
    done = _cli(root, "compact", "mor", "--deletes-only", "--fold-threshold", "0")
    assert done.returncode == 0, done.stderr
    ws = Workspace.open(root)
    assert [len(d) for d in _layout(ws, "mor")[None]] == [1, 0]
    _publish(ws, stream, [_event(stream, c, mrr=99) for c in (1, 2, 3)])
    _check(ws, stream, "mor", "ref")


def test_random_streams_fold_small_files_per_partition_and_equal_the_oracle(tmp_path: Path, monkeypatch):
    """Many folds (at most 2 delete files per partition), several partitions folded per commit,
    some rewritten whole when no file is larger than the rest, the fraction rule on as well."""
    monkeypatch.setattr(merge_on_read, "MAX_DELETE_FILES", 2)
    root = tmp_path / "ws"
    ws = _workspace(root, _dataset("ref", None), _dataset("mor", "merge-on-read", "bucket(3, customer_id)"),
                    _dataset("mor_default", "merge-on-read", "bucket(2, customer_id)", fold_threshold=None))
    stream = Stream(31, keys=300)
    stream.publish(ws, "mor", stream.batch(600))
    for n, size in enumerate((12, 9, 15, 6, 11, 8, 14, 10, 7, 13, 9, 12)):
        if n == 6:
            ws = Workspace.open(root)
        stream.publish(ws, "mor", stream.batch(size))
        _check(ws, stream, "ref", "mor", "mor_default", datafusion=n % 4 == 3)
        for name in ("mor", "mor_default"):
            assert all(len(deletes) <= 2 for _, deletes in _layout(ws, name).values()), (n, name)
    _check(Workspace.open(root), stream, "ref", "mor", "mor_default")


def at_the_delete_file_limit(root: Path) -> tuple[Workspace, Stream]:
    """``mor`` (merge-on-read, no fold threshold) and ``ref`` in a new workspace: 30 rows, then one
    single-row publish per delete file up to ``MAX_DELETE_FILES``: the next deleting publish folds."""
    ws = _workspace(root, _dataset("mor", "merge-on-read", "none", fold_threshold=1.0), _dataset("ref", None, "none"))
    stream = Stream(0)
    _publish(ws, stream, [_event(stream, c) for c in range(30)])
    for i in range(merge_on_read.MAX_DELETE_FILES):
        _publish(ws, stream, [_event(stream, i, mrr=2)])
    return ws, stream


def test_a_crash_in_a_fold_of_small_files_leaves_the_table_as_it_was(tmp_path: Path):
    from lakepub.maintenance.janitor import JanitorOptions, run_janitor

    root = tmp_path / "ws"
    ws, stream = at_the_delete_file_limit(root)
    pointer = ws.catalog.load_table(("lakepub", "mor")).metadata_location
    layout = _layout(ws, "mor")
    stored = set((root / ".lakepub").rglob("*.parquet"))
    events = [_event(stream, c, mrr=4) for c in (3, 20, 21)]  # this publish folds the small files
    args = _publish_args(tmp_path, stream, events)
    for point in ("after-data-write", "before-pointer-swap"):
        crashed = _cli(root, *args, fault=point)
        assert crashed.returncode == -9, crashed.stderr
        ws = Workspace.open(root)
        assert ws.catalog.load_table(("lakepub", "mor")).metadata_location == pointer
        assert _layout(ws, "mor") == layout
        _check(ws, stream, "mor", "ref", datafusion=False)  # the oracle has not seen ``events``
        run_janitor(ws, options=JanitorOptions(older_than_s=0, retain_last=20))
        assert not (set((root / ".lakepub").rglob("*.parquet")) - stored), "the janitor kept the crashed files"
    ws = _published_after_all(root, args, stream, events)
    data, deletes = _layout(ws, "mor")[None]
    assert len(data) == 2 and len(deletes) == 1 and set(layout[None][0]) & set(data)  # the 30-row file kept
    _check(ws, stream, "mor", "ref")
