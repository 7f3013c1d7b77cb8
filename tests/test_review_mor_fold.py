"""Review of the small-file fold (h-mor, ``merge_on_read.bounded`` / ``_fold_small``).

A crash right after the catalog commit of a publish that folds a partition's small files: the
batch is recognised as published by the retry (nothing double-counted), the table read back by
DuckDB equals the oracle and ``verify --deep`` passes, and the next folds build on it.
"""

from __future__ import annotations

from pathlib import Path

from lakepub.publish import merge_on_read
from lakepub.workspace import Workspace
from tests.test_fold_threshold import _cli, _event, _publish, _publish_args
from tests.test_merge_on_read import _check
from tests.test_mor_small_fold import _layout, at_the_delete_file_limit


def test_a_crash_after_the_commit_of_a_fold_is_published_once_and_folds_go_on(tmp_path: Path):
    root = tmp_path / "ws"
    ws, stream = at_the_delete_file_limit(root)
    assert len(_layout(ws, "mor")[None][1]) == merge_on_read.MAX_DELETE_FILES
    events = [_event(stream, c, mrr=4) for c in (3, 20, 21)]  # this publish folds the small files
    args = _publish_args(tmp_path, stream, events)
    crashed = _cli(root, *args, fault="after-commit")
    assert crashed.returncode == -9, crashed.stderr
    stream.apply(events)
    stream.position += len(events)
    ws = Workspace.open(root)
    data, deletes = _layout(ws, "mor")[None]
    assert len(data) == 2 and len(deletes) == 1, (data, deletes)  # the fold landed
    _check(ws, stream, "mor", "ref", datafusion=False)
    again = _cli(root, *args)
    assert again.returncode == 0, again.stderr
    assert _layout(Workspace.open(root), "mor")[None] == (data, deletes)  # nothing published twice
    ws = Workspace.open(root)
    for n in range(2 * merge_on_read.MAX_DELETE_FILES + 2):  # two more folds on top of it
        _publish(ws, stream, [_event(stream, n % 25, mrr=10 + n), _event(stream, 40 + n)])
        assert len(_layout(ws, "mor")[None][1]) <= merge_on_read.MAX_DELETE_FILES
    _check(ws, stream, "mor", "ref", datafusion=False)
    _check(Workspace.open(root), stream, "mor", "ref")
