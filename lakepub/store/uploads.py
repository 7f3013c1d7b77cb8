"""Uploads that finish in the background, and the barrier a commit passes before it points at them.

``store/s3.py`` closes manifests, manifest lists, data files and key-index runs of an S3
warehouse without waiting for their uploads (``background_upload``); whatever makes a catalog
point at a metadata file must first wait for all of them (``uploads_done``): a metadata file's
close does, unless written inside ``metadata_before_uploads`` by a caller that waits itself
before its pointer swap (``store/commit.commit_atomically``). An upload that fails is recorded for
the life of the process, and every later ``uploads_done`` raises ``UploadFailed`` (a retry, exit
4): the process cannot tell which commit would name the missing file, so it commits nothing more.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from typing import Callable, Iterator

from lakepub.errors import RetryableError

# Files finish uploading in the background (see the module docstring):
# the uploads under way by location, and every one that failed (for the life of the process).
_UPLOADS = ThreadPoolExecutor(max_workers=16, thread_name_prefix="lakepub-upload")
_PENDING: dict[str, Future] = {}
_FAILED: list[str] = []
_PENDING_LOCK = threading.Lock()


class UploadFailed(RetryableError, OSError):
    """A background upload of this process failed: it commits nothing more (exit 4, retry)."""


def uploads_done() -> None:
    """Wait for every background upload started so far; raise OSError if any upload this process
    started in the background has ever failed (a metadata file written after it might name it):
    ``UploadFailed``, an OSError that the CLI reports as a retry (exit 4)."""
    with _PENDING_LOCK:
        pending = list(_PENDING.values())
    for future in pending:
        try:
            future.result()
        except BaseException:  # noqa: BLE001 - recorded in _FAILED by the upload itself
            pass
    if _FAILED:
        raise UploadFailed(f"an earlier upload of this process failed ({_FAILED[0]}): it commits nothing more "
                      "(nothing was published by this attempt); run again in a new process")


def _after_fork_in_child() -> None:
    """A forked child has the parent's pending uploads but not the threads finishing them: their
    futures never complete, and its first ``uploads_done`` waited forever. They are the parent's
    files, named by no metadata file the child writes; a failure already recorded stays."""
    global _PENDING_LOCK
    _PENDING_LOCK = threading.Lock()
    _PENDING.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


_SWAP_WAITS = threading.local()  # set in ``metadata_before_uploads``: the caller waits before its swap


@contextmanager
def metadata_before_uploads() -> Iterator[None]:
    """Within (this thread): a metadata file's close returns once the file itself is up, without
    waiting for the background uploads, which then go up side by side with it. Only for a
    caller that calls ``uploads_done`` before any catalog may point at the file
    (``store/commit.commit_atomically``: before its pointer swap)."""
    _SWAP_WAITS.on = True
    try:
        yield
    finally:
        _SWAP_WAITS.on = False


def _wait_upload(location: str) -> None:
    with _PENDING_LOCK:
        future = _PENDING.get(location)
    if future is not None:
        try:
            future.result()
        except BaseException:  # noqa: BLE001 - the read reports what it finds
            pass


def background_upload(location: str, upload: Callable[[], None]) -> None:
    """Run ``upload`` (of ``location``) in the background; the next metadata file's close waits
    for it (``uploads_done``) and a failure fails every later one. Only for files a commit names
    through a metadata file this process writes (``BACKGROUND_UPLOADS``)."""

    def run() -> None:
        # The failure is recorded before the future completes: whoever waits on it sees it.
        try:
            upload()
        except BaseException as exc:
            with _PENDING_LOCK:
                _FAILED.append(f"{location}: {' '.join(str(exc).split())}")
            raise
        finally:
            with _PENDING_LOCK:
                _PENDING.pop(location, None)

    with _PENDING_LOCK:  # held until registered: the upload's own clean-up takes it
        _PENDING[location] = _UPLOADS.submit(run)
