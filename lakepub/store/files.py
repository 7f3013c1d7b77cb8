"""Writing Parquet data files for a table and describing them as Iceberg ``DataFile`` entries.

pyiceberg's own path (``_dataframe_to_data_files``) re-derives, for every file, the file schema,
its statistics plan and its column-id mapping with Python schema visitors, and splits the input
by partition with one filter per partition; for the 20-40 small partition files of a publish that
was about 2 ms of Python per file. A publish already knows which rows go to which partition, so
here the per-table work is done once per ``FileWriter`` (one per publish and table, ~0.2 ms) and
each file is one ``pyarrow.parquet`` write plus pyiceberg's statistics of its footer (computed by
``store/footer_stats.py``, equal to pyiceberg's ``data_file_statistics_from_parquet_metadata``). The files are written
the way pyiceberg writes them: same location provider and file names, Parquet field ids from
the Iceberg schema, the table's Parquet properties (codec, row group size), same statistics.
"""

from __future__ import annotations

import itertools
import uuid
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, cast, IO

import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.io import FileIO
from pyiceberg.io.pyarrow import _get_parquet_writer_kwargs, schema_to_pyarrow
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.table import TableProperties
from pyiceberg.table.locations import load_location_provider
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.typedef import Record
from pyiceberg.utils.properties import property_as_int

from lakepub.store.footer_stats import FooterStatistics

_POOL = ThreadPoolExecutor(max_workers=4, thread_name_prefix="lakepub-write")
# Files for an object store: a request costs 20-50 ms of waiting, not CPU, so a publish's 30-40
# small partition files are encoded 16 at a time and go up 8 requests at a time (Arrow's IO threads;
# store/s3_streams.py: one PUT each).
_REMOTE_POOL = ThreadPoolExecutor(max_workers=16, thread_name_prefix="lakepub-upload")


@dataclass(frozen=True)
class _PartitionPath:
    """What a location provider needs of a partition key: its path (``day_month=2025-01``)."""

    path: str

    def to_path(self) -> str:
        return self.path


def _short(path: str) -> str:
    """A partition path whose folder name fits a file system's 255 bytes (``k=<sha256>`` when not:
    Iceberg readers take the partition from the manifest, not from the folder)."""
    if len(path.encode()) <= 200 or "/" in path:
        return path
    import hashlib

    field = path.split("=", 1)[0]
    return f"{field}=h-{hashlib.sha256(path.encode()).hexdigest()[:32]}"


class FileWriter:
    """Writes data files of one table (at one metadata version) with its current schema and spec."""

    def __init__(self, metadata: TableMetadata, io: FileIO, *, plain: tuple[str, ...] = ()):
        """``plain``: columns written without dictionary encoding (e.g. unique keys, where
        building the dictionary is wasted work and makes the file larger)."""
        self.metadata, self.io = metadata, io
        self.schema = metadata.schema()
        self.spec = metadata.spec()
        self.arrow_schema = schema_to_pyarrow(self.schema, include_field_ids=True)
        props = metadata.properties
        self._kwargs = _get_parquet_writer_kwargs(props)
        if plain:
            self._kwargs["use_dictionary"] = [name for name in self.arrow_schema.names if name not in plain]
        self._row_group_size = property_as_int(props, TableProperties.PARQUET_ROW_GROUP_LIMIT,
                                               TableProperties.PARQUET_ROW_GROUP_LIMIT_DEFAULT)
        self._statistics = FooterStatistics(self.schema, props)  # pyiceberg's, equality pinned in its tests
        self._locations = load_location_provider(table_location=metadata.location, table_properties=props)
        self._uuid = uuid.uuid4()
        self._numbers = itertools.count()  # file names stay unique across calls on this writer
        remote = "://" in metadata.location and not metadata.location.startswith("file://")
        self._pool = _REMOTE_POOL if remote else _POOL

    def write(self, parts: list[tuple[Record | None, pa.Table]]) -> list[DataFile]:
        """One data file per ``(partition record, rows)``; ``None`` for an unpartitioned table."""
        return [f.result() for f in self.submit(parts)]

    def submit(self, parts: list[tuple[Record | None, pa.Table]]) -> list[Future[DataFile]]:
        """Like ``write``, in the background (Parquet encoding releases the GIL)."""
        return [self._pool.submit(self._write_one, next(self._numbers), partition, rows) for partition, rows in parts]

    def _write_one(self, n: int, partition: Record | None, rows: pa.Table) -> DataFile:
        rows = rows.select(self.arrow_schema.names).cast(self.arrow_schema)
        # No partition path for an unpartitioned table (an empty one would make ``data//file``, a
        # location the janitor's listing spells ``data/file``: the live file would look orphaned).
        partitioned = partition is not None and bool(self.spec.fields)
        key = _PartitionPath(_short(self.spec.partition_to_path(partition, self.schema))) if partitioned else None
        path = self._locations.new_data_location(f"00000-{n}-{self._uuid}.parquet", cast(Any, key))
        output = self.io.new_output(path)
        with output.create(overwrite=True) as stream:
            writer = pq.ParquetWriter(cast(IO[Any], stream), schema=rows.schema, store_decimal_as_integer=True,
                                      **self._kwargs)
            writer.write(rows, row_group_size=self._row_group_size)
            writer.close()
            size = stream.tell()  # the file's size, without another stat of the file
        data_file = DataFile.from_args(
            content=DataFileContent.DATA,
            file_path=path,
            file_format=FileFormat.PARQUET,
            partition=partition if partition is not None else Record(),
            file_size_in_bytes=size,
            sort_order_id=None,
            spec_id=self.metadata.default_spec_id,
            equality_ids=None,
            key_metadata=None,
            **self._statistics.of(writer.writer.metadata),
        )
        data_file.spec_id = self.metadata.default_spec_id  # not a field of the struct: set like a manifest read does
        return data_file
