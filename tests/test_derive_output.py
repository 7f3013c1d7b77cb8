"""derive/output.group: per-partition checksums from one sort equal partition_checksum of each
partition alone (the oracle), on random tables with nulls, strings, floats and timestamps."""

from __future__ import annotations

import random
from datetime import date, datetime, timedelta, timezone

import pyarrow as pa
import pytest

from lakepub.derive.output import group
from lakepub.projection.checksum import partition_checksum
from lakepub.projection.partitioning import PartitionBy
from lakepub.publish.published_state import split


def _table(rng: random.Random, n: int) -> pa.Table:
    day0 = date(2025, 1, 1)
    pick = lambda values, p=0.15: [None if rng.random() < p else rng.choice(values) for _ in range(n)]  # noqa: E731
    return pa.table({
        "day": pa.array(pick([day0 + timedelta(days=d) for d in range(0, 90, 7)], 0.05), pa.date32()),
        "ts": pa.array(pick([datetime(2025, 1, 1, tzinfo=timezone.utc) + timedelta(hours=h) for h in range(50)]),
                       pa.timestamp("us", tz="UTC")),
        "s": pa.array(pick(["a", "b|c", 'q"x', "null", "", "é"]), pa.string()),
        "f": pa.array(pick([0.1, -0.0, 0.0, float("nan"), 1e20]), pa.float64()),
        "n": pa.array(pick(list(range(-3, 4))), pa.int64()),
        "k": pa.array(pick(["x", "y", "z"]), pa.string()),
    })


@pytest.mark.parametrize("text", ["day(day)", "month(day)", "identity(k)", "none", "day(ts)"])
def test_group_checksums_equal_partition_checksum_per_partition(text):
    rng = random.Random(hash(text) & 0xFFFF)
    partition = PartitionBy.parse(text, "test")
    for n in (0, 1, 7, 300):
        rows = _table(rng, n)
        got = group(rows, partition)
        oracle = {partition.label(v): partition_checksum(r) for v, r in split(rows, partition).items()}
        assert got.checksums == oracle
        assert sum(got.counts) == n and len(got.values) == len(oracle)
        for i, value in enumerate(got.values):  # each group holds exactly that partition's rows
            part = got.part(i)
            assert partition_checksum(part) == oracle[partition.label(value)]
            assert set(got.index.slice(sum(got.counts[:i]), got.counts[i]).to_pylist()) == {i}


# --- store/duck_files: DuckDB's partition files registered as pyiceberg would register them ---------


@pytest.mark.parametrize("spec_text", ["day(day)", "identity(s)", "none"])
def test_duckdb_partition_files_match_pyiceberg_files(tmp_path, spec_text):
    from decimal import Decimal

    import duckdb
    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.schema import Schema
    from pyiceberg.types import NestedField

    from lakepub.derive.output import group
    from lakepub.projection.partitioning import iceberg_type
    from lakepub.store import duck_files
    from lakepub.store.files import FileWriter
    from lakepub.store.write import append_files, transaction

    rng = random.Random(3)
    base = _table(rng, 120)
    # the string 'null' labels like the null partition: such a table is written by FileWriter
    base = base.set_column(2, "s", pa.compute.replace_substring(base["s"], "null", "nul"))
    rows = base.select(["day", "ts", "s", "f", "n"]).append_column(
        "d", pa.array([None if i % 9 == 0 else Decimal(i * 37) / 100 for i in range(120)], pa.decimal128(10, 2)))
    rows = rows.append_column("big", pa.array([None if i % 5 == 0 else Decimal(i) ** 3 for i in range(120)],
                                              pa.decimal128(38, 0)))
    rows = rows.append_column("b", pa.array([i % 3 == 0 for i in range(120)]))
    catalog = SqlCatalog("t", uri=f"sqlite:///{tmp_path}/c.db", warehouse=f"file://{tmp_path}/wh")
    catalog.create_namespace("ns")
    schema = Schema(*[NestedField(i, f.name, iceberg_type(f.type), required=False)
                      for i, f in enumerate(rows.schema, start=1)])
    partition = PartitionBy.parse(spec_text, "test")
    tables = {}
    for kind in ("duck", "pyarrow"):
        tables[kind] = catalog.create_table(f"ns.{kind}", schema=schema, partition_spec=partition.iceberg_spec(schema),
                                            properties={"write.metadata.metrics.default": "full"})
    metadata = tables["duck"].metadata
    assert not duck_files.supported(metadata, rows.column_names)  # a double column: DuckDB turns 0.0 into -0.0
    rows = rows.drop_columns(["f"])
    catalog.drop_table("ns.duck")
    catalog.drop_table("ns.pyarrow")
    schema = Schema(*[NestedField(i, f.name, iceberg_type(f.type), required=False)
                      for i, f in enumerate(rows.schema, start=1)])
    for kind in ("duck", "pyarrow"):
        tables[kind] = catalog.create_table(f"ns.{kind}", schema=schema, partition_spec=partition.iceberg_spec(schema),
                                            properties={"write.metadata.metrics.default": "full"})
    metadata = tables["duck"].metadata
    assert duck_files.supported(metadata, rows.column_names)
    g = group(rows, partition)
    duck = duck_files.write_partitions(metadata, g.rows, g.index, g.values, g.labels)
    ours = FileWriter(tables["pyarrow"].metadata, tables["pyarrow"].io).write(
        [(None if partition.kind == "none" else _record(v), g.part(i)) for i, v in enumerate(g.values)])
    assert len(duck) == len(ours) == len(g.values)
    key = lambda f: partition.label(f.partition[0] if len(f.partition) else None)  # noqa: E731
    for a, b in zip(sorted(duck, key=key), sorted(ours, key=key)):
        assert key(a) == key(b)
        assert a.file_path.startswith(metadata.location + "/data/")
        assert a.record_count == b.record_count
        assert a.file_size_in_bytes == (tmp_path / a.file_path[len(f"file://{tmp_path}/"):]).stat().st_size
        for field in ("value_counts", "null_value_counts", "nan_value_counts"):
            assert getattr(a, field) == getattr(b, field), field
        for field in ("lower_bounds", "upper_bounds"):
            mine, theirs = getattr(a, field), getattr(b, field)
            assert mine == theirs, field
    for kind, files in (("duck", duck), ("pyarrow", ours)):
        tx = transaction(tables[kind])
        append_files(tx, files, {})
        tx.commit_transaction()
    back = {k: catalog.load_table(f"ns.{k}").scan().to_arrow().cast(rows.schema) for k in tables}
    assert partition_checksum(back["duck"]) == partition_checksum(back["pyarrow"]) == partition_checksum(rows)
    tx = transaction(catalog.load_table("ns.duck"))  # files of both writers in one table read back together
    append_files(tx, ours, {})
    tx.commit_transaction()
    both = catalog.load_table("ns.duck").scan().to_arrow().cast(rows.schema)
    assert partition_checksum(both) == partition_checksum(pa.concat_tables([rows, rows]))
    # DuckDB reads the files by field id like lakepub's views do
    paths = ", ".join(f"'{f.file_path[len('file://'):]}'" for f in duck)
    assert duckdb.sql(f"SELECT count(*), sum(n) FROM read_parquet([{paths}], hive_partitioning=false)").fetchone() \
        == (120, pa.compute.sum(rows["n"]).as_py())


