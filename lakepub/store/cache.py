"""A local disk cache of immutable files of an object-store warehouse, and the key index through it.

The ledger's key index (``store/key_index.py``) memory-maps its runs, which needs a file system.
For a warehouse on S3 the runs live next to the ledger (``<ledger location>/index/<uuid>.arrow``,
uploaded by the publish that wrote them, before its commit) and a process maps local copies of
them kept in a cache folder (``.lakepub/cache`` by default, ``cache:`` in lakepub.yaml). A new
process with a warm cache then looks keys up exactly like a warm one; with a cold cache it
downloads the runs its ledger snapshot names (~33 bytes per ledger row, the whole index: the
runs are what a lookup binary-searches), in parallel, instead of the whole ledger (~19 bytes per
row, but scanned by DuckDB on every publish).

The invariants:

* **never a stale file**: a cached file is named by its remote location, and the files cached
  here never change once written (UUID names; Iceberg metadata and runs are write-once), so a
  path cannot name other content than it did when it was cached;
* **never a partial or corrupted file**: a download goes to a temporary file in the same folder
  and is renamed over the final name only once complete (a killed download leaves a
  ``.part-*`` file that nothing reads, removed by the next eviction); before each use a file is
  checked against the size the ledger snapshot recorded for it and, for runs, against the Arrow
  IPC magic bytes at both ends. A file failing the check is deleted and downloaded again. (A
  flipped bit inside a file of the right size and ends is not detected: the cache trusts the
  disk as the local warehouse does.)
* **bounded**: the least recently used files beyond the size limit are deleted (a file is
  touched on each use; the file just added is kept, and so are the other runs of the lookup
  fetching it: the runs one ledger snapshot needs may exceed the limit together), on a process's first addition and whenever
  its running total of the folder crosses the limit (a walk of the folder per publish would cost
  more than the publish; other processes' additions are seen at the next walk).
"""

from __future__ import annotations

import os
import struct
import threading
import time
import uuid
import zlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable, Sequence
from urllib.parse import urlsplit

import numpy as np
import pyarrow as pa
from pyiceberg.io import FileIO

from lakepub.store.key_index import INDEX_FOLDER, INDEX_SCHEMA, KeyIndex, Run

CACHE_FOLDER = "lakepub.cache-folder"  # FileIO properties (store/s3.py reads Parquet files through the cache)
CACHE_LIMIT_MB = "lakepub.cache-limit-mb"
DEFAULT_FOLDER = ".lakepub/cache"
DEFAULT_LIMIT_MB = 4096
CHUNK = 8 << 20
PART_PREFIX = ".part-"
_STALE_PART_S = 3600  # a temporary download older than this belongs to a killed process
_ARROW_MAGIC = b"ARROW1"
_PARQUET_MAGIC = b"PAR1"
_SMALL_MAGIC = b"LPC1"  # frame of the small files ``store`` keeps: data, magic, crc32 (u32), length (u64)
_POOL = ThreadPoolExecutor(max_workers=8, thread_name_prefix="lakepub-cache")


def remote(location: str) -> bool:
    """Whether a location is on an object store (anything with a scheme other than file://)."""
    return "://" in location and not location.startswith("file://")


