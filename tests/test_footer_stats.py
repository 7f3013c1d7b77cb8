"""store/footer_stats.py records exactly what pyiceberg records for a Parquet footer.

The oracle is pyiceberg's ``data_file_statistics_from_parquet_metadata(...).to_serialized_dict()``
on the same footer: files written by pyarrow (as ``store/files.FileWriter`` writes them) and by
DuckDB (as ``store/duck_files`` writes them), every type lakepub writes, nulls, all-null and
empty chunks, long and non-ASCII strings (truncated bounds, an upper bound that cannot be
rounded up), decimals of each physical width, several row groups, dictionary pages, chunks
without statistics, and each metrics mode (none, counts, truncate(n), full; per column too).
Equal includes the key order of every map (the manifest's Avro maps are written in that order).
"""

from __future__ import annotations

import datetime
import decimal
import random

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.io.pyarrow import compute_statistics_plan, data_file_statistics_from_parquet_metadata, \
    parquet_path_to_id_mapping, schema_to_pyarrow
from pyiceberg.schema import Schema
from pyiceberg.types import BinaryType, BooleanType, DateType, DecimalType, DoubleType, FloatType, IntegerType, \
    LongType, NestedField, StringType, TimestampType, TimestamptzType

from lakepub.store.footer_stats import FooterStatistics

TYPES = [("b", BooleanType()), ("i", IntegerType()), ("l", LongType()), ("f", FloatType()), ("d", DoubleType()),
         ("dec9", DecimalType(9, 2)), ("dec18", DecimalType(18, 4)), ("dec38", DecimalType(38, 10)),
         ("day", DateType()), ("ts", TimestampType()), ("tstz", TimestamptzType()), ("s", StringType()),
         ("bin", BinaryType())]
SCHEMA = Schema(*[NestedField(i, name, t, required=False) for i, (name, t) in enumerate(TYPES, start=1)])
PROPERTIES = [
    {},  # pyiceberg's default: truncate(16)
    {"write.metadata.metrics.default": "none", "write.metadata.metrics.column.day": "full"},  # a derived table
    {"write.metadata.metrics.default": "counts", "write.metadata.metrics.column.s": "truncate(4)"},
    {"write.metadata.metrics.default": "full"},
    {"write.metadata.metrics.default": "truncate(2)", "write.metadata.metrics.column.bin": "none",
     "write.metadata.metrics.column.l": "counts"},
]
STRINGS = ["", "a", "zz", "é" * 20, "\U0010ffff" * 20, "x" * 40, "日本語のテキスト" * 3, "abc\x00def"]


def _value(rng: random.Random, name: str, null_share: float):
    if rng.random() < null_share:
        return None
    return {
        "b": lambda: rng.random() < 0.5,
        "i": lambda: rng.randint(-2**31, 2**31 - 1),
        "l": lambda: rng.randint(-2**63, 2**63 - 1),
        "f": lambda: rng.choice([0.0, -0.0, 1.5, -3.25, float("inf"), float("nan")]),
        "d": lambda: rng.choice([0.0, -0.0, 2.5e300, -1e-300, float("-inf"), float("nan")]),
        "dec9": lambda: decimal.Decimal(rng.randint(-10**9 + 1, 10**9 - 1)).scaleb(-2),
        "dec18": lambda: decimal.Decimal(rng.randint(-10**18 + 1, 10**18 - 1)).scaleb(-4),
        "dec38": lambda: decimal.Decimal(rng.randint(-10**38 + 1, 10**38 - 1)).scaleb(-10),
        "day": lambda: datetime.date(1970, 1, 1) + datetime.timedelta(days=rng.randint(-30000, 30000)),
        "ts": lambda: datetime.datetime(2000, 1, 1) + datetime.timedelta(microseconds=rng.randint(-10**15, 10**15)),
        "tstz": lambda: datetime.datetime(2000, 1, 1, tzinfo=datetime.timezone.utc)
        + datetime.timedelta(microseconds=rng.randint(-10**15, 10**15)),
        "s": lambda: rng.choice(STRINGS) + str(rng.randint(0, 9)) * rng.randint(0, 3),
        "bin": lambda: bytes(rng.randint(0, 255) for _ in range(rng.randint(0, 30))) + b"\xff" * rng.randint(0, 20),
    }[name]()


