"""Partition files written by DuckDB (``COPY ... PARTITION_BY``), registered as Iceberg ``DataFile``s.

A derived window's output is many small partitions (a daily rollup: 365 one-row files for a full
build). ``store.files.FileWriter`` writes each with ``pyarrow.parquet`` plus Python per file
(~0.8 ms a file on this 2-core VM: 0.29 s for 365); DuckDB's partitioned ``COPY`` writes them in
its own threads (~0.1 ms a file), which is what the issue's baseline does. Here:

1. the window's rows (already sorted by partition, ``derive/output.py``) get one more column, the
   partition's label, named like the Iceberg partition field (``day_day``), and ``COPY`` writes
   them under ``<table>/data/<field>=<label>/00000-<i>-<uuid>.parquet`` with ``FIELD_IDS`` set
   from the Iceberg schema (so readers resolve columns by field id, as for pyiceberg's files), the
   table's row-group limit and codec (see below), the label column itself not written (Hive style: it is
   only the folder name; the partition's source column is written like any column);
2. each file becomes a ``DataFile`` from its Parquet footer with the statistics pyiceberg's
   ``data_file_statistics_from_parquet_metadata`` (the call ``FileWriter`` and pyiceberg's
   ``add_files`` use) records, computed by ``store/footer_stats.py`` with the per-table decisions
   made once (365 files: ~2.5x less Python; equality with pyiceberg's pinned by
   tests/test_footer_stats.py), so record counts, bounds and metrics modes are exactly what
   pyiceberg would record for those bytes; its partition is the label in the file's folder
   (``RETURN_FILES`` lists the files; DuckDB percent-encodes the folder value, decoded exactly),
   mapped back to the Iceberg value it came from; every partition of the window must get files
   and their footers' row counts must add up to the window's rows, else nothing is committed.

The codec is the table's (zstd by default), except for windows of a few rows per file (a daily
rollup: one row each), written with snappy (``file_codec``: zstd's per-column-chunk setup cost
~20 ms more for 365 one-row files, which came out larger, not smaller).

Only for a local warehouse (a path or ``file://``) and flat schemas of boolean, int, long,
decimal, date, timestamp(tz) and string columns (no float/double: DuckDB's dictionary encoding
writes 0.0 and -0.0 as whichever it met first) (DuckDB's Parquet types for those are the
ones pyiceberg reads back and writes itself); ``write_partitions`` returns None otherwise and the
caller writes with ``FileWriter``. ``tests/test_derive_output.py`` pins the result against
``FileWriter``'s files for the same rows (same rows read back, same partition, counts, bounds).

pyarrow internals used (fenced here): ``_parquet.ParquetReader`` (``footer``).
pyiceberg internals used (fenced here): ``_get_parquet_writer_kwargs``' property names (the
statistics' are fenced in ``store/footer_stats.py``); plus ``store.write._live_entries`` for
``live_files``.
"""

from __future__ import annotations

import os
import threading
import uuid
from typing import Any
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.table import Table, TableProperties
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.typedef import Record
from pyiceberg.types import BooleanType, DateType, DecimalType, IntegerType, LongType, StringType, TimestampType, \
    TimestamptzType

from lakepub.errors import BlockedError
from lakepub.store.footer_stats import FooterStatistics

# Not float/double: DuckDB's dictionary encoding keeps one of 0.0 and -0.0 for both (a value
# changed; a partition checksum tells them apart), tests/test_derive_output.py pins it.
_SUPPORTED = (BooleanType, IntegerType, LongType, DecimalType, DateType, TimestampType, TimestamptzType, StringType)
_CODECS = {"zstd", "snappy", "gzip", "uncompressed", "lz4", "lz4_raw", "brotli"}
_LOCAL = threading.local()  # one in-memory DuckDB connection per thread


def _local_dir(location: str) -> str | None:
    if location.startswith("file://"):
        return location[len("file://"):]
    return location if location.startswith("/") else None


def supported(metadata: TableMetadata, names: list[str]) -> bool:
    """Whether ``write_partitions`` can write files of this table for rows with columns ``names``."""
    schema = metadata.schema()
    spec = metadata.spec()
    if _local_dir(metadata.location) is None or len(spec.fields) > 1:
        return False
    if any(not isinstance(f.field_type, _SUPPORTED) for f in schema.fields):
        return False
    if [f.name for f in schema.fields] != names:
        return False
    codec = metadata.properties.get(TableProperties.PARQUET_COMPRESSION, TableProperties.PARQUET_COMPRESSION_DEFAULT)
    return codec in _CODECS


def _folder_column(metadata: TableMetadata) -> str:
    """The Hive folder column: the partition field's name (``day_day``), suffixed when the
    partition field is named like a column (``identity(s)`` is field ``s``: folders ``s__p=x``)."""
    field = metadata.spec().fields[0].name
    names = {f.name for f in metadata.schema().fields}
    while field in names:
        field += "__p"
    return field


def _connection():
    con = getattr(_LOCAL, "con", None)
    if con is None:
        import duckdb

        con = _LOCAL.con = duckdb.connect()
    return con


