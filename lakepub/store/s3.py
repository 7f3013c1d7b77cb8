"""Writing to S3 in as few round trips as the files allow.

pyiceberg's ``PyArrowFileIO`` opens an ``S3FileSystem`` with pyarrow's defaults, under which
every file, however small, is a multipart upload (CreateMultipartUpload, UploadPart,
CompleteMultipartUpload: three requests one after another), and ``create(overwrite=False)``
first asks whether the file exists (a HEAD) and pyarrow whether its path is a directory (a
LIST). At 20-50 ms per request that was ~70 requests in sequence per publish (measured with
``scripts/bench/object_store.py``).

``LakepubFileIO`` is that FileIO with two changes, for S3 locations only:

* the file system is opened with ``allow_delayed_open=True``: pyarrow then starts no upload at
  open, and a file that fits in one part (up to pyarrow's 10 MiB part size, measured on pyarrow
  26 in ``store/single_put.py``: every metadata file, manifest and most partition files) goes up
  in ONE PutObject at close; larger files are still
  multipart uploads, except key-index runs, put in one request by ``put_file``
  (``store/single_put.py``);
* ``create(overwrite=False)`` skips the existence check. Every file pyiceberg and lakepub create
  without overwriting has a fresh UUID in its name (data files, manifests, manifest lists,
  ``<n>-<uuid>.metadata.json``), so the check can only answer "no"; and S3 has no atomic
  create-if-absent through it anyway (the check was a race by its own docstring).

* immutable metadata files (``*.metadata.json``, manifest lists and manifests: ``*.avro``) that
  this process wrote or read are kept in memory (``_Remembered``, LRU, 64 MiB) and served from
  there: a publish does not read back the manifest it just wrote to learn its length, the
  manifest list it just committed, or on its next publish the metadata file it committed last.
  Their names are unique (a UUID), so a remembered file can never be stale; a metadata file is
  remembered only once its upload has completed, a manifest or manifest list once written
  (below), and its copy on disk only once uploaded.

* manifests and manifest lists are uploaded in the background once written (they are served
  to this process from memory meanwhile), and so are data files (with the disk cache: their
  close returns once the local copy is complete) and key-index runs (``upload_later``,
  ``store/cache.py``); a metadata file's close, after its own upload, waits for every background
  upload before it returns: a catalog points at a metadata file only after writing it, so
  everything a committed snapshot names is in the store. The atomic commit
  (``store/commit.py``) writes its metadata files inside ``metadata_before_uploads`` instead and
  calls ``uploads_done`` itself right before its pointer swap, so a publish's data files, runs,
  manifests and metadata files go up together (from 16 upload threads, 8 requests at a time:
  pyarrow sends them on Arrow's IO threads; 48 threads cost more CPU and were slower on moto,
  measured; pyarrow's stream is opened for the upload only, ``store/s3_streams.py``). An upload that fails (after pyarrow's own retries) fails every later
  metadata file of the process (``uploads_done``, ``store/uploads.py``: it cannot tell which
  commit would name the missing file): nothing more is committed by it, and a new process
  (``run --follow``'s supervisor restarts it) starts clean. Only on catalogs whose client writes the metadata file
  (SQL, Glue, Hive, ...: ``configure`` sets ``BACKGROUND_UPLOADS``): a REST catalog's server
  writes it, and its client's commit would name a manifest list still on its way up.
* a manifest list read from the store has its manifests fetched side by side into memory
  (pyiceberg reads them one after another: a round trip each);
* with a disk cache (``store/cache.py``, the workspace's ``cache:``), the immutable metadata
  files above are also kept on disk (framed with a CRC-32: a damaged copy is dropped and fetched
  again), and Parquet files are written to it as they are uploaded and read from it (fetched on a miss, atomically; checked by the
  Parquet magic at both ends): a new process rewriting the published partitions reads them from
  disk. Data files are immutable (UUID names), so a copy is never stale.

Measured (``scripts/bench/object_store.py --quick``, +30 ms per request): a warm publish
rewriting 36 partitions went from 70 requests in sequence (160 in all) to 10-13 (46); a new
process's publish from 58 (174) to ~28 (66) with the cache warm. The background manifest
uploads took a 100k-event publish from 13-18 requests in sequence to 10-12, and a 1M-event
``run`` from 132-148 to 98-123 (``--history 1000000`` and ``10000000``). Data files, runs and
metadata files in the same wave, and a ``run``'s hints deferred (``commit.deferred_cleanup``),
took the median ``run`` from 10.09 to 8.91 s at load ~14 (README "Benchmarks", issue 16).

Correctness does not depend on any of these: the catalog's compare-and-set decides which metadata is
current. The workspace uses it when the warehouse is on S3 and ``py-io-impl`` is not set
(``configure``); an explicit ``py-io-impl`` in lakepub.yaml wins.
"""

