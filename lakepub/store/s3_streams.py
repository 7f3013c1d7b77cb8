"""The output streams of ``store/s3.py``'s S3 files: write-once files kept as written, uploaded at close.

pyarrow's S3 output stream (``allow_delayed_open``) buffers a file below its part size into a
part buffer of that size (10 MiB, zero-filled up to its capacity when the stream closes), from
the stream's first write until its upload ends. lakepub wrote into it as a file was encoded, so
every file of a publish held one while it was encoded, queued for an upload thread and
uploaded; and 16 upload threads held one each while pyarrow's requests waited for Arrow's 8 IO
threads (``pa.io_thread_count()``: the latency server never saw more than 8 requests at once).
A warm process reuses that memory; a new one faults it in fresh, and on the benchmark's VM
(``perf record`` of a new process's publish, 1M orders, S3 +30 ms) ~45% of the new process's
publish CPU was the kernel zeroing huge pages, two thirds of it under ``ObjectOutputStream``.

Here a file's bytes are kept as written (and a data file's also written to its local copy in
the disk cache), and pyarrow's stream is opened only for the upload, at close
(in the background for manifests and data files: ``store/uploads.py``), by at most as many
uploads at once as Arrow has IO threads (``_send``): a stream lives for its request only and
the next upload reuses its buffer. Arrow's pool peak in a new process's publish rewriting 33
partitions went from 187 to 107 MiB (``tests/integration/test_s3_new_process.py``), and at 10M
orders, S3 +30 ms, a new process's publish from 4.16 to 1.87 s (CPU 1.81 to 1.15 s), 2.33x to
1.03x of the same process's warm publishes (``scripts/bench/cold_publish_ab.py``, 6 pairs
interleaved with main, load 8-13; README "Benchmarks", issue 16). Keeping the bytes costs a
file's size in memory until its upload ends (a few MB for a 100k-event publish), in Python's
heap, which Arrow's pool peak above does not count; a data file goes up from its kept parts
(``_drained``, ~1 MiB writes), never joined into a second copy (a 200 MiB file joined first
grew the peak RSS by 404-448 MiB, by 250 MiB drained, 235-247 MiB before: moto, load ~10). A
fork's child starts with no upload slot taken (``_after_fork_in_child``). A file
whose writing fails (an exception inside its ``with``) is never uploaded: its stream was never
opened (an opened one uploads what it holds when closed).
"""

from __future__ import annotations

import os
import threading
import uuid
from typing import Any

import pyarrow as pa

from lakepub.store.cache import PART_PREFIX, FileCache
from lakepub.store.remembered import Remembered
from lakepub.store.uploads import _SWAP_WAITS, background_upload, uploads_done

REMEMBERED = Remembered()


class _Tee:
    """An output stream for a write-once metadata file (``*.metadata.json``, ``*.avro``): the
    bytes are kept as written and uploaded at close through pyarrow's S3 stream, opened only
    then (``stream``: the stream, or a function that opens it; see the module docstring); the
    file is remembered once closed without error.

    A manifest or manifest list (``*.avro``) is remembered at close and uploaded in the
    background; a metadata file (``*.metadata.json``) is uploaded at close and its close then
    waits for every background upload (``uploads_done``)."""

    def __init__(self, stream: Any, location: str, disk: FileCache | None = None, background: bool = False):
        self._open = stream if callable(stream) else (lambda: stream)
        self._location, self._parts, self._size, self._closed = location, [], 0, False  # type: ignore[var-annotated]
        self._abandoned = False  # closed by an exception inside its ``with``
        self._small_disk, self._background = disk, background

    def write(self, data: Any) -> int:
        if self._closed:  # as pyarrow's stream: bytes after close would reach a cache copy, not the upload
            if self._abandoned:  # (a writer's own clean-up, e.g. ParquetWriter.__del__: nothing goes up)
                return len(data)
            raise ValueError(f"I/O operation on closed file {self._location}")
        data = bytes(data)
        self._parts.append(data)
        self._size += len(data)
        return len(data)

    def tell(self) -> int:
        return self._size

    def flush(self) -> None:
        pass

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        data = b"".join(self._parts)
        self._parts = []
        if self._background and self._location.endswith(".avro") and REMEMBERED.put(self._location, data):
            # served from memory to this process from now on; the upload finishes in the background
            background_upload(self._location, lambda: self._upload(data))
            return
        self._upload(data)  # raises if the upload failed: nothing is remembered
        REMEMBERED.put(self._location, data)
        if self._location.endswith(".metadata.json"):
            if not getattr(_SWAP_WAITS, "on", False):
                uploads_done()  # a catalog may point at this file once it is written: all it names must be up

    def _upload(self, data: bytes) -> None:
        _send(self._open(), [data])
        if self._small_disk is not None:
            self._small_disk.store(self._location, data)

    def __enter__(self) -> "_Tee":
        return self

    def __exit__(self, exc_type: Any, *exc: Any) -> None:
        if exc_type is None:
            self.close()
        else:  # a file written only in part: nothing goes up
            self._closed, self._abandoned, self._parts = True, True, []


