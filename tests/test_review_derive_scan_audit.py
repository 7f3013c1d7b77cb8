"""Review of merge 04679dc (issue 14: the rebuild audit reads back by DuckDB's ``iceberg_scan``,
``store/commit.load_table`` remembers parsed metadata files). Driven through the CLI on real
Iceberg tables in a SQLite catalog, read back by DuckDB (``lakepub query``) against the oracle."""

from __future__ import annotations

from pathlib import Path

import pytest

from test_derive import FIRST, MONTHLY, _define, _ok, _oracle, _publish, _rows  # noqa: F401
from test_derive_fixes import DOUBLED
from test_janitor import moto_endpoint  # noqa: F401


def _rebuild_with_broken_manifest(ws_path: Path, cli, monkeypatch, how: str):
    """``lakepub reconcile`` of DOUBLED (an offline rebuild) whose rebuild table has one manifest
    broken just before its audit reads it back (``how``: 'garbage' bytes, 'missing', or 'foreign':
    a valid Avro file of another schema, the snapshot's manifest list)."""
    from lakepub.derive import rebuild

    _publish(cli, ws_path, FIRST)
    _define(ws_path, MONTHLY)
    _ok(cli("reconcile"))
    _define(ws_path, DOUBLED)
    real_audit = rebuild.audit
    broken: list[str] = []

    def break_then_audit(ctx, name, into):
        table = ctx.table(into)
        path = table.current_snapshot().manifests(table.io)[0].manifest_path.removeprefix("file://")
        broken.append(path)
        if how == "missing":
            Path(path).unlink()
        elif how == "foreign":
            Path(path).write_bytes(Path(table.current_snapshot().manifest_list.removeprefix("file://")).read_bytes())
        else:
            Path(path).write_bytes(b"not an avro file at all" * 10)
        return real_audit(ctx, name, into)

    monkeypatch.setattr(rebuild, "audit", break_then_audit)
    res = cli("reconcile", "--format", "json")
    monkeypatch.setattr(rebuild, "audit", real_audit)
    return res, broken[0]


@pytest.mark.parametrize("how", ["garbage", "missing", "foreign"])
def test_a_broken_rebuild_manifest_is_a_corrupt_table_naming_it(ws_path: Path, cli, monkeypatch, how: str):
    """The audit's read-back of a rebuild whose manifest cannot be read: nothing is published and
    the error is the corrupt-table family naming the file (as the ``read_parquet`` view's pyiceberg
    decode reported it before the merge). DuckDB 1.5.5's ``iceberg_scan`` of such a manifest
    aborts the whole process (C++ ``terminate``: exit 134, no message, the run's other datasets
    never reconciled), which is why ``views.resolve`` checks a table with ``check_scannable``
    before DuckDB plans it; the merge's audit called ``iceberg_scan`` unchecked."""
    res, path = _rebuild_with_broken_manifest(ws_path, cli, monkeypatch, how)
    assert res.code == 1, res.err + res.out
    doc = res.json()
    assert doc["kind"] == "corrupt_table", doc
    assert path in doc["message"] and "Traceback" not in res.err, doc
    assert _rows(cli, "SELECT * FROM orders_monthly ORDER BY 1") == _oracle(cli, MONTHLY)


