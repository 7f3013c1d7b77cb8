"""Make sure DuckDB can plan a scan of a table snapshot before it is asked to.

DuckDB's iceberg extension aborts the whole process (C++ ``terminate``, exit 134) when a manifest
of the snapshot it scans is unparsable or missing: no Python handler runs. So before a snapshot
is handed to ``iceberg_scan``, pyiceberg reads its manifest list and every manifest (~2 ms per
manifest; the published table's snapshot lists one), and a bad file becomes ``CorruptTable``
naming it (exit 1). A corrupt metadata JSON already fails when the table is loaded
(``lakepub.failures`` names it). A readable manifest in an Avro codec DuckDB does not decode
(zstandard, bzip2, snappy) aborts it too: ``duckdb_can_decode`` decodes each file's header with
pyiceberg's Avro header reader (manifests are small; on S3 the files ``check_scannable`` just
read are served from memory) so a caller
can read such a snapshot another way (the rebuild audit: ``views``' ``read_parquet`` view).
"""

from __future__ import annotations

from typing import Iterator

from pyiceberg.manifest import ManifestEntry, ManifestFile
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Snapshot

from lakepub.errors import CorruptTable
from lakepub.failures import corrupt_file


def check_scannable(table: Table, snapshot_id: int | None = None) -> None:
    """Raise CorruptTable if the snapshot's manifest list or a manifest cannot be read."""
    snapshot = table.current_snapshot() if snapshot_id is None else table.snapshot_by_id(snapshot_id)
    if snapshot is not None:
        for _ in manifest_entries(table, snapshot):
            pass


def manifest_entries(table: Table, snapshot: Snapshot) -> Iterator[tuple[ManifestFile, ManifestEntry]]:
    """Every entry (deleted ones too) of every manifest of ``snapshot``, with its manifest; a file
    that cannot be read raises CorruptTable naming it, as ``check_scannable`` does."""
    location = snapshot.manifest_list
    try:
        for manifest in snapshot.manifests(table.io):
            location = manifest.manifest_path
            for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=False):
                yield manifest, entry
    except FileNotFoundError as exc:
        raise CorruptTable(exc.filename or location, f"file is missing (listed by {table.metadata_location})") from None
    except OSError:
        raise  # permissions, network: not corruption; DuckDB reports these as errors
    except Exception as exc:
        problem = f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}"
        raise CorruptTable(corrupt_file(exc) or location, problem) from None


# The Avro codecs DuckDB 1.5.5's avro extension decodes. pyiceberg also writes zstandard, bzip2 and
# snappy (a table's ``write.avro.compression-codec``): DuckDB refuses such a manifest list ("File
# header contains an unknown codec") and aborts the process on such a manifest under a list it reads.
DUCKDB_AVRO_CODECS = frozenset({"null", "deflate"})


def duckdb_can_decode(table: Table, snapshot_id: int | None = None) -> bool:
    """Whether DuckDB's ``iceberg_scan`` can decode the snapshot's manifest list and manifests:
    each file's Avro codec, from its header (after ``check_scannable``: the files are readable)."""
    snapshot = table.current_snapshot() if snapshot_id is None else table.snapshot_by_id(snapshot_id)
    if snapshot is None:
        return True
    locations = [snapshot.manifest_list, *(m.manifest_path for m in snapshot.manifests(table.io))]
    return all(avro_codec(table.io, location) in DUCKDB_AVRO_CODECS for location in locations)


def avro_codec(io, location: str) -> str:
    """The ``avro.codec`` of an Avro object container file ("null" when absent, as the Avro spec
    says), from its header as pyiceberg's own ``AvroFile`` decodes it."""
    from pyiceberg.avro.decoder import new_decoder
    from pyiceberg.avro.file import MAGIC, META_SCHEMA, AvroFileHeader
    from pyiceberg.avro.resolver import construct_reader

    with io.new_input(location).open() as stream:
        data = stream.read()
    if data[:len(MAGIC)] != MAGIC:
        raise CorruptTable(location, "not an Avro object container file")
    try:
        header = construct_reader(META_SCHEMA, {-1: AvroFileHeader}).read(new_decoder(data))
    except Exception as exc:  # a header cut short or garbled
        raise CorruptTable(location, f"unreadable Avro header ({type(exc).__name__})") from None
    return header.meta.get("avro.codec", "null")