def _send(stream: Any, chunks: Any) -> None:
    """Write ``chunks`` into a just-opened S3 output stream and close it (the upload), at most
    ``_SENDING`` at once."""
    with _sending():
        for chunk in chunks:
            stream.write(chunk)
        stream.close()


_CHUNK = 1 << 20


def _drained(parts: list[bytes]) -> Any:
    """``parts`` (emptied) in order, joined into chunks of about ``_CHUNK``: a file kept as written
    goes up without a second copy of it in memory (a file below ``_CHUNK`` in one write)."""
    parts.reverse()
    while parts:
        chunk, size = [], 0
        while parts and size < _CHUNK:
            chunk.append(parts.pop())
            size += len(chunk[-1])
        yield chunk[0] if len(chunk) == 1 else b"".join(chunk)


# pyarrow's S3 requests run on Arrow's IO thread pool: a ninth upload would only wait there for
# an IO thread, its part buffer in hand. Bounded by the IO pool's size when first used.
_SENDING: list[threading.BoundedSemaphore] = []
_SENDING_LOCK = threading.Lock()


def _sending() -> threading.BoundedSemaphore:
    if not _SENDING:
        with _SENDING_LOCK:
            if not _SENDING:
                _SENDING.append(threading.BoundedSemaphore(max(1, pa.io_thread_count())))
    return _SENDING[0]


def _after_fork_in_child() -> None:
    """A forked child inherits the semaphore's count but none of the threads holding its slots
    (a parent mid-upload): they would never be released and its uploads would wait forever."""
    global _SENDING_LOCK
    _SENDING_LOCK = threading.Lock()
    _SENDING.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


class _DiskTee(_Tee):
    """An output stream for a Parquet data file: its bytes are kept (as ``_Tee``'s) and written to
    a local copy in the disk cache, uploaded at close (pyarrow's S3 stream opened only then) and
    the copy moved under its final name only once the upload has completed (the next process then
    reads it from disk). The upload never depends on the copy: a copy the cache folder cannot
    write or keep, full or cleared, is dropped, and that is not a failed upload. With
    ``background``, its close returns once the file is complete and the upload finishes in the
    background, like a manifest's (the next metadata file's close waits for it)."""

    def __init__(self, stream: Any, location: str, disk: FileCache, background: bool = False):
        super().__init__(stream, location, background=background)
        self._disk, self._final = disk, disk.path(location)
        self._final.parent.mkdir(parents=True, exist_ok=True)
        self._tmp = self._final.with_name(f"{PART_PREFIX}{uuid.uuid4().hex}-{self._final.name}")
        self._copy: Any = open(self._tmp, "wb")  # noqa: SIM115 - closed in _finish()/_discard()

    def write(self, data: Any) -> int:
        n = super().write(data)
        if self._copy is not None:
            try:
                self._copy.write(self._parts[-1])
            except OSError:  # a full cache disk: no copy, the upload goes on
                self._discard()
        return n

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._data, self._parts = self._parts, []  # not joined: a second copy of the whole file
        if self._background:
            background_upload(self._location, self._finish)
        else:
            self._finish()

    def _finish(self) -> None:
        data, self._data = self._data, []
        try:
            _send(self._open(), _drained(data))  # the upload: only its failure is the file's (``uploads_done``)
        except BaseException:
            self._discard()
            raise
        if self._copy is None:
            return
        try:
            self._copy.close()
            os.replace(self._tmp, self._final)
        except OSError:  # a full or cleared cache folder only costs a download next time
            self._discard()
            return
        try:
            self._disk.added(self._size, keep={self._final})  # not a stat: another process may evict it at once
        except OSError:  # an eviction that failed: the file is up and kept
            pass

    def _discard(self) -> None:
        copy, self._copy = self._copy, None
        if copy is not None:
            try:
                copy.close()
            except OSError:
                pass
        self._tmp.unlink(missing_ok=True)

    def __exit__(self, exc_type: Any, *exc: Any) -> None:
        if exc_type is None:
            self.close()
        else:  # a file written only in part: nothing goes up, no copy is left
            self._closed, self._abandoned, self._parts = True, True, []
            self._discard()
