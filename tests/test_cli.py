"""The CLI contract: init, help, read commands in JSON, verify's exit code."""

from __future__ import annotations

import json
from datetime import date

import pyarrow as pa
import pytest
from click.testing import CliRunner

from conftest import A1, A2, B2
from lakepub.cli import main
from lakepub.store.layout import SUMMARY_ARROW
from lakepub.workspace import Workspace


def test_init_writes_the_embedded_default(tmp_path):
    res = CliRunner().invoke(main, ["init", str(tmp_path / "w")])
    assert res.exit_code == 0
    for rel in ("lakepub.yaml", "catalog/datasets/orders_daily.yaml", "catalog/contracts/orders@v1.0.yaml"):
        assert (tmp_path / "w" / rel).is_file()
    again = CliRunner().invoke(main, ["init", str(tmp_path / "w")])
    assert again.exit_code == 2 and "already exists" in again.stderr


def test_repo_catalog_matches_the_init_templates():
    from pathlib import Path

    repo = Path(__file__).parent.parent
    for rel in ("datasets/orders_daily.yaml", "contracts/orders@v1.0.yaml"):
        assert (repo / "catalog" / rel).read_text() == (repo / "lakepub/templates/catalog" / rel).read_text()


def test_fresh_workspace_commands_explain_what_to_do(cli):
    res = cli("query", "SELECT * FROM orders_daily")
    assert res.code == 2 and "has no published snapshot yet" in res.err
    res = cli("run", "orders_daily")
    assert res.code == 0 and "nothing new" in res.out
    assert "not published yet" in cli("status").out


def test_no_workspace_is_a_one_line_error(tmp_path):
    res = CliRunner().invoke(main, ["-w", str(tmp_path), "status"])
    assert res.exit_code == 2 and "run 'lakepub init' first" in res.stderr


def test_help_lists_commands_and_exit_codes():
    res = CliRunner().invoke(main, ["--help"])
    for word in ("publish", "run", "query", "status", "log", "verify", "demo", "Exit codes"):
        assert word in res.output


def test_read_commands_in_json(ws: Workspace, cli):
    ws.publish("orders_daily", [A1], start={}, end={"p0": 1})
    ws.publish("orders_daily", [A2, B2], start={"p0": 1}, end={"p0": 3})
    status = cli("status", "--format", "json").json()
    assert status[0]["measures"] == {"cents": 150, "orders": 1} and status[0]["partitions"] == 1
    assert status[0]["positions"] == {"orders": {"p0": 3}}
    # Published with `publish`, not from landing/: status says so instead of failing.
    assert status[0]["landing"]["missing"] == {"p0": 3}
    assert "are beyond the records" in cli("status").out
    log = cli("log", "orders_daily", "--format", "json").json()
    assert [e["end"] for e in log] == [{"p0": 3}, {"p0": 1}]
    assert log[0]["counts"]["deletes"] == 1
    assert "snapshot" in cli("log", "orders_daily").out
    verify = cli("verify", "orders_daily", "--format", "json")
    assert verify.code == 0 and verify.json()["ok"] is True
    assert cli("query", "SELECT nope FROM orders_daily").code == 2


def test_verify_detects_a_tampered_partition(ws: Workspace, cli):
    ws.publish("orders_daily", [A1], start={}, end={"p0": 1})
    assert cli("verify", "orders_daily").code == 0
    table = ws.catalog.load_table(("lakepub", "orders_daily"))
    forged = pa.Table.from_pylist([{"day": date(2025, 10, 1), "cents": 1, "orders": 1}], schema=SUMMARY_ARROW)
    table.overwrite(forged)  # a write that bypassed lakepub
    res = cli("verify", "orders_daily")
    assert res.code == 1 and "mismatch" in res.err


@pytest.mark.parametrize("folder", ["proj#1", "50%off", "a%41b?c"])
def test_workspace_under_a_folder_with_uri_characters(tmp_path, folder):
    """`#`, `%` and `?` are plain characters of a local path: pyiceberg, SQLAlchemy and DuckDB get
    locations that name exactly the workspace's files, and nothing is written outside it."""
    root = tmp_path / folder / "ws"
    inputs = tmp_path / "in"
    inputs.mkdir()
    batch = inputs / "b.jsonl"
    batch.write_text("".join(json.dumps(e) + "\n" for e in (A1, A2, B2)))

    def run(*args: str):
        result = CliRunner().invoke(main, ["-w", str(root), *args])
        assert result.exit_code == 0, (args, result.stderr, result.exception)
        return result.stdout

    assert CliRunner().invoke(main, ["init", str(root)]).exit_code == 0
    run("publish", "orders_daily", "--events", str(batch), "--start", "{}", "--end", '{"p0": 3}')
    assert json.loads(run("query", "SELECT day::VARCHAR AS day, cents FROM orders_daily", "--format", "json")) == [
        {"day": "2025-10-02", "cents": 150}]
    run("verify", "orders_daily", "--deep")
    assert Workspace.open(root).committed_positions("orders_daily") == {"orders": {"p0": 3}}
    run("janitor", "--older-than", "0s")  # finds the files as referenced, deletes only what is not
    run("verify", "orders_daily", "--deep")
    outside = [p for p in tmp_path.rglob("*")
               if not (p == root or root in p.parents or p == inputs or inputs in p.parents or p in root.parents)]
    assert outside == []
    assert (root / ".lakepub" / "catalog.db").is_file()
    assert any((root / ".lakepub" / "warehouse").rglob("*.metadata.json"))


def test_a_file_uri_warehouse_with_uri_characters_is_refused(tmp_path):
    root = tmp_path / "ws"
    assert CliRunner().invoke(main, ["init", str(root)]).exit_code == 0
    config = root / "lakepub.yaml"
    config.write_text(config.read_text().replace("warehouse: .lakepub/warehouse", f"warehouse: file://{tmp_path}/wh#1"))
    result = CliRunner().invoke(main, ["-w", str(root), "status"])
    assert result.exit_code == 2
    assert "'#'" in result.stderr and str(config) in result.stderr and len(result.stderr.splitlines()) == 1
    assert not (tmp_path / "wh").exists() and not (tmp_path / "wh#1").exists()
