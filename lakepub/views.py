"""Views of the published tables: each published snapshot is resolved once, then read as Parquet.

``Workspace.connect()`` and ``lakepub query`` give every published dataset a DuckDB view. Over
``iceberg_scan(<metadata>)`` every query planned the scan again: metadata JSON, manifest list and
manifest, a fixed ~1.5-2 ms per query (benchmark 4: 1.32x a plain ``read_parquet`` of the same 37
files). Here the published snapshot is *resolved* once: its live data files (the entries of its
data manifests that are not DELETED) and its schema by field id. The view is then

    SELECT * FROM read_parquet([<the files>], schema=MAP {1: {name: 'day', type: 'DATE',
        default_value: NULL}, ...}, hive_partitioning=false)

``read_parquet``'s ``schema`` parameter maps the Parquet field ids to names and types (DuckDB
made it for Iceberg and Delta readers), so Iceberg's schema evolution holds: a column is found by
its id whatever it is called in an old file, and a column added later reads NULL in files
written before it. That mapping costs ~2-3% per query (paired runs over the 37 files of benchmark
4), so when every live file was added by a snapshot whose schema is the current one (the common
case: the table never had another schema, or every file was rewritten since) the view is a plain
``read_parquet([<the files>], hive_partitioning=false)``, whose columns are then the schema's.

The invariant: a view reads exactly the data files of the snapshot the catalog's pointer names
(the published one), with Iceberg's column semantics, or it is an ``iceberg_scan`` of that
snapshot. The resolution is a function of the metadata file (immutable; a new commit writes a new
one), so it is cached by metadata location: in the process (``_MEMO``) and, for a new process,
in ``<workspace>/.lakepub/views/<table>.json`` (one small file per table, rewritten when the
published location changes; a file that does not match is ignored and the snapshot planned
again). A metadata file that no pointer names (a commit that crashed before its swap) is never
looked at: the location always comes from the catalog's current pointer.

When the shortcut would not be exact the view stays an ``iceberg_scan`` (``Resolution.fallback``
says why): a live delete file (merge-on-read: position or equality deletes must apply), a data
file that is not Parquet, a column type without a plain DuckDB equivalent (nested, uuid, fixed,
nanosecond timestamps), an ``initial-default`` (v3), a name mapping (files without field ids),
an identity partition column a file may not hold (its manifest entry has no metrics for it), or
no data file at all.

Measured cost (``scripts/bench/reads.py --reps 150``, README benchmark 4; paired rounds on a
shared 2-core machine): a query over the view costs 0.99-1.01x a plain ``read_parquet`` of the
same 37 files (``iceberg_scan``: 1.20-1.23x). Resolving a snapshot is one pass over its manifests
(the pass ``store.integrity.check_scannable`` made anyway): 4-13 ms there; from
``.lakepub/views`` 0.03-0.07 ms; from the memo ~1 us.
"""

from __future__ import annotations

import json
import os
import re
import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

from pyiceberg.manifest import DataFileContent, FileFormat, ManifestContent, ManifestEntryStatus
from pyiceberg.table import Table
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import (BinaryType, BooleanType, DateType, DecimalType, DoubleType, FloatType, IntegerType,
                             LongType, StringType, TimestampType, TimestamptzType, TimeType)

from lakepub import duck
from lakepub.store.integrity import check_scannable, manifest_entries

CACHE_FORMAT = 2
NAME_MAPPING_PROPERTY = "schema.name-mapping.default"
_DUCK_TYPES = {BooleanType: "BOOLEAN", IntegerType: "INTEGER", LongType: "BIGINT", FloatType: "FLOAT",
               DoubleType: "DOUBLE", DateType: "DATE", TimeType: "TIME", TimestampType: "TIMESTAMP",
               TimestamptzType: "TIMESTAMPTZ", StringType: "VARCHAR", BinaryType: "BLOB"}
_MEMO: OrderedDict[str, "Resolution"] = OrderedDict()  # metadata location -> resolution
_MEMO_SIZE = 256
_LOCK = threading.Lock()


