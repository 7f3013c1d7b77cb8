"""The views of ``Workspace.connect()`` / ``lakepub query`` (``lakepub.views``): each published
snapshot resolved once to its data files and read with ``read_parquet`` by field id, equal to
``iceberg_scan`` of the catalog's metadata location, falling back to it where that would not be
exact, inside the sandbox."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat, ManifestContent, ManifestWriterV2
from pyiceberg.schema import Schema
from pyiceberg.table.snapshots import Operation
from pyiceberg.table.update.snapshot import _FastAppendFiles
from pyiceberg.types import IntegerType, ListType, LongType, NestedField, StringType

from conftest import write_jsonl
from lakepub import duck, views
from lakepub.errors import QueryError
from lakepub.generate import generate_stream
from lakepub.workspace import Workspace

DATASET = "orders_daily"


@pytest.fixture(autouse=True)
def _fresh_memo():
    views.clear_memo()  # each test starts like a new process (the on-disk cache is per workspace)
    yield
    views.clear_memo()


def _nulls_first(row: tuple) -> list:
    return [(v is not None, v if v is not None else 0) for v in row]


def _scan(ws: Workspace, location: str, sql: str = "SELECT * FROM {src}") -> list[tuple]:
    """What DuckDB's iceberg extension reads at ``location`` (the reference)."""
    return sorted(duck.connect(ws.config.catalog).execute(sql.format(src=duck.scan_sql(location))).fetchall(), key=_nulls_first)


def _catalog_location(ws: Workspace, dataset: str = DATASET) -> str:
    return Workspace.open(ws.config.root).catalog.load_table(("lakepub", dataset)).metadata_location


def _event(i: int, day: str, cents: int, version: int = 1, deleted: bool = False) -> dict:
    return {"order_id": f"o{i}", "version": version, "day": day, "cents": cents, "deleted": deleted}


def test_views_equal_iceberg_scan_after_every_publish_with_corrections_and_deletes(ws: Workspace):
    generate_stream(ws.config.landing_dir("orders"), events=3000, partitions=2, days=120, seed=7)
    checked = []

    def check(_result, _pending) -> None:
        location = _catalog_location(ws)
        (resolution,) = ws.published_views().values()
        assert resolution.metadata_location == location and resolution.fallback is None and resolution.by_name
        table = ws.catalog.load_table(("lakepub", DATASET))
        assert sorted(resolution.files) == sorted(t.file.file_path for t in table.scan().plan_files())
        expected = _scan(ws, location)
        assert sorted(tuple(r.values()) for r in ws.query(f"SELECT * FROM {DATASET}").to_pylist()) == expected
        with ws.connect() as con:
            assert sorted(con.execute(f"SELECT * FROM {DATASET}").fetchall()) == expected
            assert con.execute(f"DESCRIBE {DATASET}").fetchall() == \
                con.execute(f"DESCRIBE SELECT * FROM {duck.scan_sql(location)}").fetchall()
            sql = con.execute("SELECT sql FROM duckdb_views() WHERE view_name = ?", [DATASET]).fetchone()[0]
            assert "read_parquet(" in sql and "iceberg_scan(" not in sql
        checked.append(location)

    result = ws.run(DATASET, max_batch=400, on_batch=check)
    assert len(checked) == len(result.batches) >= 7 and len(set(checked)) == len(checked)
    stream = [json.loads(line) for p in sorted(ws.config.landing_dir("orders").rglob("*.jsonl")) for line in p.open()]
    assert any(e["deleted"] for e in stream) and any(e["version"] > 1 for e in stream)


def test_a_publish_is_seen_by_the_next_query_in_this_process_and_from_another(ws: Workspace, cli_process):
    ws.publish(DATASET, [_event(1, "2025-01-05", 10)], start={}, end={"p0": 1})
    assert ws.query(f"SELECT sum(cents) AS c FROM {DATASET}").to_pylist() == [{"c": 10}]
    con = ws.connect()
    ws.publish(DATASET, [_event(2, "2025-02-05", 20)], start={"p0": 1}, end={"p0": 2})
    assert con.execute(f"SELECT sum(cents) FROM {DATASET}").fetchone() == (10,)  # a connection keeps its snapshot
    assert ws.connect().execute(f"SELECT sum(cents) FROM {DATASET}").fetchone() == (30,)
    assert ws.query(f"SELECT sum(cents) AS c FROM {DATASET}").to_pylist() == [{"c": 30}]

    batch = write_jsonl(ws.config.root / "b3.jsonl", [_event(1, "2025-01-05", 15, version=2)])  # a correction
    assert cli_process("publish", DATASET, "--events", str(batch), "--start", '{"p0":2}', "--end", '{"p0":3}').code == 0
    assert ws.query(f"SELECT sum(cents) AS c FROM {DATASET}").to_pylist() == [{"c": 35}]  # published elsewhere
    out = cli_process("query", f"SELECT sum(cents) AS c FROM {DATASET}", "--format", "json")
    assert out.code == 0 and json.loads(out.out) == [{"c": 35}]
    cached = json.loads((ws.config.root / ".lakepub" / "views" / f"lakepub.{DATASET}.json").read_text())
    assert cached["metadata_location"] == _catalog_location(ws)