from __future__ import annotations

import os
import re
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable, Mapping

import pyarrow as pa
from pyiceberg.io import PY_IO_IMPL
from pyiceberg.io.pyarrow import PyArrowFile, PyArrowFileIO
from pyiceberg.typedef import EMPTY_DICT

from lakepub.store.cache import CACHE_FOLDER, CACHE_LIMIT_MB, DEFAULT_LIMIT_MB, FileCache, parquet_file
from lakepub.store import s3_warm, single_put
from lakepub.store.s3_streams import REMEMBERED, _DiskTee, _Tee  # noqa: F401 - _DiskTee, _Tee: for tests
from lakepub.store.uploads import (  # noqa: F401 - UploadFailed, uploads_done: re-exported
    _UPLOADS, UploadFailed, _wait_upload, background_upload, metadata_before_uploads, uploads_done,
)

IO_IMPL = "lakepub.store.s3.LakepubFileIO"
# Set (by ``configure``) only for catalogs that write the metadata file themselves: their commit
# then passes through a metadata file's close, which waits for the background uploads. A REST
# catalog's server writes it; the client's commit names the manifest list without writing
# anything, so without this property every file goes up before its close returns.
BACKGROUND_UPLOADS = "lakepub.s3.background-uploads"
_WRITES_METADATA = {"sql", "glue", "hive", "dynamodb", "bigquery", "in-memory"}


def configure(properties: Mapping[str, str], cache: FileCache | None = None) -> dict[str, str]:
    """Catalog properties with lakepub's FileIO for an S3 warehouse (unless one is configured),
    reading Parquet files through the disk ``cache`` if one is given."""
    out = dict(properties)
    if str(out.get("warehouse", "")).startswith(("s3://", "s3a://")):
        out.setdefault(PY_IO_IMPL, IO_IMPL)
        head_start(out)  # while the catalog opens and loads its tables
        if _catalog_type(out) in _WRITES_METADATA:
            out.setdefault(BACKGROUND_UPLOADS, "true")
        if cache is not None:
            out.setdefault(CACHE_FOLDER, str(cache.folder))
            out.setdefault(CACHE_LIMIT_MB, str(max(1, cache.limit >> 20)))
    return out


def head_start(properties: Mapping[str, str]) -> None:
    """A publish about to run on the catalog of ``properties``: if its warehouse is on S3 through
    lakepub's FileIO, start this process's pool threads and late imports in the background
    (``store/s3_warm.py``; once per process)."""
    if str(properties.get("warehouse", "")).startswith(("s3://", "s3a://")) and \
            properties.get(PY_IO_IMPL, IO_IMPL) == IO_IMPL:
        s3_warm.start(properties)


def _catalog_type(properties: Mapping[str, str]) -> str | None:
    from pyiceberg.catalog import infer_catalog_type

    if properties.get("py-catalog-impl"):  # a catalog class of its own: who writes its metadata is unknown
        return None
    if properties.get("type"):
        return str(properties["type"]).lower()
    try:
        found = infer_catalog_type("lakepub", dict(properties))
    except Exception:  # noqa: BLE001 - load_catalog reports it
        return None
    return found.value if found is not None else None


def immutable(location: str) -> bool:
    """Whether a location is one of Iceberg's write-once metadata files (named with a UUID)."""
    return location.endswith((".metadata.json", ".avro"))


