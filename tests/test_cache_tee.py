"""The local copy an S3 upload leaves in the disk cache (``store/s3._DiskTee``).

The cache is shared by processes, and any of them may evict a file the moment it is complete:
an upload that succeeded must not be reported as failed because its local copy vanished right
after it was renamed into place (it used to stat that copy: FileNotFoundError, a failed publish).
"""

from __future__ import annotations

import io
import os
from pathlib import Path

from lakepub.store import s3
from lakepub.store.cache import FileCache


class _Upload(io.BytesIO):
    def close(self) -> None:  # keep the bytes readable after close, as the upload's target
        self.uploaded = self.getvalue()


def test_a_copy_evicted_right_after_the_upload_does_not_fail_it(tmp_path: Path, monkeypatch):
    cache = FileCache(tmp_path / "cache")
    location = "s3://bucket/ns/t/data/00000-0-abc.parquet"
    real_replace = os.replace

    def replace_then_evicted(src, dst):  # another process evicts the copy as soon as it exists
        real_replace(src, dst)
        os.unlink(dst)

    monkeypatch.setattr(s3.os, "replace", replace_then_evicted)
    upload = _Upload()
    tee = s3._DiskTee(upload, location, cache)
    tee.write(b"PAR1" + b"x" * 100 + b"PAR1")
    tee.close()
    assert upload.uploaded == b"PAR1" + b"x" * 100 + b"PAR1"
    assert not cache.path(location).exists()
    assert not [p for p in cache.path(location).parent.iterdir()]  # no temporary copy left behind
