"""``metadata/version-hint.text``: which metadata file a reader of the table folder should open.

The catalog is the truth about a table's current metadata file. A reader outside lakepub that
only has the table folder (DuckDB's ``iceberg_scan('<table folder>')``) reads
``<table folder>/metadata/version-hint.text`` and opens the metadata file it names; without the
hint it refuses, or with ``unsafe_enable_version_guessing`` opens the newest-numbered metadata
file, which after a publish killed before its pointer swap holds a batch that was never published.

So after every confirmed catalog commit lakepub writes the hint naming the committed metadata
file (``store/commit.py`` for publishes and compaction, ``maintenance/expiry.py`` for the
janitor). Checked with DuckDB 1.5.5's iceberg extension: the content is the file name's stem,
``00003-<uuid>`` for ``00003-<uuid>.metadata.json``, with no trailing newline (with one, the file
is not found); a number does not match pyiceberg's file names. Its default
``version_name_format`` (``v%s%s.metadata.json,%s%s.metadata.json``) then finds the file; no
setting and no ``allow_moved_paths`` is needed, and with the hint present DuckDB uses it even when
version guessing is enabled.

Invariant: the hint is written AFTER the catalog commit, so it only ever names a metadata file
that was committed. A crash (or a failed write) between the commit and the hint leaves an older
hint: an older published state, never unpublished data. (Inside ``lakepub run`` the hints of a
batch are written while the next batch starts, and its commit waits for them first, so they
never go back in time: ``store/commit.deferred_cleanup``.) The next commit (or janitor run) moves it
on; the janitor counts the hint and the file it names as referenced.

The write is atomic: a temporary file in the same folder renamed over the hint (local warehouse),
or a single object write (S3: an object appears whole or not at all). A failure to write it is a
warning, never an error: the commit it follows has landed.
"""

from __future__ import annotations

import os
import tempfile
import warnings
from urllib.parse import urlsplit

from pyiceberg.io import FileIO

HINT_NAME = "version-hint.text"
METADATA_SUFFIX = ".metadata.json"


def hint_location(table_location: str) -> str:
    """Where DuckDB looks for the hint of the table at ``table_location``."""
    return f"{table_location.rstrip('/')}/metadata/{HINT_NAME}"


def hint_text(table_location: str, metadata_location: str) -> str | None:
    """The hint naming ``metadata_location``, or None if a folder reader could not follow it
    (the metadata file is not in ``<table location>/metadata/`` or is not ``*.metadata.json``)."""
    folder, _, name = metadata_location.rpartition("/")
    if folder != f"{table_location.rstrip('/')}/metadata" or not name.endswith(METADATA_SUFFIX):
        return None
    return name[: -len(METADATA_SUFFIX)]


def write_version_hint(io: FileIO, table_location: str, metadata_location: str) -> bool:
    """Point the table folder's hint at ``metadata_location`` (a committed metadata file).

    Call only after the catalog confirmed the commit of ``metadata_location``. Returns whether the
    hint was written; never raises for an I/O failure (warns instead).
    """
    text = hint_text(table_location, metadata_location)
    if text is None:
        return False
    target = hint_location(table_location)
    try:
        local = _local_path(target)
        if local is not None:
            _replace_local(local, text)
        else:
            with io.new_output(target).create(overwrite=True) as out:
                out.write(text.encode())
    except Exception as exc:  # the commit has landed: a stale hint is safe, failing the commit is not
        warnings.warn(f"could not write {target} ({' '.join(str(exc).split())}); it still names an older "
                      "published metadata file", stacklevel=2)
        return False
    return True


def read_version_hint(io: FileIO, table_location: str) -> str | None:
    """The metadata location the table folder's hint names, or None without a (readable) hint."""
    target = hint_location(table_location)
    try:
        with io.new_input(target).open() as stream:
            text = stream.read().decode().strip()
    except Exception:  # missing or unreadable: nothing to protect
        return None
    if not text or "/" in text:
        return None
    return f"{table_location.rstrip('/')}/metadata/{text}{METADATA_SUFFIX}"


def _local_path(location: str) -> str | None:
    if "://" not in location:
        return location
    parts = urlsplit(location)
    return parts.path if parts.scheme == "file" else None


def _replace_local(path: str, text: str) -> None:
    folder = os.path.dirname(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{HINT_NAME}.", dir=folder)
    try:
        with os.fdopen(fd, "w") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
