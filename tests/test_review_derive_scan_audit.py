"""Review of merge 04679dc (issue 14: the rebuild audit reads back by DuckDB's ``iceberg_scan``,
``store/commit.load_table`` remembers parsed metadata files). Driven through the CLI on real
Iceberg tables in a SQLite catalog, read back by DuckDB (``lakepub query``) against the oracle."""

from __future__ import annotations

from pathlib import Path

import pytest

from test_derive import FIRST, MONTHLY, _define, _ok, _oracle, _publish, _rows  # noqa: F401
from test_derive_fixes import DOUBLED


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