def test_a_new_process_reads_the_cached_resolution_without_planning(ws: Workspace, monkeypatch):
    for i, day in enumerate(["2025-01-05", "2025-02-05", "2025-03-05"]):
        ws.publish(DATASET, [_event(i, day, 10 * (i + 1))], start={"p0": i} if i else {}, end={"p0": i + 1})
    expected = ws.query(f"SELECT * FROM {DATASET} ORDER BY day").to_pylist()
    views.clear_memo()  # as a new process: only the on-disk cache is left

    def no_planning(*_args):
        raise AssertionError("the snapshot was planned again")

    monkeypatch.setattr(views, "manifest_entries", no_planning)
    assert Workspace.open(ws.config.root).query(f"SELECT * FROM {DATASET} ORDER BY day").to_pylist() == expected

    # A record that does not describe this snapshot's table folder is not trusted.
    cache = ws.config.root / ".lakepub" / "views" / f"lakepub.{DATASET}.json"
    record = json.loads(cache.read_text())
    cache.write_text(json.dumps({**record, "files": ["/etc/passwd"]}))
    views.clear_memo()
    with pytest.raises(AssertionError, match="planned again"):
        Workspace.open(ws.config.root).query(f"SELECT count(*) FROM {DATASET}")
    monkeypatch.undo()
    assert Workspace.open(ws.config.root).query(f"SELECT * FROM {DATASET} ORDER BY day").to_pylist() == expected
    assert json.loads(cache.read_text()) == record  # planned again and rewritten


def test_the_metadata_of_a_crashed_publish_is_never_read(ws: Workspace, cli_process):
    ws.publish(DATASET, [_event(1, "2025-01-05", 10)], start={}, end={"p0": 1})
    before = ws.query(f"SELECT * FROM {DATASET}").to_pylist()
    batch = write_jsonl(ws.config.root / "b2.jsonl", [_event(2, "2025-01-06", 20)])
    crashed = cli_process("publish", DATASET, "--events", str(batch), "--start", '{"p0":1}', "--end", '{"p0":2}',
                          env={"LAKEPUB_FAULT": "before-pointer-swap"})
    assert crashed.code == -9, crashed.err
    location = _catalog_location(ws)
    folder = Path(location.removeprefix("file://")).parent
    newest = max(folder.glob("*.metadata.json"), key=lambda p: p.name)
    assert not location.endswith(newest.name)  # the crash left a newer metadata file no pointer names
    (resolution,) = Workspace.open(ws.config.root).published_views().values()
    assert resolution.metadata_location == location
    table = ws.catalog.load_table(("lakepub", DATASET))
    assert sorted(resolution.files) == sorted(t.file.file_path for t in table.scan().plan_files())
    assert Workspace.open(ws.config.root).query(f"SELECT * FROM {DATASET}").to_pylist() == before


def _scratch_table(ws: Workspace, name: str, schema: Schema):
    catalog = ws.catalog
    catalog.create_namespace_if_not_exists("scratch")
    return catalog.create_table(("scratch", name), schema=schema)


def _view_rows(ws: Workspace, table, sql: str = "SELECT * FROM {src}") -> tuple[views.Resolution, list[tuple]]:
    resolution = views.resolve(table)
    rows = sorted(duck.connect(ws.config.catalog).execute(sql.format(src=resolution.table_sql())).fetchall(), key=_nulls_first)
    return resolution, rows


def test_added_renamed_and_promoted_columns_are_read_by_field_id(ws: Workspace):
    table = _scratch_table(ws, "evolving", Schema(NestedField(1, "a", IntegerType()), NestedField(2, "b", StringType())))
    table.append(pa.table({"a": pa.array([1, 2], pa.int32()), "b": ["x", "y"]}))
    with table.update_schema() as update:
        update.add_column("note", StringType())
        update.rename_column("b", "label")
        update.update_column("a", LongType())
    with table.update_schema() as update:
        update.move_first("note")  # the view's column order is the schema's, not the files'
    table = ws.catalog.load_table(("scratch", "evolving"))
    table.append(pa.table({"a": pa.array([3], pa.int64()), "label": ["z"], "note": ["new"]}))
    table = ws.catalog.load_table(("scratch", "evolving"))
    resolution, rows = _view_rows(ws, table)
    assert resolution.fallback is None and len(resolution.files) == 2 and not resolution.by_name
    assert "schema=MAP" in resolution.table_sql()  # the old file is read by field id
    assert rows == [(None, 1, "x"), (None, 2, "y"), ("new", 3, "z")] == _scan(ws, table.metadata_location)
    con = duck.connect(ws.config.catalog)
    assert con.execute(f"DESCRIBE SELECT * FROM {resolution.table_sql()}").fetchall() == \
        con.execute(f"DESCRIBE SELECT * FROM {duck.scan_sql(table.metadata_location)}").fetchall()


