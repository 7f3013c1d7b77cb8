"""Writing to S3 in as few round trips as the files allow.

pyiceberg's ``PyArrowFileIO`` opens an ``S3FileSystem`` with pyarrow's defaults, under which
every file, however small, is a multipart upload (CreateMultipartUpload, UploadPart,
CompleteMultipartUpload: three requests one after another), and ``create(overwrite=False)``
first asks whether the file exists (a HEAD) and pyarrow whether its path is a directory (a
LIST). At 20-50 ms per request that was ~70 requests in sequence per publish (measured with
``scripts/bench/object_store.py``).

``LakepubFileIO`` is that FileIO with two changes, for S3 locations only:

* the file system is opened with ``allow_delayed_open=True``: pyarrow then starts no upload at
  open, and a file that fits in one part (below pyarrow's 5 MiB part size: every metadata file,
  manifest and small partition file) goes up in ONE PutObject at close; larger files are still
  multipart uploads;
* ``create(overwrite=False)`` skips the existence check. Every file pyiceberg and lakepub create
  without overwriting has a fresh UUID in its name (data files, manifests, manifest lists,
  ``<n>-<uuid>.metadata.json``), so the check can only answer "no"; and S3 has no atomic
  create-if-absent through it anyway (the check was a race by its own docstring).

* immutable metadata files (``*.metadata.json``, manifest lists and manifests: ``*.avro``) that
  this process wrote or read are kept in memory (``_Remembered``, LRU, 64 MiB) and served from
  there: a publish does not read back the manifest it just wrote to learn its length, the
  manifest list it just committed, or on its next publish the metadata file it committed last.
  Their names are unique (a UUID), so a remembered file can never be stale; a file is
  remembered only once its upload has completed.

Correctness does not depend on any of these: the catalog's compare-and-set decides which metadata is
current. The workspace uses it when the warehouse is on S3 and ``py-io-impl`` is not set
(``configure``); an explicit ``py-io-impl`` in lakepub.yaml wins.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any, Mapping

import pyarrow as pa
from pyiceberg.io import PY_IO_IMPL
from pyiceberg.io.pyarrow import PyArrowFile, PyArrowFileIO

IO_IMPL = "lakepub.store.s3.LakepubFileIO"


def configure(properties: Mapping[str, str]) -> dict[str, str]:
    """Catalog properties with lakepub's FileIO for an S3 warehouse (unless one is configured)."""
    out = dict(properties)
    if str(out.get("warehouse", "")).startswith(("s3://", "s3a://")) and PY_IO_IMPL not in out:
        out[PY_IO_IMPL] = IO_IMPL
    return out


def immutable(location: str) -> bool:
    """Whether a location is one of Iceberg's write-once metadata files (named with a UUID)."""
    return location.endswith((".metadata.json", ".avro"))


class _Remembered:
    """Bytes of immutable files by location, least recently used dropped beyond ``limit`` bytes."""

    def __init__(self, limit: int = 64 << 20):
        self.limit, self.size = limit, 0
        self._files: OrderedDict[str, bytes] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, location: str) -> bytes | None:
        with self._lock:
            data = self._files.get(location)
            if data is not None:
                self._files.move_to_end(location)
            return data

    def put(self, location: str, data: bytes) -> None:
        if len(data) > self.limit // 4:
            return
        with self._lock:
            old = self._files.pop(location, None)
            self.size += len(data) - (len(old) if old is not None else 0)
            self._files[location] = data
            while self.size > self.limit:
                _, dropped = self._files.popitem(last=False)
                self.size -= len(dropped)

    def clear(self) -> None:
        with self._lock:
            self._files.clear()
            self.size = 0


REMEMBERED = _Remembered()


class _Tee:
    """An output stream that keeps a copy of what it wrote, remembered once closed without error."""

    def __init__(self, stream: Any, location: str):
        self._stream, self._location, self._parts = stream, location, []  # type: ignore[var-annotated]

    def write(self, data: Any) -> int:
        self._parts.append(bytes(data))
        return self._stream.write(data)

    def tell(self) -> int:
        return self._stream.tell()

    def flush(self) -> None:
        self._stream.flush()

    @property
    def closed(self) -> bool:
        return self._stream.closed

    def close(self) -> None:
        self._stream.close()  # uploads (raises if the upload failed: nothing is remembered)
        REMEMBERED.put(self._location, b"".join(self._parts))

    def __enter__(self) -> "_Tee":
        return self

    def __exit__(self, exc_type: Any, *exc: Any) -> None:
        if exc_type is None:
            self.close()
        else:
            self._stream.close()


class _S3File(PyArrowFile):
    """A ``PyArrowFile`` on S3: ``create`` never HEADs the location first, and immutable metadata
    files are remembered when written or read (see the module docstring)."""

    def create(self, overwrite: bool = False) -> Any:  # noqa: ARG002 - names are unique; see above
        stream = super().create(overwrite=True)
        return _Tee(stream, self.location) if immutable(self.location) else stream

    def open(self, seekable: bool = True) -> Any:
        if not immutable(self.location):
            return super().open(seekable)
        data = REMEMBERED.get(self.location)
        if data is None:
            with super().open(seekable=False) as stream:
                data = stream.read()
            REMEMBERED.put(self.location, data)
        return pa.BufferReader(data)

    def __len__(self) -> int:
        data = REMEMBERED.get(self.location) if immutable(self.location) else None
        return len(data) if data is not None else super().__len__()

    def exists(self) -> bool:
        return (immutable(self.location) and REMEMBERED.get(self.location) is not None) or super().exists()


class LakepubFileIO(PyArrowFileIO):
    """``PyArrowFileIO`` writing small S3 files in one request (see the module docstring)."""

    def _initialize_s3_fs(self, netloc: str | None) -> Any:
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

    def new_output(self, location: str) -> PyArrowFile:
        return _on_s3(super().new_output(location))

    def new_input(self, location: str) -> PyArrowFile:
        return _on_s3(super().new_input(location))


def _on_s3(file: PyArrowFile) -> PyArrowFile:
    if not file.location.startswith(("s3://", "s3a://")):
        return file
    out = _S3File.__new__(_S3File)
    out.__dict__.update(file.__dict__)
    return out