class _S3File(PyArrowFile):
    """A ``PyArrowFile`` on S3: ``create`` never HEADs the location first, immutable metadata
    files are remembered when written or read, and Parquet files are read through the disk
    cache when one is configured (see the module docstring)."""

    disk: FileCache | None = None
    background = False  # manifests upload in the background (``BACKGROUND_UPLOADS``)

    def create(self, overwrite: bool = False) -> Any:  # noqa: ARG002 - names are unique; see above
        def stream() -> Any:  # opened when the upload starts (``_Tee``)
            return PyArrowFile.create(self, overwrite=True)

        if self.disk is not None and self.location.endswith(".parquet"):
            try:
                return _DiskTee(stream, self.location, self.disk, self.background)
            except OSError:  # a cache folder that cannot be written: upload only
                return stream()
        return _Tee(stream, self.location, self.disk, self.background) if immutable(self.location) else stream()

    def open(self, seekable: bool = True) -> Any:
        if self.disk is not None and self.location.endswith(".parquet"):
            _wait_upload(self.location)  # written by this process: in the cache once it is up
            try:
                path = self.disk.fetch(None, self.location, None, parquet_file,
                                       open_remote=lambda: PyArrowFile.open(self, seekable=False))
            except FileNotFoundError:  # the remote file is gone
                raise
            except OSError:  # e.g. a cache folder that cannot be written: read from the store
                return super().open(seekable)
            try:
                return pa.memory_map(str(path))
            except OSError:  # evicted by another process (or thread) since fetch checked it
                return super().open(seekable)
        if not immutable(self.location):
            return super().open(seekable)
        data = REMEMBERED.get(self.location)
        if data is None:
            _wait_upload(self.location)  # written by this process and since forgotten: read it once up
            data = _fetch_once(self)
        return pa.BufferReader(data)

    def _download(self) -> bytes:
        data = self.disk.read(self.location) if self.disk is not None else None
        if data is not None:  # kept on disk by this machine: no request
            REMEMBERED.put(self.location, data)
            return data
        with PyArrowFile.open(self, seekable=False) as stream:
            data = stream.read()
        REMEMBERED.put(self.location, data)
        if self.disk is not None:
            self.disk.store(self.location, data)
        if _MANIFEST_LIST.search(self.location):
            _prefetch_manifests(self, data)
        return data

    def __len__(self) -> int:
        data = REMEMBERED.get(self.location) if immutable(self.location) else None
        if data is None:
            _wait_upload(self.location)
        return len(data) if data is not None else super().__len__()

    def exists(self) -> bool:
        _wait_upload(self.location)
        return (immutable(self.location) and REMEMBERED.get(self.location) is not None) or super().exists()


# Downloads of remembered files under way, so that a prefetch and a reader never fetch one twice.
_INFLIGHT: dict[str, Future] = {}
_INFLIGHT_LOCK = threading.Lock()
_PREFETCH = ThreadPoolExecutor(max_workers=16, thread_name_prefix="lakepub-prefetch")
_MANIFEST_LIST = re.compile(r"/snap-[^/]*\.avro$")
_PREFETCH_MAX = 64  # manifests fetched ahead per manifest list (more are read on demand)


def _fetch_once(file: _S3File) -> bytes:
    for _ in range(2):
        with _INFLIGHT_LOCK:
            future = _INFLIGHT.get(file.location)
            mine = future is None
            if mine:
                future = _INFLIGHT[file.location] = Future()
        if mine:
            break
        try:
            return future.result()
        except Exception:  # noqa: BLE001 - someone else's download (a prefetch) failed: fetch it ourselves
            continue
    else:
        return file._download()
    try:
        data = file._download()
        future.set_result(data)
        return data
    except BaseException as exc:
        future.set_exception(exc)
        raise
    finally:
        with _INFLIGHT_LOCK:
            _INFLIGHT.pop(file.location, None)


def _prefetch_manifests(manifest_list: _S3File, data: bytes) -> None:
    """Fetch the manifests a manifest list names side by side, into memory: pyiceberg reads them
    one after another (a round trip each), e.g. every manifest of the ledger when appending."""
    from pyiceberg.manifest import read_manifest_list

    class _Bytes:
        location = manifest_list.location

        def open(self, seekable: bool = True) -> Any:  # noqa: ARG002
            return pa.BufferReader(data)

        def __len__(self) -> int:
            return len(data)

    try:
        paths = [m.manifest_path for m in read_manifest_list(_Bytes())]  # type: ignore[arg-type]
    except Exception:  # not ours to judge: the reader will report it
        return
    for path in paths[:_PREFETCH_MAX]:
        if REMEMBERED.get(path) is None and path.startswith(("s3://", "s3a://")):
            target = _S3File(location=path, path=_path_of(path), fs=manifest_list._filesystem,
                             buffer_size=manifest_list._buffer_size)
            target.disk, target.background = manifest_list.disk, manifest_list.background
            _PREFETCH.submit(_quietly, target)


def _path_of(location: str) -> str:
    return location.split("://", 1)[1]


def _quietly(file: _S3File) -> None:
    try:
        _fetch_once(file)
    except Exception:  # a prefetch that fails is retried (and reported) by the reader
        pass


_FILESYSTEMS: dict[tuple, Any] = {}  # ``_fs_key`` -> S3FileSystem (``_initialize_s3_fs``)
_FS_LOCK = threading.Lock()
_FS_MAKING: dict[tuple, threading.Lock] = {}  # ``_fs_key`` -> held while that file system is made


