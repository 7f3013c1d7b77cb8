"""Adversarial review of issue 16's S3 streams (``store/s3_streams.py``): uploads bounded by a
process-wide semaphore of Arrow's IO-thread count, and what a forked child inherits of it.

A parent whose publishing thread is mid-upload (every ``_send`` slot held: its S3 requests in
flight) when another thread forks: the child inherits the semaphore's count but not the threads
that would release it. Its own publish must still upload and commit, read back by DuckDB equal
to the oracle, not wait forever for a slot nobody in it holds.
"""

from __future__ import annotations

import json
import subprocess
import sys

from conftest import summary_rows, write_jsonl
from lakepub.workspace import Workspace
from test_janitor import OFFSETS, batch_events, expected_rows, moto_endpoint  # noqa: F401 - fixture
from test_s3_warm import _s3_workspace

# The end of both scripts: a forked child publishes one batch; the parent then lets its uploads
# finish (``done``, then ``finish()``) and prints the child's exit code, or "hung" after 90 s.
_FORK_A_PUBLISHING_CHILD = """
def child():
    Workspace.open(root).publish("orders_daily", path, start={"p0": start}, end={"p0": end})
process = multiprocessing.get_context("fork").Process(target=child)
process.start()
process.join(90)
done.set()
finish()
if process.is_alive():
    process.kill()
    print(json.dumps({"exitcode": "hung"}))
else:
    print(json.dumps({"exitcode": process.exitcode}))
"""


def _forked_child_publishes(script: str, root, tmp_path) -> None:
    """Run ``script`` (its parent part + ``_FORK_A_PUBLISHING_CHILD``): the child exits 0 and its
    batch is published, read back by DuckDB equal to the oracle."""
    path = write_jsonl(tmp_path / "b0.jsonl", batch_events(0))
    out = subprocess.run([sys.executable, "-c", script, str(root), str(path), str(OFFSETS[0]), str(OFFSETS[1])],
                         capture_output=True, text=True, timeout=300, cwd=root)
    assert out.returncode == 0, out.stderr[-3000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == {"exitcode": 0}, out.stderr[-3000:]
    assert summary_rows(Workspace.open(root)) == expected_rows(1)  # read back by DuckDB: the oracle


# Every upload slot held by a parent thread inside ``_send`` (its stream's write waiting like a
# request in flight), then a fork: the child publishes one batch.
_FORK_MID_UPLOAD = """
import json, multiprocessing, sys, threading
import pyarrow as pa
from lakepub.store import s3_streams
from lakepub.workspace import Workspace
root, path, start, end = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
Workspace.open(root).catalog
in_flight, done = threading.Semaphore(0), threading.Event()
class InFlight:
    def write(self, chunk):
        in_flight.release()
        done.wait()
    def close(self):
        pass
slots = pa.io_thread_count()
threads = [threading.Thread(target=s3_streams._send, args=(InFlight(), [b"x"])) for _ in range(slots)]
for t in threads:
    t.start()
for _ in range(slots):
    in_flight.acquire()
def finish():
    for t in threads:
        t.join()
""" + _FORK_A_PUBLISHING_CHILD


def test_a_child_forked_while_every_upload_slot_is_held_publishes(moto_endpoint, tmp_path):  # noqa: F811
    _forked_child_publishes(_FORK_MID_UPLOAD, _s3_workspace(tmp_path / "ws", moto_endpoint, "forked-mid-upload",
                                                            tmp_path), tmp_path)


# A background upload of the parent in flight (``store/uploads.background_upload``), then a fork:
# the child's own metadata file waits for every upload in ``_PENDING`` (``uploads_done``).
_FORK_MID_BACKGROUND_UPLOAD = """
import json, multiprocessing, sys, threading
from lakepub.store import uploads
from lakepub.workspace import Workspace
root, path, start, end = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
Workspace.open(root).catalog
started, done = threading.Event(), threading.Event()
def in_flight():
    started.set()
    done.wait()
uploads.background_upload("s3://parent/only/data/0.parquet", in_flight)
started.wait()
def finish():
    pass
""" + _FORK_A_PUBLISHING_CHILD


def test_a_child_forked_during_a_background_upload_publishes(moto_endpoint, tmp_path):  # noqa: F811
    """The parent's upload is not the child's: no metadata file the child writes names it, and
    the thread that would finish its future does not exist in the child."""
    _forked_child_publishes(_FORK_MID_BACKGROUND_UPLOAD, _s3_workspace(tmp_path / "ws", moto_endpoint,
                                                                       "forked-mid-background", tmp_path), tmp_path)


class _Counting:
    """A stream factory whose stream keeps only a digest of what went up (no copy of its own)."""

    def __init__(self):
        import hashlib

        self.digest, self.size = hashlib.sha256(), 0

    def __call__(self):
        opener = self

        class _Stream:
            def write(self, chunk) -> None:
                opener.digest.update(chunk)
                opener.size += len(chunk)

            def close(self) -> None:
                pass

        return _Stream()


def test_a_large_data_files_upload_holds_no_second_copy_of_it(tmp_path):
    """A data file's bytes are kept as written until its upload ends (issue 16): its close must
    not join them into a second copy first (a 200 MiB file measured 404-448 MiB of peak RSS
    growth against 180-235 MiB before issue 16). Python allocations at close, traced, stay
    well below the file's size; what went up and the disk cache's copy are the bytes written."""
    import hashlib
    import os
    import tracemalloc

    from lakepub.store import s3_streams
    from lakepub.store.cache import FileCache

    cache = FileCache(tmp_path / "cache", 1 << 30)
    location = "s3://bucket/ns/t/data/00000-0-big.parquet"
    opener, written = _Counting(), hashlib.sha256()
    tee = s3_streams._DiskTee(opener, location, cache)
    chunk = os.urandom(1 << 16)
    for _ in range(512):  # 32 MiB, as a Parquet writer writes it: page by page
        tee.write(chunk)
        written.update(chunk)
    tracemalloc.start()
    try:
        tee.close()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert opener.size == 32 << 20 and opener.digest.hexdigest() == written.hexdigest()
    assert hashlib.sha256(cache.path(location).read_bytes()).hexdigest() == written.hexdigest()
    assert peak < 4 << 20, peak  # no second copy of the 32 MiB


def test_a_write_after_close_is_refused_and_never_reaches_the_cache_copy(tmp_path):
    """pyarrow's S3 stream (and a Python file) refuse a write once closed. A kept-bytes stream
    accepted it: with the upload in the background, the bytes went into the cache copy still
    open for it while the upload sent the file as closed, so the next process would read a copy
    that is not the uploaded file."""
    import threading

    import pytest

    from lakepub.store import s3_streams, uploads
    from lakepub.store.cache import FileCache

    cache = FileCache(tmp_path / "cache", 1 << 30)
    location = "s3://bucket/ns/t/data/00000-0-late.parquet"
    gate, opener = threading.Event(), _Counting()

    def slow_open():
        gate.wait(10)
        return opener()

    tee = s3_streams._DiskTee(slow_open, location, cache, background=True)
    tee.write(b"PAR1" + b"z" * 100 + b"PAR1")
    tee.close()
    with pytest.raises(ValueError):
        tee.write(b"late bytes")
    gate.set()
    uploads.uploads_done()
    assert opener.size == 108
    assert cache.path(location).read_bytes() == b"PAR1" + b"z" * 100 + b"PAR1"