def write_partitions(metadata: TableMetadata, rows: pa.Table, index: pa.Array, values: list[Any],
                     labels: list[str]) -> list[DataFile]:
    """Write ``rows`` (row i in partition ``index[i]``, whose Iceberg value is ``values[index[i]]``
    and label ``labels[index[i]]``) as Parquet data files of the table at ``metadata``; their
    ``DataFile`` entries. Call only when ``supported`` and the labels are distinct (a string
    partition ``'null'`` beside the null partition is not: write those with ``FileWriter``)."""
    if len(set(labels)) != len(labels):
        raise BlockedError("partition labels are not distinct (a string 'null' beside the null partition); nothing "
                           "was written")
    schema = metadata.schema()
    spec = metadata.spec()
    local = _local_dir(metadata.location).rstrip("/")
    data = f"{local}/data"
    props = metadata.properties
    codec = file_codec(props.get(TableProperties.PARQUET_COMPRESSION, TableProperties.PARQUET_COMPRESSION_DEFAULT),
                       rows.num_rows, len(labels))
    row_group = int(props.get(TableProperties.PARQUET_ROW_GROUP_LIMIT, TableProperties.PARQUET_ROW_GROUP_LIMIT_DEFAULT))
    ids = ", ".join(f'"{f.name}": {f.field_id}' for f in schema.fields)
    names = ", ".join(_quote(f.name) for f in schema.fields)
    tag = uuid.uuid4()
    # RETURN_FILES, not RETURN_STATS: the statistics come from the footers (pyiceberg's statistics,
    # store/footer_stats.py); DuckDB's per-file statistics rows cost ~15 ms for 365 files and were only used for
    # the file's size and partition, which the path and a stat give.
    options = f"FORMAT parquet, FIELD_IDS {{{ids}}}, COMPRESSION {codec}, ROW_GROUP_SIZE {row_group}, RETURN_FILES true"
    con = _connection()
    if spec.fields:
        field = _folder_column(metadata)
        folders = [folder_value(field, label) for label in labels]
        if len(set(folders)) != len(folders):
            raise BlockedError("partition folder names are not distinct; nothing was written")
        rows = rows.append_column(field, pa.array(folders, pa.string()).take(index))
        sql = (f"COPY (SELECT {names}, {_quote(field)} FROM _lakepub_rows) TO '{_sql(data)}' ({options}, "
               f"PARTITION_BY ({_quote(field)}), APPEND true, FILENAME_PATTERN '00000-{{i}}-{tag}-{{uuid}}')")
    else:
        field = None
        sql = f"COPY (SELECT {names} FROM _lakepub_rows) TO '{_sql(data)}/00000-0-{tag}.parquet' ({options})"
    os.makedirs(data, exist_ok=True)
    con.register("_lakepub_rows", rows)
    try:
        (_, filenames), = con.execute(sql).fetchall()
    finally:
        con.unregister("_lakepub_rows")
    by_label = {label: i for i, label in enumerate(folders if field is not None else labels)}
    statistics = FooterStatistics(schema, props)
    out = []
    for filename in filenames:
        if not filename.startswith(data + "/"):
            raise BlockedError(f"DuckDB wrote {filename} outside the table folder {local}; nothing was committed")
        if field is None:
            partition = Record()
        else:
            label = _folder_label(field, filename[len(data) + 1:])
            if label not in by_label:
                raise BlockedError(f"DuckDB wrote {filename} for partition {label!r}, not one of the window's; "
                                   "nothing was committed (the file is an orphan the janitor removes)")
            partition = Record(values[by_label[label]])
        size = os.stat(filename).st_size
        data_file = DataFile.from_args(
            content=DataFileContent.DATA,
            file_path=metadata.location.rstrip("/") + filename[len(local):],
            file_format=FileFormat.PARQUET,
            partition=partition,
            file_size_in_bytes=int(size),
            sort_order_id=None,
            spec_id=metadata.default_spec_id,
            equality_ids=None,
            key_metadata=None,
            **statistics.of(footer(filename)),
        )
        data_file.spec_id = metadata.default_spec_id
        out.append(data_file)
    # Every partition of the window got its files, and they hold the window's rows: a decoding that
    # disagreed with DuckDB's encoding would enter one partition's files under another's label.
    found = len({tuple(f.partition) for f in out}) if field is not None else len(labels)
    written = sum(f.record_count for f in out)
    if found != len(labels) or written != rows.num_rows:
        raise BlockedError(f"DuckDB's files of the window ({len(out)} files, {written} rows) are not its "
                           f"{len(labels)} partitions of {rows.num_rows} rows; nothing was committed (the files are "
                           "orphans the janitor removes)")
    return out


def _folder_label(field: str, relative: str) -> str | None:
    """The folder value of a file DuckDB wrote at ``relative`` (``<field>=<value>/<name>``, the
    value percent-encoded by DuckDB: ``%`` itself too, so decoding is exact), or None."""
    folder, sep, name = relative.partition("/")
    key, eq, value = folder.partition("=")
    if not sep or "/" in name or key != field or not eq:
        return None
    try:
        return unquote(value, errors="strict")
    except UnicodeDecodeError:
        return None