def _fs_key(netloc: str | None, properties: Mapping[str, Any]) -> tuple:
    """What an S3 file system is made from: the bucket and the ``s3.*`` / ``client.*``
    properties, all that pyiceberg's ``_initialize_s3_fs`` and ``_make_s3_fs`` read (so the
    catalog's properties and a table's FileIO, which adds the table's own, share one). What pyarrow
    reads from the environment (``AWS_*``) is not part of the key: a process changing it after its
    first file system was made may keep using that one."""
    return netloc, tuple(sorted((str(k), str(v)) for k, v in properties.items()
                                if str(k).startswith(("s3.", "client."))))


def _fs_locks_after_fork_in_child() -> None:
    """A child forked while a thread made a file system would wait forever for its lock."""
    global _FS_LOCK
    _FS_LOCK = threading.Lock()
    _FS_MAKING.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_fs_locks_after_fork_in_child)


class LakepubFileIO(PyArrowFileIO):
    """``PyArrowFileIO`` writing small S3 files in one request (see the module docstring)."""

    def __init__(self, properties: Any = EMPTY_DICT):
        super().__init__(properties)
        s3_warm.start()
        folder = self.properties.get(CACHE_FOLDER)
        self.disk = FileCache(Path(folder), int(self.properties.get(CACHE_LIMIT_MB, DEFAULT_LIMIT_MB)) << 20) \
            if folder else None
        self.background = str(self.properties.get(BACKGROUND_UPLOADS, "")).lower() == "true"

    def _initialize_s3_fs(self, netloc: str | None) -> Any:
        # pyiceberg makes a FileIO per table it loads, and each made its own S3FileSystem (an AWS
        # client: ~30-40 ms of CPU, twice with the rebuild below) on first use: ~0.6 s of a 1M-event
        # ``run`` (two tables loaded per batch). The file system is a function of the bucket and
        # the ``s3.*``/``client.*`` properties (``_fs_key``) and thread-safe: one per process for
        # each, made once (two threads loading tables at once: the second waits for the first's).
        key = _fs_key(netloc, self.properties)
        with _FS_LOCK:
            fs = _FILESYSTEMS.get(key)
            making = _FS_MAKING.setdefault(key, threading.Lock()) if fs is None else None
        if making is not None:
            with making:  # made once: another thread making it is waited for, not repeated
                fs = _FILESYSTEMS.get(key)
                if fs is None:
                    fs = self._make_s3_fs(netloc)
                    with _FS_LOCK:
                        _FILESYSTEMS[key] = fs
        return fs

    def _make_s3_fs(self, netloc: str | None) -> Any:
        fs = super()._initialize_s3_fs(netloc)
        # pyarrow's S3FileSystem cannot be changed once made: rebuild it from its own arguments
        # (its pickled form; a retry strategy is not part of it, so a configured one keeps the
        # file system as pyiceberg made it).
        if self.properties.get("s3.retry-strategy-impl"):
            return fs
        rebuild, args = fs.__reduce__()
        if not (args and isinstance(args[0], dict) and "allow_delayed_open" in args[0]):  # pragma: no cover
            return fs
        return rebuild({**args[0], "allow_delayed_open": True})

    metadata_before_uploads = staticmethod(metadata_before_uploads)  # store/commit.py, with:
    uploads_done = staticmethod(uploads_done)

    def upload_later(self, location: str, upload: Callable[[], None]) -> bool:
        """Run ``upload`` of a file bound for ``location`` in the background when this FileIO's
        commits wait for background uploads (``BACKGROUND_UPLOADS``); False: the caller uploads."""
        if not (self.background and location.startswith(("s3://", "s3a://"))):
            return False
        background_upload(location, upload)
        return True

    def put_file(self, location: str, source: Any, size: int) -> bool:
        """Upload a local file too large for pyarrow's single PUT in one PutObject
        (``store/single_put.py``); False: the caller uploads it through pyarrow."""
        return single_put.put_file(self.properties, location, source, size)

    def new_output(self, location: str) -> PyArrowFile:
        return _on_s3(super().new_output(location), self.disk, self.background)

    def new_input(self, location: str) -> PyArrowFile:
        return _on_s3(super().new_input(location), self.disk, self.background)


def _on_s3(file: PyArrowFile, disk: FileCache | None, background: bool = False) -> PyArrowFile:
    if not file.location.startswith(("s3://", "s3a://")):
        return file
    out = _S3File.__new__(_S3File)
    out.__dict__.update(file.__dict__)
    out.disk, out.background = disk, background
    return out