@dataclass(frozen=True)
class Resolution:
    """What a view of one table snapshot reads: its data files and columns, or ``iceberg_scan``."""

    metadata_location: str
    snapshot_id: int | None
    files: tuple[str, ...] = ()
    columns: tuple[tuple[int, str, str], ...] = ()  # (field id, name, DuckDB type), in schema order
    fallback: str | None = None  # why the view is an iceberg_scan; None: plain Parquet
    by_name: bool = False  # every file was written with the current schema: no mapping by id needed

    def table_sql(self) -> str:
        """An SQL table expression reading the snapshot."""
        if self.fallback is not None:
            return duck.scan_sql(self.metadata_location, self.snapshot_id)
        paths = ", ".join(f"'{_q(f)}'" for f in self.files)
        if self.by_name:
            return f"read_parquet([{paths}], hive_partitioning=false)"
        fields = ", ".join(f"{fid}: {{name: '{_q(name)}', type: '{dtype}', default_value: NULL}}"
                           for fid, name, dtype in self.columns)
        # The columns come out in the MAP's order (the schema's); folder names are not columns.
        return f"read_parquet([{paths}], schema=MAP {{{fields}}}, hive_partitioning=false)"

    def view_sql(self, view: str) -> str:
        return f"CREATE OR REPLACE TEMP VIEW {duck.name(view)} AS SELECT * FROM {self.table_sql()}"


def resolve(table: Table, cache_dir: Path | None = None) -> Resolution:
    """The resolution of ``table``'s current snapshot (a table just loaded from the catalog).

    Planned at most once per metadata location in a process; with ``cache_dir`` a resolution
    planned by another process is reused. Raises CorruptTable if a manifest cannot be read
    (before DuckDB would be asked to, see ``store.integrity``).
    """
    location = table.metadata_location
    with _LOCK:
        memo = _MEMO.get(location)
        if memo is not None:
            _MEMO.move_to_end(location)
            return memo
    resolution = _columns_or_fallback(table)
    if resolution.fallback is None:
        cached = _cached_files(table, cache_dir)
        if cached is None:
            resolution = _plan(table, resolution)
            if resolution.fallback is None:
                _store_files(table, cache_dir, resolution.files, resolution.by_name)
        else:
            resolution = Resolution(location, resolution.snapshot_id, cached[0], resolution.columns, by_name=cached[1])
    elif table.current_snapshot() is not None:
        check_scannable(table)  # DuckDB will plan it: a bad manifest must not abort the process
    with _LOCK:
        _MEMO[location] = resolution
        while len(_MEMO) > _MEMO_SIZE:
            _MEMO.popitem(last=False)
    return resolution


def _columns_or_fallback(table: Table) -> Resolution:
    """The columns by field id from the table's metadata, or why they cannot be read as Parquet."""
    metadata = table.metadata
    location, snapshot_id = table.metadata_location, metadata.current_snapshot_id
    if metadata.properties.get(NAME_MAPPING_PROPERTY):
        return Resolution(location, snapshot_id, fallback="a name mapping (data files without field ids)")
    columns = []
    for field in table.schema().fields:
        dtype = _duck_type(field.field_type)
        if dtype is None:
            return Resolution(location, snapshot_id, fallback=f"column {field.name} has type {field.field_type}")
        if field.initial_default is not None:
            return Resolution(location, snapshot_id, fallback=f"column {field.name} has an initial default")
        columns.append((field.field_id, field.name, dtype))
    return Resolution(location, snapshot_id, columns=tuple(columns))


def _duck_type(field_type: object) -> str | None:
    if isinstance(field_type, DecimalType):
        return f"DECIMAL({field_type.precision},{field_type.scale})"
    return _DUCK_TYPES.get(type(field_type))