class FileCache:
    """Immutable remote files, copied under ``folder`` (mirroring ``scheme/bucket/key``), at most
    ``limit`` bytes in all."""

    def __init__(self, folder: Path, limit: int = DEFAULT_LIMIT_MB << 20):
        self.folder, self.limit = Path(folder), limit
        self._total: int | None = None  # this process's estimate of the bytes in the folder
        self._lock = threading.Lock()

    def added(self, size: int, keep: set[Path] = frozenset()) -> None:  # type: ignore[assignment]
        """Account for a file of ``size`` bytes just added; evict (a walk of the folder) on the
        first addition of this process and whenever the running total crosses the limit, not on
        every file (a publish adds ~40)."""
        with self._lock:
            if self._total is not None and self._total + size <= self.limit:
                self._total += size
                return
            self.evict(keep)

    def path(self, location: str) -> Path:
        """Where the copy of ``location`` is kept."""
        parts = urlsplit(location)
        key = parts.path.lstrip("/")
        if not parts.scheme or not parts.netloc or ".." in key.split("/"):
            raise ValueError(f"not a remote file location: {location}")
        return self.folder / parts.scheme / parts.netloc / key

    def fetch(self, io: FileIO | None, location: str, size: int | None = None,
              check: Callable[[Path], bool] | None = None, open_remote: Callable[[], Any] | None = None,
              keep: frozenset[Path] = frozenset()) -> Path:
        """The local copy of ``location``: the cached one if it passes the checks (``size``, when
        known, and ``check``), else downloaded anew (atomically) with ``io`` (or ``open_remote()``,
        a readable stream). Raises OSError if the remote file cannot be read (FileNotFoundError if
        it is gone) or the download has the wrong size. ``keep``: other copies the caller is about
        to use (the runs of one lookup), never evicted by this download."""
        path = self.cached(location, size, check)
        if path is not None:
            return path
        path = self.path(location)
        path.unlink(missing_ok=True)  # corrupt or truncated: never served again
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{PART_PREFIX}{uuid.uuid4().hex}-{path.name}")
        try:
            written = 0
            opened = open_remote() if open_remote is not None else io.new_input(location).open(seekable=False)
            with opened as source, open(tmp, "wb") as sink:
                while chunk := source.read(CHUNK):
                    sink.write(chunk)
                    written += len(chunk)
            if size is not None and written != size:
                raise OSError(f"downloaded {written} bytes of {location}, its ledger snapshot recorded {size}")
            if check is not None and not check(tmp):
                raise OSError(f"{location} is not a valid file of its kind (downloaded {written} bytes)")
            os.replace(tmp, path)  # the final name appears only with the whole file
        finally:
            tmp.unlink(missing_ok=True)
        self.added(written, keep={path, *keep})
        return path

    def cached(self, location: str, size: int | None = None, check: Callable[[Path], bool] | None = None
               ) -> Path | None:
        """The local copy of ``location`` if it passes ``fetch``'s checks (``size``, when known, and
        ``check``), marked as just used; else None (nothing is downloaded or deleted)."""
        path = self.path(location)
        if not self._valid(path, size, check):
            return None
        _touch(path)
        return path

    def put(self, io: FileIO, location: str, local: Path) -> int:
        """Upload the local file ``local`` (already at ``self.path(location)``) to ``location``;
        returns its size. An io with ``upload_later`` (``store/s3.py`` with background uploads)
        may take the upload to the background: the next metadata file written waits for it."""
        source = open(local, "rb")  # noqa: SIM115 - opened now: an eviction may remove the name before the upload reads it
        size = os.fstat(source.fileno()).st_size

        def upload() -> None:
            with source:
                put_file = getattr(io, "put_file", None)  # store/single_put.py: one PutObject if large
                if put_file is not None and put_file(location, source, size):
                    return
                with io.new_output(location).create(overwrite=True) as sink:
                    while chunk := source.read(CHUNK):
                        sink.write(chunk)

        later = getattr(io, "upload_later", None)
        if later is None or not later(location, upload):
            upload()
        self.added(size, keep={local})
        return size

    def store(self, location: str, data: bytes) -> None:
        """Keep a small immutable file's bytes (Iceberg metadata), framed with their length and
        CRC-32 so that ``read`` detects any truncation or corruption; written atomically."""
        path = self.path(location)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f"{PART_PREFIX}{uuid.uuid4().hex}-{path.name}")
            try:
                with open(tmp, "wb") as f:
                    f.write(data)
                    f.write(_SMALL_MAGIC + struct.pack("<IQ", zlib.crc32(data), len(data)))
                os.replace(tmp, path)
            finally:
                tmp.unlink(missing_ok=True)
        except OSError:  # a cache that cannot be written only costs a download next time
            return
        self.added(len(data), keep={path})

    def read(self, location: str) -> bytes | None:
        """The bytes ``store`` kept for ``location``, or None (absent, or failing its check: then
        deleted, to be fetched again)."""
        path = self.path(location)
        try:
            raw = path.read_bytes()
        except OSError:
            return None
        tail = len(_SMALL_MAGIC) + 12
        if len(raw) >= tail and raw[-tail:-12] == _SMALL_MAGIC:
            crc, size = struct.unpack("<IQ", raw[-12:])
            data = raw[:-tail]
            if size == len(data) and zlib.crc32(data) == crc:
                _touch(path)
                return data
        path.unlink(missing_ok=True)
        return None

    def evict(self, keep: set[Path] = frozenset()) -> int:  # type: ignore[assignment]
        """Delete least recently used files beyond the limit (and stale temporary downloads);
        returns the bytes deleted."""
        if not self.folder.is_dir():
            return 0
        files, total, now = [], 0, time.time()
        for root, _, names in os.walk(self.folder):
            for name in names:
                path = Path(root) / name
                try:
                    stat = path.stat()
                except FileNotFoundError:
                    continue
                if name.startswith(PART_PREFIX):
                    if now - stat.st_mtime > _STALE_PART_S:
                        path.unlink(missing_ok=True)
                    continue
                files.append((stat.st_mtime, stat.st_size, path))
                total += stat.st_size
        freed = 0
        for _, size, path in sorted(files, key=lambda f: f[0]):
            if total - freed <= self.limit:
                break
            if path in keep:
                continue
            path.unlink(missing_ok=True)  # a mapped file stays readable until unmapped
            freed += size
        self._total = total - freed
        return freed

    @staticmethod
    def _valid(path: Path, size: int | None, check: Callable[[Path], bool] | None) -> bool:
        try:
            if size is not None and path.stat().st_size != size:
                return False
            return check(path) if check is not None else path.is_file()
        except OSError:
            return False


