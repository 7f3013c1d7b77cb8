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
from tests.integration.test_object_store import DATASET, _published, _published_oracle, _workspace

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