def test_an_offline_rebuild_on_an_s3_warehouse_audits_and_swaps(ws_path: Path, cli, moto_endpoint, monkeypatch):
    """The audit's ``iceberg_scan`` reads the rebuild's metadata, manifests and files over S3
    (DuckDB's httpfs and the workspace's S3 secret): the rebuild swaps in and reads back as the
    new definition's oracle."""
    import boto3
    import yaml

    from lakepub.config import CONFIG_FILE

    props = {"s3.endpoint": moto_endpoint, "s3.access-key-id": "k", "s3.secret-access-key": "s",
             "s3.region": "us-east-1"}
    boto3.client("s3", endpoint_url=moto_endpoint, region_name="us-east-1", aws_access_key_id="k",
                 aws_secret_access_key="s").create_bucket(Bucket="rebuild")
    config = yaml.safe_load((ws_path / CONFIG_FILE).read_text())
    config["catalog"] = {"name": "lakepub", "type": "sql", "uri": f"sqlite:///{ws_path.parent / 'c.db'}",
                         "warehouse": "s3://rebuild/wh", **props}
    (ws_path / CONFIG_FILE).write_text(yaml.safe_dump(config))
    _publish(cli, ws_path, FIRST)
    _define(ws_path, MONTHLY)
    _ok(cli("reconcile"))
    assert _rows(cli, "SELECT * FROM orders_monthly ORDER BY 1") == _oracle(cli, MONTHLY)
    from lakepub.derive import rebuild

    real_audit, audited = rebuild.audit, []
    monkeypatch.setattr(rebuild, "audit", lambda ctx, name, into: audited.append(
        (into, ctx.table(into).metadata_location)) or real_audit(ctx, name, into))
    _define(ws_path, DOUBLED)
    _ok(cli("reconcile"))
    assert len(audited) == 1 and "__rebuild_" in audited[0][0] and audited[0][1].startswith("s3://rebuild/"), audited
    rows = _rows(cli, "SELECT * FROM orders_monthly ORDER BY 1")
    assert rows == _oracle(cli, DOUBLED) and rows != _oracle(cli, MONTHLY)


def test_the_parse_memo_never_serves_a_dropped_or_a_committed_on_table(ws_path: Path, cli):
    """``store.commit.load_table`` shares one parsed metadata per metadata location: a table
    dropped and re-created under the same name (and folder) loads as the new one, and a commit
    through one loaded copy (lakepub's or pyiceberg's) leaves the other copies, and the memo,
    as the file they were parsed from says."""
    import pyarrow as pa

    from lakepub.store import commit
    from lakepub.store.commit import TableChange, commit_atomically, load_table
    from lakepub.store.write import transaction
    from lakepub.workspace import Workspace

    with Workspace.open(ws_path) as ws:
        ident = (ws.config.namespace, "memo_probe")
        ws.catalog.create_namespace_if_not_exists(ws.config.namespace)
        first = ws.catalog.create_table(ident, schema=pa.schema([("a", pa.int64())]))
        first.append(pa.table({"a": [1]}))
        a, b = load_table(ws.catalog, ident), load_table(ws.catalog, ident)
        shared, parsed_at = a.metadata, a.metadata_location
        assert b.metadata is shared and commit._PARSED[parsed_at] is shared  # one parse, shared
        commit_atomically(ws.catalog, [TableChange(a, transaction(a).set_properties({"k": "lakepub"}))])
        b.transaction().set_properties({"k2": "pyiceberg"}).commit_transaction()  # pyiceberg's commit
        assert {"k", "k2"} <= set(load_table(ws.catalog, ident).properties)
        assert b.metadata is not shared and "k2" in b.metadata.properties
        # the shared parse is still the file it was parsed from
        assert commit._PARSED[parsed_at] is shared and not {"k", "k2"} & set(shared.properties)
        assert load_table(ws.catalog, ident).metadata_location != parsed_at
        ws.catalog.drop_table(ident)
        again = ws.catalog.create_table(ident, schema=pa.schema([("a", pa.int64()), ("b", pa.string())]),
                                        location=first.location())
        assert again.location() == first.location()
        reloaded = load_table(ws.catalog, ident)
        assert reloaded.metadata_location == again.metadata_location
        assert [f.name for f in reloaded.schema().fields] == ["a", "b"] and reloaded.current_snapshot() is None


