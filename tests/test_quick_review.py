"""Adversarial review of the quick read path (lakepub/quick): states where it answered with
something the full path would not print (see the commit messages)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from click.testing import CliRunner

from lakepub.cli import main
from tests.test_dual_write import _dual_write


def _invoke(root: Path, quick: str, *args: str) -> tuple[int, str, str]:
    res = CliRunner().invoke(main, ["-w", str(root), *args], env={"LAKEPUB_QUICK": quick}, catch_exceptions=False)
    return res.exit_code, res.stdout, res.stderr


def test_show_tables_during_dual_write_lists_the_partner_view_on_both_paths(ws_path: Path, cli):
    """``Workspace.published_views`` adds ``<dataset>__v<MAJOR>`` partner views (DUAL_WRITE); a
    quick query that does not name one (SHOW TABLES, information_schema) must not drop them."""
    _dual_write(ws_path, cli)
    assert cli("run", "customers_all").code == 0  # builds customers_all__v2 beside the published one
    for sql in ("SHOW TABLES", "SELECT table_name FROM information_schema.tables ORDER BY 1"):
        full = _invoke(ws_path, "0", "query", sql)  # stores the views and the workspace record
        assert full[0] == 0 and "customers_all__v2" in full[1], full
        again = _invoke(ws_path, "trace", "query", sql)
        assert again[:2] == full[:2], (sql, again, full)


def test_a_symlinked_folder_under_the_catalog_is_part_of_the_stamp(ws_path: Path, cli, tmp_path: Path):
    """The configuration loader follows a symlinked ``catalog/datasets`` (or ``contracts``)
    folder; the stamp that validates the remembered record must see a file added there."""
    shared = tmp_path / "shared_datasets"
    datasets = ws_path / "catalog" / "datasets"
    shutil.copytree(datasets, shared)
    shutil.rmtree(datasets)
    os.symlink(shared, datasets)
    assert _invoke(ws_path, "0", "status")[0] == 0  # remembered
    first = _invoke(ws_path, "trace", "status")
    assert first[0] == 0
    text = (shared / "orders_daily.yaml").read_text()
    (shared / "orders_twice.yaml").write_text(text.replace("name: orders_daily", "name: orders_twice"))
    quick = _invoke(ws_path, "trace", "status")  # before any full run remembers the new files
    full = _invoke(ws_path, "0", "status")
    assert full[0] == 0 and "orders_twice" in full[1], full
    assert quick[:2] == full[:2], (quick, full)


def test_a_date_python_cannot_hold_is_not_printed_as_another_date(ws_path: Path):
    """DuckDB's Python values clamp ``infinity`` dates to 9999-12-31 / 0001-01-01 and give BC dates
    as strings; pyarrow (the full path) cannot convert them: the quick path must not answer."""
    for sql in ("SELECT 'infinity'::DATE AS d", "SELECT '-infinity'::DATE AS d", "SELECT DATE '0001-01-01' - 1 AS d",
                "SELECT DATE '2025-01-02' AS d"):
        full = _invoke(ws_path, "0", "query", sql, "--format", "json")
        quick = _invoke(ws_path, "trace", "query", sql, "--format", "json")
        assert quick[:2] == full[:2], (sql, quick, full)


def test_a_catalog_database_behind_a_repointed_symlink_is_read_where_the_full_path_reads(ws_path: Path):
    """The record named the SQLite file with its symlinks resolved: once the link is pointed at
    another catalog (a restore, a blue/green switch), the quick path read the old one."""
    import sqlite3

    sys_path = __import__("sys").path
    if "tests" not in sys_path:
        sys_path.insert(0, "tests")
    from test_quick import _land, _order

    db = ws_path / ".lakepub" / "catalog.db"  # lakepub init's embedded default
    _land(ws_path, "orders", "p0", "00000.jsonl", [_order(f"o{i}", 1, "2025-01-01", 1) for i in range(3)])
    assert _invoke(ws_path, "0", "run", "orders_daily")[0] == 0
    older = ws_path / "older.db"
    with sqlite3.connect(db) as src, sqlite3.connect(older) as dst:
        src.backup(dst)  # the catalog after the first publish
    _land(ws_path, "orders", "p0", "00001.jsonl", [_order(f"q{i}", 1, "2025-01-02", 1) for i in range(3)])
    assert _invoke(ws_path, "0", "run", "orders_daily")[0] == 0
    newer = ws_path / "newer.db"
    os.replace(db, newer)
    os.symlink(newer, db)
    full = _invoke(ws_path, "0", "status", "orders_daily")  # remembered, status stored
    assert full[0] == 0 and "not published" not in full[1], full
    assert _invoke(ws_path, "trace", "status", "orders_daily")[1] == full[1]
    os.remove(db)
    os.symlink(older, db)
    quick = _invoke(ws_path, "trace", "status", "orders_daily")
    again = _invoke(ws_path, "0", "status", "orders_daily")
    assert again[1] != full[1]  # the older catalog's snapshot
    assert quick[:2] == again[:2], (quick, again)


def test_a_query_of_the_functions_or_settings_is_the_full_path_s(ws_path: Path):
    """The full path's database has the avro and iceberg extensions loaded (their functions and
    settings); the quick one loads none: introspecting them must not be answered quickly."""
    for sql in ("SELECT count(*) AS n FROM duckdb_functions() WHERE function_name LIKE 'iceberg%'",
                "SELECT count(*) AS n FROM duckdb_settings()", "SELECT count(*) AS n FROM pg_catalog.pg_proc"):
        full = _invoke(ws_path, "0", "query", sql)
        quick = _invoke(ws_path, "trace", "query", sql)
        assert quick[:2] == full[:2], (sql, quick, full)


def test_a_warehouse_behind_a_repointed_symlink_is_sandboxed_as_the_full_path_does(ws_path: Path):
    """The record kept the warehouse folder the configuration resolved; once the link names
    another folder, the quick path's sandbox still allowed the old one (files the full path
    refuses to read: the ledger's)."""
    sys_path = __import__("sys").path
    if "tests" not in sys_path:
        sys_path.insert(0, "tests")
    from test_quick import _land, _order

    warehouse = ws_path / ".lakepub" / "warehouse"
    _land(ws_path, "orders", "p0", "00000.jsonl", [_order(f"o{i}", 1, "2025-01-01", 1) for i in range(3)])
    assert _invoke(ws_path, "0", "status")[0] == 0  # the catalog and the warehouse folder exist
    real = ws_path / "wh_a"
    os.replace(warehouse, real)
    os.symlink(real, warehouse)
    assert _invoke(ws_path, "0", "run", "orders_daily")[0] == 0
    ledger = next(real.rglob("orders_daily__ledger/data"))
    sql = f"SELECT count(*) AS n FROM read_parquet('{ledger}/**/*.parquet')"
    full = _invoke(ws_path, "0", "query", "SELECT count(*) AS n FROM orders_daily")  # remembered, views stored
    assert full[0] == 0
    other = ws_path / "wh_b"
    other.mkdir()
    os.remove(warehouse)
    os.symlink(other, warehouse)
    quick = _invoke(ws_path, "trace", "query", sql)
    full = _invoke(ws_path, "0", "query", sql)
    assert full[0] == 2, full  # outside the sandbox now
    assert quick[:2] == full[:2], (quick, full)