def _plan(table: Table, columns: Resolution) -> Resolution:
    """One pass over the snapshot's manifests: the live data files, or why they are not enough."""
    snapshot = table.current_snapshot()
    fallback = None if snapshot is not None else "no snapshot"
    files: list[str] = []
    schema_ids: set[int | None] = set()  # the schemas current when the files were added
    identity = {spec_id: [f.source_id for f in spec.fields if isinstance(f.transform, IdentityTransform)]
                for spec_id, spec in table.specs().items()}
    for manifest, entry in manifest_entries(table, snapshot) if snapshot is not None else ():
        if entry.status == ManifestEntryStatus.DELETED:
            continue  # every entry is still read: a bad manifest fails here, not in DuckDB
        data = entry.data_file
        if fallback is not None:
            continue
        if manifest.content != ManifestContent.DATA:
            fallback = f"delete files ({data.content.name.lower()}, e.g. {data.file_path})"
        else:
            fallback = _file_problem(data, identity.get(manifest.partition_spec_id, []))
            files.append(data.file_path)
            added_by = table.metadata.snapshot_by_id(entry.snapshot_id) if entry.snapshot_id is not None else None
            schema_ids.add(added_by.schema_id if added_by is not None else None)
    if fallback is None and not files:
        fallback = "no data files"
    if fallback is not None:
        return Resolution(columns.metadata_location, columns.snapshot_id, fallback=fallback)
    # One schema ever: every file has it. Otherwise the snapshots that added the files say which
    # schema was current (an expired one is unknown: mapped by id).
    by_name = len(table.metadata.schemas) == 1 or schema_ids == {table.metadata.current_schema_id}
    return Resolution(columns.metadata_location, columns.snapshot_id, tuple(files), columns.columns, by_name=by_name)


def _file_problem(data, identity: list[int]) -> str | None:
    """Why a live file cannot be read as plain Parquet by the view (None: it can)."""
    if data.content != DataFileContent.DATA:
        return f"delete files ({data.content.name.lower()}, e.g. {data.file_path})"
    if data.file_format != FileFormat.PARQUET:
        return f"a {data.file_format.name} data file ({data.file_path})"
    if not identity:
        return None
    held = set(data.value_counts or {}) | set(data.column_sizes or {}) | set(data.null_value_counts or {})
    if any(i not in held for i in identity):
        return f"identity partition column without metrics in {data.file_path}"
    return None


# --- the on-disk cache ---------------------------------------------------------------------------


def _cache_file(table: Table, cache_dir: Path) -> Path:
    return cache_dir / (re.sub(r"[^A-Za-z0-9_.-]", "_", ".".join(table.name())) + ".json")


def _under_table(table: Table, files: list[str] | tuple[str, ...]) -> bool:
    folder = table.location().rstrip("/") + "/"
    return all(isinstance(f, str) and f.startswith(folder) for f in files)


def _cached_files(table: Table, cache_dir: Path | None) -> tuple[tuple[str, ...], bool] | None:
    """The files (and ``by_name``) another process resolved for this very metadata location, if
    it left them."""
    if cache_dir is None:
        return None
    try:
        record = json.loads(_cache_file(table, cache_dir).read_text(encoding="utf-8"))
        if (record.get("format") == CACHE_FORMAT and record.get("metadata_location") == table.metadata_location
                and record.get("snapshot_id") == table.metadata.current_snapshot_id
                and record.get("files") and _under_table(table, record["files"])
                and isinstance(record.get("by_name"), bool)):
            return tuple(record["files"]), record["by_name"]
    except (OSError, ValueError, AttributeError, TypeError):
        pass  # no cache, or not one we wrote: plan the snapshot
    return None


def _store_files(table: Table, cache_dir: Path | None, files: tuple[str, ...], by_name: bool) -> None:
    """Best effort (a read-only workspace still reads); written atomically, last writer wins.
    Files outside the table's folder (``write.data.path``) are not cached: a record naming them
    could not be told from a tampered one."""
    if cache_dir is None or not _under_table(table, files):
        return
    target = _cache_file(table, cache_dir)
    record = {"format": CACHE_FORMAT, "metadata_location": table.metadata_location,
              "snapshot_id": table.metadata.current_snapshot_id, "by_name": by_name, "files": list(files)}
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
        temporary = target.with_name(f".{target.name}.{os.getpid()}.{threading.get_ident()}")
        temporary.write_text(json.dumps(record), encoding="utf-8")
        os.replace(temporary, target)
    except OSError:
        pass


def clear_memo() -> None:
    """Forget the resolutions of this process (tests; a new process starts empty anyway)."""
    with _LOCK:
        _MEMO.clear()


def _q(text: str) -> str:
    return str(text).replace("'", "''")