def test_a_type_without_a_plain_duckdb_equivalent_falls_back_to_iceberg_scan(ws: Workspace):
    schema = Schema(NestedField(1, "k", LongType()), NestedField(2, "tags", ListType(3, StringType(), element_required=False)))
    table = _scratch_table(ws, "nested", schema)
    table.append(pa.table({"k": [1], "tags": [["a", "b"]]}))
    table = ws.catalog.load_table(("scratch", "nested"))
    resolution, rows = _view_rows(ws, table)
    assert resolution.fallback == "column tags has type list<string>"
    assert rows == _scan(ws, table.metadata_location) == [(1, ["a", "b"])]


# --- merge-on-read: a position delete file, written as /work/shared/notes/iceberg-facts.md says ---


class _DeleteManifestWriter(ManifestWriterV2):
    def content(self) -> ManifestContent:
        return ManifestContent.DELETES

    @property
    def _meta(self) -> dict[str, str]:
        return {**super()._meta, "content": "deletes"}


class _AddDeleteFiles(_FastAppendFiles):
    def new_manifest_writer(self, spec):
        return _DeleteManifestWriter(spec, self.schema(), self.new_manifest_output(), self._snapshot_id, self._compression)


def _delete_rows(table, data_file: DataFile, positions: list[int]) -> None:
    """Commit a position delete file removing ``positions`` of ``data_file`` (pyiceberg 0.12 cannot)."""
    folder = table.location().removeprefix("file://") + "/data"
    path = f"{folder}/deletes-{len(list(Path(folder).glob('deletes-*')))}.parquet"
    schema = pa.schema([pa.field("file_path", pa.string(), nullable=False, metadata={"PARQUET:field_id": "2147483546"}),
                        pa.field("pos", pa.int64(), nullable=False, metadata={"PARQUET:field_id": "2147483545"})])
    pq.write_table(pa.table({"file_path": [data_file.file_path] * len(positions), "pos": sorted(positions)},
                            schema=schema), path)
    deletes = DataFile.from_args(content=DataFileContent.POSITION_DELETES, file_path="file://" + path,
                                 file_format=FileFormat.PARQUET, partition=data_file.partition,
                                 record_count=len(positions), file_size_in_bytes=Path(path).stat().st_size)
    deletes.spec_id = data_file.spec_id
    with table.transaction() as tx:
        producer = _AddDeleteFiles(operation=Operation.DELETE, transaction=tx, io=table.io)
        producer.append_data_file(deletes)
        producer.commit()


def test_a_snapshot_with_delete_files_is_read_through_iceberg_scan(ws: Workspace):
    days = ["2025-01-01", "2025-01-02", "2025-02-01"]
    for i, day in enumerate(days):
        ws.publish(DATASET, [_event(i, day, 5 + i)], start={"p0": i} if i else {}, end={"p0": i + 1})
    assert ws.published_views()[DATASET].fallback is None
    table = ws.catalog.load_table(("lakepub", DATASET))
    january = next(t.file for t in table.scan().plan_files() if t.file.record_count == 2)
    _delete_rows(table, january, [0])  # 2025-01-01's row
    resolution = Workspace.open(ws.config.root).published_views()[DATASET]
    assert resolution.fallback is not None and resolution.fallback.startswith("delete files (position_deletes")
    expected = [(f"2025-01-02", 6, 1), ("2025-02-01", 7, 1)]
    sql = f"SELECT day::VARCHAR, cents, orders FROM {DATASET} ORDER BY day"
    assert [tuple(r.values()) for r in ws.query(sql).to_pylist()] == expected
    assert ws.connect().execute(sql).fetchall() == expected
    assert _scan(ws, _catalog_location(ws), "SELECT day::VARCHAR, cents, orders FROM {src}") == expected


def test_the_sandbox_reads_the_views_and_refuses_other_files(ws: Workspace, tmp_path: Path):
    ws.publish(DATASET, [_event(1, "2025-01-05", 10)], start={}, end={"p0": 1})
    outside = tmp_path / "outside.parquet"
    pq.write_table(pa.table({"secret": [42]}), outside)
    assert ws.query(f"SELECT cents FROM {DATASET}").to_pylist() == [{"cents": 10}]
    for sql in (f"SELECT * FROM read_parquet('{outside}')", f"SELECT * FROM read_parquet(['{outside}'])",
                "SELECT * FROM read_csv('/etc/passwd')"):
        with pytest.raises(QueryError, match="(?i)permission|disabled"):
            ws.query(sql)