def _record(value):
    from pyiceberg.typedef import Record

    return Record(value)


@pytest.mark.parametrize("per", [1, 40])
def test_duckdb_files_partitions_from_encoded_folders_and_codec_by_file_size(tmp_path, per):
    """Each file's partition is its folder's value, decoded exactly (DuckDB percent-encodes it:
    labels '%41' and 'A' stay apart); files of a few rows are snappy, larger ones the table's zstd."""
    import pyarrow.parquet as pq
    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.schema import Schema
    from pyiceberg.types import NestedField

    from lakepub.projection.partitioning import iceberg_type
    from lakepub.store import duck_files
    from lakepub.store.write import append_files, transaction

    labels = ["%41", "A", "a b/c=d", "100%", "é+x", "~'!"]
    rows = pa.table({"s": pa.array([s for s in labels for _ in range(per)], pa.string()),
                     "n": pa.array(range(per * len(labels)), pa.int64())})
    catalog = SqlCatalog("t", uri=f"sqlite:///{tmp_path}/c.db", warehouse=f"file://{tmp_path}/wh")
    catalog.create_namespace("ns")
    schema = Schema(*[NestedField(i, f.name, iceberg_type(f.type), required=False)
                      for i, f in enumerate(rows.schema, start=1)])
    partition = PartitionBy.parse("identity(s)", "test")
    table = catalog.create_table("ns.t", schema=schema, partition_spec=partition.iceberg_spec(schema),
                                 properties={"write.parquet.compression-codec": "zstd"})
    g = group(rows, partition)
    files = duck_files.write_partitions(table.metadata, g.rows, g.index, g.values, g.labels)
    assert sorted(f.partition[0] for f in files) == sorted(labels)
    codec = "SNAPPY" if per < duck_files.SMALL_FILE_ROWS else "ZSTD"
    for f in files:
        meta = pq.read_metadata(f.file_path[len("file://"):])
        assert meta.row_group(0).column(0).compression == codec
        assert set(pq.read_table(f.file_path[len("file://"):])["s"].to_pylist()) == {f.partition[0]}
    tx = transaction(table)
    append_files(tx, files, {})
    tx.commit_transaction()
    back = catalog.load_table("ns.t").scan().to_arrow()
    assert partition_checksum(back.cast(rows.schema)) == partition_checksum(rows)
    assert duck_files._folder_label("s", "s=%2541/x.parquet") == "%41"
    assert duck_files._folder_label("s", "t=A/x.parquet") is None  # another field's folder
    assert duck_files._folder_label("s", "s=%FF/x.parquet") is None  # not UTF-8: no label


def test_footer_equals_pyarrow_read_metadata(tmp_path):
    """duck_files.footer reads a footer through pyarrow's private reader: the same metadata as
    ``pq.read_metadata`` (row groups, columns, statistics), and a file that is not Parquet fails."""
    import pyarrow.parquet as pq

    from lakepub.store import duck_files

    path = str(tmp_path / "f.parquet")
    pq.write_table(pa.table({"a": [1, None, 3], "s": ["x", "y", None]}), path, row_group_size=2)
    assert duck_files._ParquetReader is not None  # the fast path is the one taken with this pyarrow
    mine, theirs = duck_files.footer(path), pq.read_metadata(path)
    assert mine.equals(theirs) and mine.num_row_groups == 2
    assert mine.row_group(1).column(1).statistics.null_count == 1
    (tmp_path / "bad.parquet").write_bytes(b"not parquet")
    with pytest.raises(Exception):
        duck_files.footer(str(tmp_path / "bad.parquet"))
