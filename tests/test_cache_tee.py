"""The local copy an S3 upload leaves in the disk cache (``store/s3._DiskTee``).

The cache is shared by processes, and any of them may evict a file the moment it is complete:
an upload that succeeded must not be reported as failed because its local copy vanished right
after it was renamed into place (it used to stat that copy: FileNotFoundError, a failed publish).
"""

from __future__ import annotations

import io
import os
from pathlib import Path

from lakepub.store import s3, s3_streams
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

    monkeypatch.setattr(s3_streams.os, "replace", replace_then_evicted)
    upload = _Upload()
    tee = s3._DiskTee(upload, location, cache)
    tee.write(b"PAR1" + b"x" * 100 + b"PAR1")
    tee.close()
    assert upload.uploaded == b"PAR1" + b"x" * 100 + b"PAR1"
    assert not cache.path(location).exists()
    assert not [p for p in cache.path(location).parent.iterdir()]  # no temporary copy left behind


# --- pyarrow's S3 stream opened for the upload only (issue 16: a new process's fresh memory) ---


class _Opener:
    """A stream factory recording when the stream is opened and what went up."""

    def __init__(self, on_close=None):
        self.opened, self.uploads, self._on_close = 0, [], on_close

    def __call__(self):
        self.opened += 1
        opener = self

        class _Stream(io.BytesIO):
            def close(self) -> None:
                if opener._on_close is not None:
                    opener._on_close()
                opener.uploads.append(self.getvalue())
                super().close()

        return _Stream()


def test_the_upload_stream_is_opened_only_at_close(tmp_path: Path):
    """pyarrow's S3 stream holds a 10 MiB part buffer from its first write: a file being encoded
    (or queued for an upload thread) must not hold one, so the stream opens at close."""
    cache = FileCache(tmp_path / "cache")
    location = "s3://bucket/ns/t/data/00000-0-def.parquet"
    opener = _Opener()
    tee = s3._DiskTee(opener, location, cache)
    for part in (b"PAR1", b"x" * 100_000, b"PAR1"):
        tee.write(part)
    assert tee.tell() == 100_008 and opener.opened == 0
    tee.close()
    tee.close()  # a second close uploads nothing more
    assert opener.opened == 1 and opener.uploads == [b"PAR1" + b"x" * 100_000 + b"PAR1"]
    assert cache.path(location).read_bytes() == opener.uploads[0]

    meta = _Opener()
    small = s3._Tee(meta, "s3://bucket/ns/t/metadata/00001-abc.metadata.json")
    small.write(b'{"format-version": 2}')
    assert small.tell() == 21 and meta.opened == 0
    small.close()
    assert meta.uploads == [b'{"format-version": 2}'] and s3.REMEMBERED.get(small._location) == meta.uploads[0]


def test_a_file_whose_writing_failed_is_never_uploaded(tmp_path: Path):
    """Closing pyarrow's S3 stream uploads what it holds: a file written only in part (an
    exception inside the ``with``) must not open one at all, nor leave a copy in the cache."""
    cache = FileCache(tmp_path / "cache")
    for make in (lambda o: s3._DiskTee(o, "s3://bucket/ns/t/data/00000-1-abc.parquet", cache),
                 lambda o: s3._Tee(o, "s3://bucket/ns/t/metadata/snap-1-abc.avro")):
        opener = _Opener()
        try:
            with make(opener) as out:
                out.write(b"PAR1 half a file")
                raise RuntimeError("encoding failed")
        except RuntimeError:
            pass
        assert opener.opened == 0 and opener.uploads == []
    assert not [p for p in cache.folder.rglob("*") if p.is_file()]  # no copy, no temporary file


def test_uploads_hold_at_most_as_many_streams_as_arrows_io_threads(tmp_path: Path):
    """pyarrow sends S3 requests on Arrow's IO pool (``pa.io_thread_count()``): more streams open
    at once than it has threads only wait there, each with its part buffer. 3x as many uploads
    as IO threads, closed from as many threads at once, never have more streams open than that."""
    import threading

    import pyarrow as pa

    cache = FileCache(tmp_path / "cache")
    limit = pa.io_thread_count()
    lock, now, most = threading.Lock(), [0], [0]
    release = threading.Event()

    def opened_then_closed():
        with lock:
            now[0] += 1
            most[0] = max(most[0], now[0])
        release.wait(0.05)  # a request's latency
        with lock:
            now[0] -= 1

    tees = [s3._DiskTee(_Opener(opened_then_closed), f"s3://bucket/ns/t/data/0-{i}-abc.parquet", cache)
            for i in range(3 * limit)]
    for tee in tees:
        tee.write(b"PAR1" + b"y" * 1000 + b"PAR1")
    threads = [threading.Thread(target=tee.close) for tee in tees]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # bounded, and uploads still go side by side (the bound itself is reached on a quiet machine,
    # but threads starting late under load may not all overlap: not asserted)
    assert 2 <= most[0] <= limit
    assert all(cache.path(f"s3://bucket/ns/t/data/0-{i}-abc.parquet").is_file() for i in range(3 * limit))
