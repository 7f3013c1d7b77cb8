"""Review of the background uploads (store/uploads.py, store/s3.py): failures that are not
failures of an upload must not make the process refuse every later commit.

A data file's background ``_finish`` closes the S3 stream (the upload) and then moves its local
copy into the disk cache. Only the first is an upload: the cache is an optimisation ("a cache that
cannot be written only costs a download next time", ``FileCache.store``), so a cache folder that
is full or was cleared under the process must not be recorded as a failed upload (which makes the
process refuse every later commit, exit 4, until restarted).
"""

from __future__ import annotations

import errno

import pytest

from lakepub.store import s3, uploads
from tests.integration.test_object_store import DATASET, _published, _published_oracle, _rerun_as_new_process, _workspace

pytestmark = pytest.mark.integration


class _FullDiskCopy:
    """The local copy of a data file whose buffered tail cannot be flushed: the cache disk is full."""

    def __init__(self, real):
        self._real, self._failed = real, False

    def tell(self) -> int:
        return self._real.tell()

    def close(self) -> None:
        if not self._failed:
            self._failed = True
            self._real.close()
            raise OSError(errno.ENOSPC, "No space left on device (injected, cache disk)")
        self._real.close()


def test_a_cache_copy_that_cannot_be_kept_is_not_a_failed_upload(s3_endpoint, make_workspace, tmp_path, monkeypatch):
    ws = _workspace(make_workspace, tmp_path, s3_endpoint, "bgcachefull", events=900)
    monkeypatch.setattr(uploads, "_FAILED", [])  # this process's record of failed uploads, for this test only
    real_finish = s3._DiskTee._finish
    hit: list[str] = []

    def finish(self):
        hit.append(self._location)
        self._copy = _FullDiskCopy(self._copy)
        real_finish(self)

    monkeypatch.setattr(s3._DiskTee, "_finish", finish)
    result = ws.run(DATASET, max_batch=300)  # every data file's upload went through
    assert hit and len(result.batches) == 3
    assert uploads._FAILED == []
    monkeypatch.undo()
    assert _published(ws) == _published_oracle(ws)
    client = s3_endpoint.client()
    for location in hit:  # every file is in the bucket, whole (read back by DuckDB above)
        client.head_object(Bucket=s3_endpoint.bucket, Key=location.split("/", 3)[3])


@pytest.mark.parametrize("kind", ["parquet", "arrow"])
def test_ordered_commit_a_failed_background_upload_publishes_nothing(s3_endpoint, make_workspace, tmp_path,
                                                                    monkeypatch, kind):
    """The non-atomic path (``commit: ordered``, as on Glue): each table's commit passes through
    its metadata file's close, which waits for every background upload; a failed data-file or
    run upload of batch N commits neither table, nor does batch N+1 in the same process."""
    from conftest import set_commit_mode
    from lakepub.errors import RetryableError
    from lakepub.store.layout import ledger_id
    from lakepub.workspace import Workspace
    from tests.integration.test_object_store_background import _slowed

    ws = _workspace(make_workspace, tmp_path, s3_endpoint, f"bgordered{kind}", events=900)
    set_commit_mode(ws.config.root, "ordered")
    ws = Workspace.open(ws.config.root)
    seen: list[int] = []
    ws.run(DATASET, max_batch=300, stop=lambda: bool(seen.append(1)) or len(seen) > 1)  # one batch

    def pointers() -> tuple[str, str]:
        fresh = Workspace.open(ws.config.root)
        return tuple(fresh.catalog.load_table(i).metadata_location
                     for i in (ledger_id(fresh.config.namespace, DATASET), (fresh.config.namespace, DATASET)))

    before, published = pointers(), _published(ws)
    monkeypatch.setattr(uploads, "_FAILED", [])
    _slowed(monkeypatch, 0.05, [], fail=kind, client=s3_endpoint.client(), bucket=s3_endpoint.bucket)
    for _ in range(2):  # batch N, then batch N+1 in the same process
        with pytest.raises(RetryableError, match="earlier upload"):
            ws.run(DATASET, max_batch=300)
        assert pointers() == before  # not even the ledger moved
    assert _published(ws) == published
    _rerun_as_new_process(monkeypatch, ws)
    assert Workspace.open(ws.config.root).verify(DATASET, deep=True).ok