# Rows per file under which the window's files are written with snappy whatever the table's
# codec (zstd by default): DuckDB sets zstd up per column chunk, ~55 us each; 365 one-row files
# of 3 columns took ~20 ms more than with snappy and came out 5% larger (at 100 rows a file zstd
# is 24% smaller, at 1,000 36%: larger files keep the table's codec). The codec is per file in
# Parquet (every reader reads either); the property is the writer's default, not a constraint.
SMALL_FILE_ROWS = 16
_SETUP_HEAVY = {"zstd", "gzip", "brotli"}


def file_codec(table_codec: str, rows: int, files: int) -> str:
    """The codec of a window's files: the table's, or snappy for files of a few rows each."""
    if table_codec in _SETUP_HEAVY and files and rows < SMALL_FILE_ROWS * files:
        return "snappy"
    return table_codec


def footer(path: str) -> pq.FileMetaData:
    """The Parquet footer of local file ``path``: ``pq.read_metadata`` without its ``ParquetFile``
    wrapper and file-system resolution (pyarrow's ``_parquet.ParquetReader``, which that wrapper
    opens; 365 files: ~11 -> ~4.5 ms, 15 rounds), pinned in tests/test_derive_output.py."""
    if _ParquetReader is None:
        return pq.read_metadata(path)
    reader = _ParquetReader()
    reader.open(path)
    return reader.metadata


try:  # pyarrow's private reader (see ``footer``); the public call if it moved
    from pyarrow._parquet import ParquetReader as _ParquetReader
except ImportError:  # pragma: no cover - another pyarrow
    _ParquetReader = None


_NAME_MAX = 200  # bytes of a folder name kept readable (file systems refuse names over 255 bytes)


def folder_value(field: str, label: str) -> str:
    """The partition's folder value: its label, or ``h-<sha256 of it>`` when the escaped name
    ``<field>=<label>`` could be too long for a folder (DuckDB escapes a byte as up to 3)."""
    name = f"{field}={label}".encode()
    if 3 * len(name) <= _NAME_MAX:  # short enough even if every byte is escaped (365 labels: ~1 ms less)
        return label
    escaped = sum(1 if (b < 128 and chr(b).isalnum()) else 3 for b in name)
    if escaped <= _NAME_MAX:
        return label
    import hashlib

    return "h-" + hashlib.sha256(label.encode()).hexdigest()[:32]


class Written:
    """A file already written, shaped like the futures ``store.write.replace_partitions`` takes
    (a ``concurrent.futures.Future`` per file cost ~0.3 ms each to complete under load: its lock)."""

    __slots__ = ("file",)

    def __init__(self, file: DataFile):
        self.file = file

    def result(self) -> DataFile:
        return self.file


def done(files: list[DataFile]) -> list[Written]:
    """``files`` as the finished futures ``store.write.replace_partitions`` takes."""
    return [Written(f) for f in files]


def fast_append(tx, futures: list, snapshot_properties: dict[str, str]) -> None:
    """Stage in ``tx`` one append snapshot of the files: a new manifest of just these, every
    existing manifest kept as is. For a window that replaces no file (a full build's windows):
    ``store.write.replace_partitions`` rewrites every live entry into one manifest (12 windows of
    31 partitions wrote 2,411 entries, ~0.15 ms each in pyiceberg's Avro writer, the largest cost
    of such a build), and the table's merge-append properties (made for the ledger) would merge
    every 4 manifests. The next window that replaces files compacts them into one again."""
    from lakepub.store.write import fast_append as one_block_append

    one_block_append(tx, [future.result() for future in futures], snapshot_properties)


def live_files(table: Table) -> list[DataFile]:
    """The data files of ``table``'s current snapshot, from its manifests' live entries: what
    ``table.scan().plan_files()`` returns without its per-entry filter evaluation. Manifests are
    immutable, so the files of each are remembered by path (``store.write`` remembers the
    compacted manifests it wrote; here the ones read): a window after a window reads only the
    manifest the previous one appended (~45 ms per window of 12 was spent re-reading them)."""
    from pyiceberg.manifest import ManifestContent

    from lakepub.errors import LakepubError
    from lakepub.store.write import _live_entries

    snapshot = table.current_snapshot()
    if snapshot is None:
        return []
    out = []
    for manifest in snapshot.manifests(io=table.io):
        if manifest.content != ManifestContent.DATA:
            raise LakepubError(f"{table.name()[-1]} has delete files ({manifest.manifest_path}) written by another "
                               "engine; a derived window rewrites partitions and cannot carry them over")
        with _READ_LOCK:
            files = _READ.get(manifest.manifest_path)
        if files is None:
            files = [entry.data_file for entry in _live_entries(manifest, table.io)]
            with _READ_LOCK:
                _READ[manifest.manifest_path] = files
                while len(_READ) > _READ_MAX:
                    del _READ[next(iter(_READ))]
        out.extend(files)
    return out


_READ: dict[str, list[DataFile]] = {}
_READ_MAX = 512
_READ_LOCK = threading.Lock()


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _sql(text: str) -> str:
    return text.replace("'", "''")