def _table(seed: int, rows: int, null_share: float) -> pa.Table:
    rng = random.Random(seed)
    arrow = schema_to_pyarrow(SCHEMA, include_field_ids=True)
    columns = {name: [_value(rng, name, null_share) for _ in range(rows)] for name, _ in TYPES}
    if rows:
        columns["bin"][0] = None  # some column all null below
    return pa.Table.from_pydict(columns, schema=arrow)


def _oracle(metadata: pq.FileMetaData, properties: dict, schema: Schema = SCHEMA) -> dict:
    return data_file_statistics_from_parquet_metadata(
        parquet_metadata=metadata, stats_columns=compute_statistics_plan(schema, properties),
        parquet_column_mapping=parquet_path_to_id_mapping(schema)).to_serialized_dict()


def _assert_same(mine: dict, theirs: dict) -> None:
    assert mine == theirs
    assert list(mine) == list(theirs)
    for key, value in theirs.items():
        if isinstance(value, dict):
            assert list(mine[key].items()) == list(value.items()), key  # same order of the Avro map


@pytest.mark.parametrize("seed", range(6))
def test_pyarrow_files_equal_pyiceberg(tmp_path, seed):
    rng = random.Random(seed)
    rows = [0, 1, 3, 50, 400, 2000][seed]
    table = _table(seed, rows, null_share=[0.0, 0.3, 1.0][seed % 3])
    if seed == 5:  # an all-null column and one without any null
        table = table.set_column(0, table.schema.field(0), pa.nulls(rows, pa.bool_()))
    path = tmp_path / "f.parquet"
    pq.write_table(table, path, row_group_size=rng.choice([7, 100, 10**6]), store_decimal_as_integer=True,
                   use_dictionary=seed % 2 == 0, compression=rng.choice(["zstd", "snappy", "none"]))
    metadata = pq.read_metadata(path)
    for properties in PROPERTIES:
        stats = FooterStatistics(SCHEMA, properties)
        _assert_same(stats.of(metadata), _oracle(metadata, properties))
        _assert_same(stats.of(metadata), _oracle(metadata, properties))  # the per-column decisions reused


def test_decimals_as_fixed_bytes_and_missing_statistics_equal_pyiceberg(tmp_path):
    """Decimals stored as FIXED_LEN_BYTE_ARRAY (pyarrow's default) and chunks without statistics
    (dropped from bounds and null counts, as pyiceberg drops them)."""
    table = _table(7, 300, null_share=0.2)
    for i, kwargs in enumerate([{}, {"write_statistics": False}, {"write_statistics": ["i", "s", "day"]}]):
        path = tmp_path / f"f{i}.parquet"
        pq.write_table(table, path, row_group_size=128, **kwargs)
        metadata = pq.read_metadata(path)
        for properties in PROPERTIES:
            _assert_same(FooterStatistics(SCHEMA, properties).of(metadata), _oracle(metadata, properties))


def test_duckdb_files_equal_pyiceberg(tmp_path):
    """Files written as store/duck_files writes them: DuckDB's COPY with Iceberg field ids."""
    import duckdb

    con = duckdb.connect()
    table = _table(11, 700, null_share=0.1).drop_columns(["f", "d", "bin"])
    schema = Schema(*[f for f in SCHEMA.fields if f.name not in ("f", "d", "bin")])
    ids = ", ".join(f'"{f.name}": {f.field_id}' for f in schema.fields)
    con.register("rows", table)
    for i, codec in enumerate(["snappy", "zstd"]):
        path = tmp_path / f"d{i}.parquet"
        con.execute(f"COPY rows TO '{path}' (FORMAT parquet, FIELD_IDS {{{ids}}}, COMPRESSION {codec}, "
                    f"ROW_GROUP_SIZE {[100, 122880][i]})")
        metadata = pq.read_metadata(path)
        for properties in PROPERTIES:
            _assert_same(FooterStatistics(schema, properties).of(metadata), _oracle(metadata, properties, schema))


def test_unexpected_physical_type_refused_like_pyiceberg(tmp_path):
    """A column whose Parquet physical type pyiceberg does not accept for its Iceberg type: the
    same ValueError, message included."""
    path = tmp_path / "f.parquet"
    pq.write_table(pa.table({"x": pa.array(["a", "b"])}), path)
    schema = Schema(NestedField(1, "x", LongType(), required=False))
    metadata = pq.read_metadata(path)
    with pytest.raises(ValueError) as theirs:
        data_file_statistics_from_parquet_metadata(parquet_metadata=metadata,
                                                   stats_columns=compute_statistics_plan(schema, {}),
                                                   parquet_column_mapping=parquet_path_to_id_mapping(schema))
    with pytest.raises(ValueError) as mine:
        FooterStatistics(schema, {}).of(metadata)
    assert str(mine.value) == str(theirs.value)