def test_a_rebuild_whose_manifests_are_zstd_audits_and_swaps(ws_path: Path, cli, monkeypatch):
    """A user's ``write.avro.compression-codec`` on the published table (a ``write.*`` property
    the swap carries onto the rebuild table) makes later windows of a resumed rebuild write
    zstd-compressed manifests and manifest lists: valid Iceberg, read by pyiceberg (and so by
    ``lakepub query``), but DuckDB 1.5.5's ``iceberg_scan`` knows no Avro codec but deflate/null
    ("File header contains an unknown codec"; for a manifest under a deflate list it aborts the
    process). The audit must still read the rebuild back: swapped in, equal to the oracle."""
    from lakepub.store import commit
    from test_derive import _order
    from test_derive_fixes import _set_properties, _table

    _publish(cli, ws_path, FIRST)
    _define(ws_path, MONTHLY)
    _ok(cli("reconcile"))
    _set_properties(ws_path, "orders_monthly", {"write.avro.compression-codec": "zstandard"})
    _define(ws_path, DOUBLED)
    real_swap = commit.swap_table

    def contended(*args, **kwargs):  # another writer moved the published table at the swap: exit 4
        raise commit.CommitConflict("staged by the test")

    monkeypatch.setattr(commit, "swap_table", contended)
    res = cli("reconcile")
    assert res.code == 4, res.err + res.out  # the rebuild is kept, the user's codec carried onto it
    monkeypatch.setattr(commit, "swap_table", real_swap)
    rebuilds = [t for t in _catalog(ws_path) if "__rebuild_" in t]
    assert len(rebuilds) == 1 and _table(ws_path, rebuilds[0]).properties["write.avro.compression-codec"] == "zstandard"
    _publish(cli, ws_path, [_order("Z", 1, "2025-12-05", 11)])  # an input moves: the rebuild commits a window
    _ok(cli("reconcile"))
    assert _rows(cli, "SELECT * FROM orders_monthly ORDER BY 1") == _oracle(cli, DOUBLED)
    table = _table(ws_path, "orders_monthly")
    assert b"zstandard" in Path(table.current_snapshot().manifest_list.removeprefix("file://")).read_bytes()[:1000]


def _catalog(ws_path: Path) -> list[str]:
    from test_derive_fixes import _catalog_tables

    return _catalog_tables(ws_path)


def test_duckdb_can_decode_reads_every_manifest_codec(ws_path: Path):
    """A deflate manifest list over an older zstd manifest (the codec property removed between
    two appends): ``iceberg_scan`` would abort the process on the manifest, so the check must
    read every file's header, not only the list's; the view (pyiceberg's decode) reads it."""
    import pyarrow as pa

    from lakepub import duck, views
    from lakepub.store.integrity import avro_codec, check_scannable, duckdb_can_decode
    from lakepub.workspace import Workspace

    with Workspace.open(ws_path) as ws:
        ident = (ws.config.namespace, "codec_probe")
        ws.catalog.create_namespace_if_not_exists(ws.config.namespace)
        table = ws.catalog.create_table(ident, schema=pa.schema([("a", pa.int64())]))
        table.append(pa.table({"a": [1]}))
        assert duckdb_can_decode(table)
        with table.transaction() as tx:
            tx.set_properties({"write.avro.compression-codec": "zstandard"})
        table.append(pa.table({"a": [2]}))
        with table.transaction() as tx:
            tx.remove_properties("write.avro.compression-codec")
        table.append(pa.table({"a": [3]}))
        snapshot = table.current_snapshot()
        codecs = [avro_codec(table.io, m.manifest_path) for m in snapshot.manifests(table.io)]
        assert avro_codec(table.io, snapshot.manifest_list) == "deflate" and sorted(codecs) == [
            "deflate", "deflate", "zstandard"]
        check_scannable(table)
        assert not duckdb_can_decode(table)
        con = duck.connect(ws.config.catalog)
        assert con.execute(f"SELECT a FROM {views.resolve(table).table_sql()} ORDER BY 1").fetchall() == [
            (1,), (2,), (3,)]