def _touch(path: Path) -> None:
    try:
        os.utime(path)
    except OSError:
        pass


def _framed(path: Path, magic: bytes) -> bool:
    with open(path, "rb") as f:
        head = f.read(len(magic))
        f.seek(0, os.SEEK_END)
        if f.tell() < 2 * len(magic):
            return False
        f.seek(-len(magic), os.SEEK_END)
        return head == magic and f.read() == magic


def arrow_file(path: Path) -> bool:
    """Whether ``path`` starts and ends with the Arrow IPC file magic (cheap: two small reads)."""
    return _framed(path, _ARROW_MAGIC)


def parquet_file(path: Path) -> bool:
    """Whether ``path`` starts and ends with the Parquet magic (a download cut short does not)."""
    return _framed(path, _PARQUET_MAGIC)


class CachedKeyIndex(KeyIndex):
    """The key index of a ledger on an object store, through a ``FileCache``: runs are fetched
    (in parallel) before a lookup or merge maps them, and runs a publish writes are written to
    the cache and uploaded before its commit; their sizes go into the snapshot's run list
    (``Run.size``) so a cached copy can be checked without asking the store."""

    def __init__(self, cache: FileCache, ledger_location: str, schema: pa.Schema = INDEX_SCHEMA):
        self.cache = cache
        self.remote_folder = f"{ledger_location.rstrip('/')}/{INDEX_FOLDER}"
        super().__init__(cache.path(self.remote_folder + "/x").parent, schema)
        self.io: FileIO | None = None

    def bind(self, io: FileIO) -> "CachedKeyIndex":
        """Use ``io`` (the ledger table's FileIO) to reach the store."""
        self.io = io
        return self

    def location(self, run: Run) -> str:
        return f"{self.remote_folder}/{run.name}"

    def ensure(self, runs: Sequence[Run]) -> None:
        """Have every run in the cache, valid (downloading the missing ones side by side);
        raises OSError if one cannot be fetched."""
        if self.io is None:
            raise OSError("the key index has no FileIO bound")
        io = self.io
        # All of them are about to be mapped: fetching one must not evict another (runs larger
        # than the cache limit together would otherwise never be usable, and lose the index).
        keep = frozenset(self.cache.path(self.location(run)) for run in runs)
        # The runs already cached are checked here (size, Arrow magic at both ends: ~0.1 ms
        # each), the fetch pool only downloads: a new process with a warm cache started the
        # pool's threads for checks alone, on its main thread (8 thread starts, 15-50 ms of a
        # new process's publish at 10M orders on S3 in profiles, the GIL held by its head start).
        missing = [run for run in runs if self.cache.cached(self.location(run), run.size, arrow_file) is None]
        futures = [_POOL.submit(self.cache.fetch, io, self.location(run), run.size, arrow_file, None, keep)
                   for run in missing]
        for future in futures:
            future.result()

    def lookup(self, runs: Sequence[Run], k1: np.ndarray, k2: np.ndarray) -> tuple[pa.Table, np.ndarray]:
        self.ensure(runs)
        return super().lookup(runs, k1, k2)

    def append(self, runs: Sequence[Run], new_rows: pa.Table) -> list[Run]:
        self.ensure(runs)  # a merge reads them
        out = super().append(runs, new_rows)
        old = {run.name for run in runs}
        written = {run.name: _POOL.submit(self.upload, run) for run in out if run.name not in old}
        return [written[run.name].result() if run.name in written else run for run in out]

    def upload(self, run: Run) -> Run:
        """Upload a run written to the cache folder next to the ledger; the run with its size."""
        if self.io is None:
            raise OSError("the key index has no FileIO bound")
        return Run(run.name, run.rows, self.cache.put(self.io, self.location(run), self.folder / run.name))