def test_bounds_in_pyiceberg_order_when_a_first_row_group_is_all_null(tmp_path):
    """A decimal column null throughout the first row group, with values later: pyiceberg's
    aggregator (and so the bound maps' key order) starts at the first row group."""
    table = _table(13, 60, null_share=0.0)
    for name in ("dec9", "dec18", "day"):
        i = table.schema.get_field_index(name)
        values = table.column(name).to_pylist()
        field = table.schema.field(i)
        table = table.set_column(i, field, pa.array([None] * 10 + values[10:], field.type))
    path = tmp_path / "f.parquet"
    pq.write_table(table, path, row_group_size=10, store_decimal_as_integer=True)
    metadata = pq.read_metadata(path)
    assert metadata.num_row_groups == 6
    for properties in PROPERTIES:
        _assert_same(FooterStatistics(SCHEMA, properties).of(metadata), _oracle(metadata, properties))


def test_uuid_fixed_time_and_nested_columns_equal_pyiceberg(tmp_path):
    """Types the tests above leave out: uuid and fixed (FIXED_LEN_BYTE_ARRAY bounds, 0x00../0xff..
    extremes), time, and nested columns (list element, map key/value, struct fields: counts only,
    as pyiceberg's plan makes them), each metrics mode, statistics on and off, several row groups."""
    import uuid

    from pyiceberg.types import FixedType, ListType, MapType, StructType, TimeType, UUIDType

    schema = Schema(
        NestedField(1, "u", UUIDType(), required=False), NestedField(2, "fx", FixedType(3), required=False),
        NestedField(3, "t", TimeType(), required=False),
        NestedField(4, "lst", ListType(10, StringType(), element_required=False), required=False),
        NestedField(5, "m", MapType(11, StringType(), 12, LongType(), value_required=False), required=False),
        NestedField(6, "st", StructType(NestedField(13, "a", IntegerType(), required=False),
                                        NestedField(14, "b", StringType(), required=False)), required=False),
        NestedField(7, "s", StringType(), required=False))
    arrow = schema_to_pyarrow(schema)
    rng = random.Random(3)

    def value(name):
        if rng.random() < 0.2:
            return None
        return {
            "u": lambda: uuid.UUID(int=rng.choice([0, 2**128 - 1, rng.getrandbits(128)])).bytes,
            "fx": lambda: bytes(rng.choice([0, 255, rng.randint(0, 255)]) for _ in range(3)),
            "t": lambda: datetime.time(rng.randint(0, 23), rng.randint(0, 59), rng.randint(0, 59),
                                       rng.randint(0, 999999)),
            "lst": lambda: [rng.choice(["a", "\U0010ffff" * 20, "x" * 30, None]) for _ in range(rng.randint(0, 3))],
            "m": lambda: [(f"k{rng.randint(0, 9)}", rng.choice([None, rng.randint(-5, 5)]))
                          for _ in range(rng.randint(0, 2))],
            "st": lambda: {"a": rng.choice([None, rng.randint(-9, 9)]), "b": rng.choice([None, "q" * 20])},
            "s": lambda: rng.choice(["", "\U0010ffff" * 17, "a" * 15 + "\U0010ffff" * 3, "é" * 16 + "a"]),
        }[name]()

    modes = [{}, {"write.metadata.metrics.default": "full"}, {"write.metadata.metrics.default": "truncate(1)"},
             {"write.metadata.metrics.default": "counts", "write.metadata.metrics.column.u": "full",
              "write.metadata.metrics.column.lst.element": "full"}]
    for i in range(24):
        rows = rng.randint(0, 40)
        table = pa.Table.from_pydict({f.name: [value(f.name) for _ in range(rows)] for f in schema.fields},
                                     schema=arrow)
        path = tmp_path / f"n{i}.parquet"
        pq.write_table(table, path, row_group_size=rng.randint(1, 10), write_statistics=i % 4 != 3,
                       use_dictionary=i % 2 == 0)
        metadata = pq.read_metadata(path)
        for properties in modes:
            _assert_same(FooterStatistics(schema, properties).of(metadata), _oracle(metadata, properties, schema))
