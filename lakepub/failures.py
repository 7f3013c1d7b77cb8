"""What a foreign exception means: map OS, SQLAlchemy and pyiceberg failures onto lakepub's
error families, for the CLI's one error handler and the Python API.

* no space left (``ENOSPC``/``EDQUOT``, SQLite's "database or disk is full") -> ``DiskFull``
  (exit 4). A full disk during the pointer swap's COMMIT never gets here: ``store/commit.py``
  raises ``OutcomeUnknown`` (exit 5) for any failure of the COMMIT itself.
* SQLite's "database is locked" after the busy timeout -> ``CatalogBusy`` (exit 4).
* a file where a folder is expected or a folder where a file is (``ENOTDIR``, ``EISDIR``: an
  output path like ``report --out`` or ``metrics --textfile`` that cannot be one) -> ``UserError`` (exit 2).
* DuckDB's "unknown codec" on an Avro manifest -> ``UndecodableManifests`` (exit 3), saying which
  table property to set back.
* a metadata JSON, manifest list or manifest that pyiceberg cannot parse -> ``CorruptTable``
  (exit 1) naming the file: the file is the ``InputFile`` that pyiceberg's reader (``AvroFile``,
  ``FromInputFile``) was parsing, found in the traceback's frames.
"""

from __future__ import annotations

import errno
import functools
import os
from types import TracebackType
from typing import Callable, Iterator, ParamSpec, TypeVar

from lakepub.errors import CatalogBusy, CorruptTable, DiskFull, LakepubError, UndecodableManifests, UserError

_FULL_ERRNOS = {errno.ENOSPC, errno.EDQUOT}
_FULL_TEXTS = ("no space left on device", "database or disk is full", "disk quota exceeded")
_LOCKED_TEXTS = ("database is locked", "database table is locked", "database schema is locked")
P = ParamSpec("P")
R = TypeVar("R")
_PARSERS = (os.path.join("pyiceberg", "avro", ""), os.path.join("pyiceberg", "serializers.py"),
            os.path.join("pyiceberg", "manifest.py"))


def classify(exc: BaseException) -> LakepubError | None:
    """The lakepub error that ``exc`` amounts to, or None if it is not a known failure."""
    if isinstance(exc, LakepubError):
        return exc
    for link in _chain(exc):
        text = " ".join(str(link).split())
        if (isinstance(link, OSError) and link.errno in _FULL_ERRNOS) or any(t in text.lower() for t in _FULL_TEXTS):
            where = f" writing {link.filename}" if isinstance(link, OSError) and link.filename else ""
            return DiskFull(f"no space left on device{where} ({text}); nothing was published, "
                            "free some space and retry")
        if (type(link).__module__ or "").lstrip("_").startswith("duckdb") and "unknown codec" in text.lower():
            return UndecodableManifests(
                f"DuckDB cannot decode this table's Avro manifests ({text.split(' LINE ')[0][:160]}): a writer used a "
                "write.avro.compression-codec other than gzip (deflate) or null; set the table's "
                "property back to gzip, pyiceberg's default (manifests written since stay unreadable "
                "to DuckDB 1.5.5 until they are rewritten)")
        if isinstance(link, (IsADirectoryError, NotADirectoryError)):  # a path the user gave, never transient
            where = link.filename2 or link.filename or "a path"  # a rename's target, else the path
            return UserError(f"{where}: {link.strerror}: a file stands where a folder is expected, or a folder "
                             "where a file is; give another path (nothing was written there)")
        if _is_db_error(link) and any(t in text.lower() for t in _LOCKED_TEXTS):
            return CatalogBusy(f"the catalog database is locked by another connection ({_db_message(link)}) "
                               "past its busy timeout; nothing was published, retry")
    location = corrupt_file(exc)
    if location is not None:
        return CorruptTable(location, f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}")
    return None


def is_disk_full(exc: BaseException) -> bool:
    return isinstance(classify(exc), DiskFull)


def corrupt_file(exc: BaseException) -> str | None:
    """The location of the Iceberg file pyiceberg was parsing when ``exc`` was raised, if any.

    An OSError (missing file, permissions) is not corruption and gets None.
    """
    if isinstance(exc, OSError):
        return None
    for frame in reversed(list(_frames(exc.__traceback__))):  # innermost first
        if not any(part in frame.f_code.co_filename for part in _PARSERS):
            continue
        candidates = [frame.f_locals.get("input_file"), getattr(frame.f_locals.get("self"), "input_file", None)]
        for candidate in candidates:
            location = getattr(candidate, "location", None)
            if isinstance(location, str):
                return location
    return None


def _frames(tb: TracebackType | None) -> Iterator:
    while tb is not None:
        yield tb.tb_frame
        tb = tb.tb_next


def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    link: BaseException | None = exc
    while link is not None and id(link) not in seen:
        seen.add(id(link))
        yield link
        link = link.__cause__ or link.__context__


def _is_db_error(exc: BaseException) -> bool:
    module = type(exc).__module__ or ""
    return module.startswith(("sqlalchemy", "sqlite3")) or type(exc).__name__ == "OperationalError"


def _db_message(exc: BaseException) -> str:
    orig = getattr(exc, "orig", None)
    return " ".join(str(orig if orig is not None else exc).split())


def classified(fn: Callable[P, R]) -> Callable[P, R]:
    """Decorate a Python API method: a recognised foreign exception is raised as its lakepub error."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return fn(*args, **kwargs)
        except LakepubError:
            raise
        except Exception as exc:
            known = classify(exc)
            if known is None:
                raise
            raise known from exc

    return wrapper
