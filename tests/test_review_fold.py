"""Review of the deleted-fraction rule (h-fold): what the README says a publish rewrites whole.

The README said a partition is rewritten whole by a publish "that changes a partition already
holding 8 delete files"; ``merge_on_read.bounded`` only looks at partitions the publish deletes
rows of, so an insert-only publish into such a partition adds a data file and leaves its 8 delete
files (the bound on delete files still holds: it adds none). Pinned here, read back by DuckDB.
The deleting publish after it folds the small files (h-mor: no longer a whole rewrite).
"""

from __future__ import annotations

from pathlib import Path

from lakepub.workspace import Workspace
from tests.test_fold_threshold import _event, _files, _publish
from tests.test_merge_on_read import Stream, _check, _dataset, _workspace


def test_only_a_deleting_publish_rewrites_a_partition_holding_the_max_delete_files(tmp_path: Path):
    from lakepub.publish import merge_on_read

    ws = _workspace(tmp_path / "ws", _dataset("mor", "merge-on-read", "none", fold_threshold=1.0),
                    _dataset("ref", None, "none"))
    stream = Stream(0)
    _publish(ws, stream, [_event(stream, c) for c in range(20)])
    for i in range(merge_on_read.MAX_DELETE_FILES):  # one update per publish: a delete file each
        _publish(ws, stream, [_event(stream, i, mrr=2)])
    assert _files(ws, "mor") == (1 + merge_on_read.MAX_DELETE_FILES, merge_on_read.MAX_DELETE_FILES)
    _publish(ws, stream, [_event(stream, 100)])  # a new entity only: it changes the partition, deletes nothing
    assert _files(ws, "mor") == (2 + merge_on_read.MAX_DELETE_FILES, merge_on_read.MAX_DELETE_FILES)
    _check(ws, stream, "mor", "ref", datafusion=False)
    _publish(ws, stream, [_event(stream, 19, mrr=3)])  # the next deleting publish folds its small files
    assert _files(ws, "mor") == (2, 1)  # the first file (20 rows, 9 deleted) and one of the 10 new rows
    _check(Workspace.open(ws.config.root), stream, "mor", "ref", datafusion=False)
