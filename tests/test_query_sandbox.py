"""`lakepub query` / ``Workspace.query`` run read-only SQL in a sandboxed DuckDB.

Only SELECT-like statements (and EXPLAIN of one) are accepted, and the database they run in
can read the warehouse and nothing else: no file written (not even inside the warehouse), no
other file read, no ATTACH, no INSTALL/LOAD, no configuration change. ``Workspace.connect()``
stays an unrestricted DuckDB connection for Python users.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from conftest import SEED_EVENTS, CliResult, published_pointers
from lakepub import output, reports
from lakepub.cli import main
from lakepub.errors import QueryError
from lakepub.init import init_workspace
from lakepub.workspace import Workspace


@pytest.fixture(scope="module")
def shop(tmp_path_factory) -> Path:
    """One published workspace for the module: the refused statements must leave it as it is."""
    root = tmp_path_factory.mktemp("sandbox") / "ws"
    init_workspace(root)
    ws = Workspace.open(root)
    for offset, event in enumerate(SEED_EVENTS):
        ws.publish("orders_daily", [event], start={"p0": offset}, end={"p0": offset + 1})
    ws.publish("orders_daily", [{"order_id": "C", "version": 1, "day": "2025-11-03", "cents": 40, "deleted": False}],
               start={"p0": 4}, end={"p0": 5})
    return root


def run(root: Path, *args: str) -> CliResult:
    result = CliRunner().invoke(main, ["-w", str(root), *args], catch_exceptions=False)
    return CliResult(result.exit_code, result.stdout, result.stderr)


def files_under(folder: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in folder.rglob("*") if p.is_file()}


def warehouse(root: Path) -> Path:
    return root / ".lakepub" / "warehouse"


REFUSED_BY_TYPE = {
    "copy-outside": "COPY (SELECT * FROM orders_daily) TO '{outside}/out.csv'",
    "copy-inside": "COPY (SELECT 1 AS x) TO '{warehouse}/lakepub/orders_daily/x.csv'",
    "copy-over-metadata": "COPY (SELECT 1 AS x) TO '{metadata}' (FORMAT csv)",
    "attach": "ATTACH '{outside}/other.duckdb' AS other",
    "install": "INSTALL spatial",
    "load": "LOAD spatial",
    "set-external-access": "SET enable_external_access=true; COPY (SELECT 1) TO '{outside}/out.csv'",
    "select-then-copy": "SELECT 1; COPY (SELECT 1 AS x) TO '{outside}/out.csv'",
    "explain-analyze-copy": "EXPLAIN ANALYZE COPY (SELECT 1 AS x) TO '{warehouse}/x.csv'",
    "create-table": "CREATE TABLE t AS SELECT * FROM orders_daily",
    "call": "CALL pragma_version()",
    "export": "EXPORT DATABASE '{outside}/export'",
}


@pytest.mark.parametrize("case", sorted(REFUSED_BY_TYPE))
def test_statements_other_than_select_are_refused_and_change_nothing(shop: Path, tmp_path: Path, case: str):
    ws = Workspace.open(shop)
    pointers = published_pointers(ws)
    before = files_under(warehouse(shop))
    metadata = ws.published_tables()["orders_daily"].removeprefix("file://")
    sql = REFUSED_BY_TYPE[case].format(outside=tmp_path, warehouse=warehouse(shop), metadata=metadata)

    result = run(shop, "query", sql)

    assert result.code == 2, (result.out, result.err)
    assert "only SELECT" in result.err and "EXPLAIN" in result.err, result.err  # says what is allowed
    assert list(tmp_path.iterdir()) == []
    assert files_under(warehouse(shop)) == before
    assert published_pointers(ws) == pointers


@pytest.mark.parametrize("sql", [
    "SELECT * FROM read_csv('/etc/passwd')",
    "SELECT * FROM read_text('/etc/hostname')",
    "SELECT * FROM glob('/etc/*')",
    "SELECT * FROM read_csv('{outside}/secret.csv')",
])
def test_select_cannot_read_files_outside_the_warehouse(shop: Path, tmp_path: Path, sql: str):
    (tmp_path / "secret.csv").write_text("x\n42\n")
    result = run(shop, "query", sql.format(outside=tmp_path))
    assert result.code == 2, (result.out, result.err)
    assert "disabled by configuration" in result.err, result.err
    assert "42" not in result.out


def test_python_query_is_sandboxed_too(shop: Path, tmp_path: Path):
    ws = Workspace.open(shop)
    with pytest.raises(QueryError, match="only SELECT"):
        ws.query(f"COPY (SELECT 1) TO '{tmp_path}/x.csv'")
    with pytest.raises(QueryError, match="disabled by configuration"):
        ws.query("SELECT * FROM read_csv('/etc/passwd')")
    assert list(tmp_path.iterdir()) == []


def test_aggregate_and_explain_still_work_and_state_stays_verified(shop: Path):
    totals = run(shop, "query", "SELECT count(*) AS days, sum(cents) AS cents, sum(orders) AS orders FROM orders_daily",
                 "--format", "json")
    assert totals.code == 0, totals.err
    assert totals.json() == [{"days": 2, "cents": 190, "orders": 2}]
    for sql in ("EXPLAIN SELECT day, sum(cents) FROM orders_daily GROUP BY day",
                "EXPLAIN ANALYZE SELECT sum(cents) FROM orders_daily",
                "WITH d AS (FROM orders_daily) SELECT max(day) FROM d; SELECT 1 AS one",
                "DESCRIBE orders_daily", "SUMMARIZE orders_daily", "SHOW TABLES"):
        result = run(shop, "query", sql)
        assert result.code == 0, (sql, result.err)
    assert run(shop, "verify", "orders_daily", "--deep").code == 0


@pytest.mark.parametrize("fmt", ["table", "csv", "json"])
def test_results_equal_an_unrestricted_connection(shop: Path, fmt: str):
    ws = Workspace.open(shop)
    sql = "SELECT day, cents, orders, cents / orders AS avg FROM orders_daily ORDER BY day"
    expected = output.render_query(ws.connect().execute(sql).to_arrow_table(), fmt)
    result = run(shop, "query", sql, "--format", fmt)
    assert result.code == 0, result.err
    assert result.out.rstrip("\n") == expected


def test_connect_stays_unrestricted_after_a_sandboxed_query(shop: Path, tmp_path: Path):
    """The sandbox is a database of its own: locking it must not lock the connections that
    publishes, verify and Python users get from ``Workspace.connect()``."""
    ws = Workspace.open(shop)
    ws.query("SELECT 1")
    con = ws.connect()
    con.execute(f"COPY (SELECT sum(cents) AS c FROM orders_daily) TO '{tmp_path}/totals.csv'")
    assert (tmp_path / "totals.csv").read_text().split() == ["c", "190"]
    assert reports.verify(ws, "orders_daily", deep=True).ok


def test_sandbox_costs_little_per_query(shop: Path):
    ws = Workspace.open(shop)
    ws.query("SELECT 1")  # the sandboxed database is created once per process
    sql = "SELECT day, sum(cents) FROM orders_daily GROUP BY day"
    start = time.perf_counter()
    for _ in range(5):
        ws.query(sql)
    per_query = (time.perf_counter() - start) / 5
    assert per_query < 0.5, per_query  # generous: the point is no per-query extension loading


def test_select_cannot_read_duckdbs_default_temp_directory(shop: Path, tmp_path: Path):
    """DuckDB allows its ``temp_directory`` (default ``.tmp`` under the working directory): the
    sandbox spills to a private folder instead, removed when the process exits."""
    cwd = tmp_path / "cwd"
    (cwd / ".tmp").mkdir(parents=True)
    (cwd / ".tmp" / "x.txt").write_text("secret-in-tmp\n")
    private = tmp_path / "tmpdir"
    private.mkdir()
    for path in (cwd / ".tmp" / "x.txt", f"{cwd}/.tmp/../.tmp/x.txt"):
        proc = subprocess.run(
            [sys.executable, "-m", "lakepub.cli", "-w", str(shop), "query", f"SELECT * FROM read_text('{path}')"],
            capture_output=True, text=True, cwd=cwd, env={**os.environ, "TMPDIR": str(private)}, timeout=120)
        assert proc.returncode == 2, (proc.stdout, proc.stderr)
        assert "secret-in-tmp" not in proc.stdout and "disabled by configuration" in proc.stderr, proc.stderr
    assert list(private.iterdir()) == []  # the private spill folder is gone with the process
    ok = subprocess.run([sys.executable, "-m", "lakepub.cli", "-w", str(shop), "query", "SELECT sum(cents) AS c FROM orders_daily"],
                        capture_output=True, text=True, cwd=cwd, env={**os.environ, "TMPDIR": str(private)}, timeout=120)
    assert ok.returncode == 0 and "190" in ok.stdout, ok.stderr


@pytest.mark.parametrize("fmt", ["table", "csv", "json"])
@pytest.mark.parametrize("value", ["'infinity'::DATE", "'-infinity'::DATE", "'infinity'::TIMESTAMP"])
def test_a_value_python_cannot_hold_is_a_query_error_naming_the_column(shop: Path, value: str, fmt: str):
    """DuckDB's infinite dates reached the printer as an internal OverflowError (exit 1); they are
    the query's to fix (exit 2, one line naming the column and the CAST that shows them)."""
    before = files_under(warehouse(shop))
    result = run(shop, "query", f"SELECT 1 AS fine, {value} AS odd", "--format", fmt)
    assert result.code == 2, result.err
    assert "internal error" not in result.err
    assert "column odd" in result.err and "CAST it to VARCHAR" in result.err
    assert files_under(warehouse(shop)) == before
    shown = run(shop, "query", f"SELECT CAST({value} AS VARCHAR) AS odd", "--format", "csv")
    assert shown.code == 0 and "infinity" in shown.out
