"""Observed consumers: the columns real ``lakepub query`` runs and ``Workspace.query/connect``
statements read, shown by ``lakepub consumers`` and named by ``lakepub contract check``; and the
contract's identity (schema_ref + canonical sha256) recorded on every published snapshot.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import yaml

from lakepub.contract.model import load_contract
from lakepub.store.layout import summary_id
from lakepub.workspace import Workspace

from tests.conftest import SEED_EVENTS, write_jsonl


def _published(cli, ws_path: Path) -> None:
    events = write_jsonl(ws_path / "batch.jsonl", SEED_EVENTS)
    assert cli("publish", "orders_daily", "--events", str(events), "--start", "{}", "--end", '{"p0": 4}').code == 0


def _query_process(ws_path: Path, sql: str, consumer: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "lakepub.cli", "-w", str(ws_path), "query", sql],
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "LAKEPUB_CONSUMER": consumer})


def test_query_runs_record_the_columns_they_read(cli, ws_path: Path):
    _published(cli, ws_path)
    for sql, who in [("SELECT day, sum(cents) FROM orders_daily GROUP BY day", "finance-job"),
                     ("WITH t AS (SELECT * FROM orders_daily) SELECT count(*) FROM t", "dashboard"),
                     ("SELECT count(*) FROM orders_daily", "pinger")]:
        proc = _query_process(ws_path, sql, who)
        assert proc.returncode == 0, proc.stderr
    result = cli("consumers", "orders_daily", "--format", "json")
    assert result.code == 0, result.err
    reads = {(r["consumer"], r["column"], r["via"]) for r in result.json()["observed"]}
    assert reads == {("finance-job", "day", "query"), ("finance-job", "cents", "query"),
                     ("dashboard", "day", "query"), ("dashboard", "cents", "query"), ("dashboard", "orders", "query"),
                     ("pinger", "", "query")}
    assert all(r["last_seen"].endswith("+00:00") and r["reads"] == 1 for r in result.json()["observed"])
    text = cli("consumers", "orders_daily")
    assert "finance-job" in text.out and "(rows)" in text.out


def test_python_api_reads_are_recorded_and_counted(cli, ws_path: Path, monkeypatch):
    _published(cli, ws_path)
    monkeypatch.setenv("LAKEPUB_CONSUMER", "notebook")
    ws = Workspace.open(ws_path)
    con = ws.connect()
    assert con.execute("SELECT orders FROM orders_daily WHERE day = DATE '2025-10-02'").fetchall() == [(1,)]
    assert con.sql("SELECT max(cents) AS m FROM orders_daily").fetchall() == [(150,)]
    reads = {(r["column"], r["via"]) for r in cli("consumers", "orders_daily", "--format", "json").json()["observed"]}
    assert reads == {("orders", "connect"), ("day", "connect"), ("cents", "connect")}


def test_a_failing_recorder_never_fails_the_query(cli, ws_path: Path):
    _published(cli, ws_path)
    (ws_path / ".lakepub" / "consumers.db").mkdir()  # not a database: recording fails
    proc = _query_process(ws_path, "SELECT sum(cents) AS c FROM orders_daily", "x")
    assert proc.returncode == 0 and proc.stdout.split()[2] == "150", proc.stdout
    result = cli("consumers", "orders_daily", "--format", "json")
    assert result.code == 0 and result.json()["observed"] == []  # nothing could be recorded


def test_check_names_observed_consumers_of_a_removed_column(cli, ws_path: Path):
    _published(cli, ws_path)
    assert _query_process(ws_path, "SELECT day, cents FROM orders_daily", "finance-job").returncode == 0
    contracts = ws_path / "catalog" / "contracts"
    new = yaml.safe_load((contracts / "orders@v1.0.yaml").read_text())
    new["version"] = "1.1"
    new["fields"]["cents"] = {"type": "int", "unit": "EUR/100"}  # narrowed, and a new unit
    path = ws_path / "orders@v1.1.yaml"
    path.write_text(yaml.safe_dump(new))
    result = cli("contract", "check", "contracts/orders@v1.0", str(path), "--format", "json")
    assert result.code == 1
    [narrow] = [f for f in result.json()["findings"] if f["rule"] == "COMPAT.TYPE_CHANGED"]
    assert narrow["failure_mode"] == "new reader cannot parse old data"
    assert narrow["consumers"][0] == "dataset orders_daily (cents)"
    assert narrow["consumers"][1].startswith("observed finance-job via query reads orders_daily.cents (last ")
    text = cli("contract", "check", "contracts/orders@v1.0", str(path))
    assert "observed finance-job via query reads orders_daily.cents" in text.out


def test_every_publish_records_the_contract_ref_and_sha256(cli, ws_path: Path):
    _published(cli, ws_path)
    contract = load_contract(ws_path / "catalog" / "contracts" / "orders@v1.0.yaml")
    ws = Workspace.open(ws_path)
    table = ws.catalog.load_table(summary_id(ws.config.namespace, "orders_daily"))
    props = table.current_snapshot().summary.additional_properties
    assert props["lakepub.contract"] == "contracts/orders@v1.0"
    assert props["lakepub.contract-sha256"] == contract.sha256 and len(contract.sha256) == 64
    # the export's schema JSON hashes to the same value
    out = ws_path / "export"
    result = cli("contract", "export", "contracts/orders@v1.0", "--out", str(out), "--format", "json")
    assert result.json()["export_manifest"]["artifacts"][0]["sha256"] == contract.sha256


def test_the_query_path_does_not_import_sqlglot(cli, ws_path: Path):
    """Parsing happens when the record is read (`lakepub consumers`, `contract check`), so a
    `lakepub query` process never pays sqlglot's import."""
    _published(cli, ws_path)
    code = ("import sys; from lakepub.workspace import Workspace; "
            f"Workspace.open({str(ws_path)!r}).query('SELECT cents FROM orders_daily'); "
            "assert not [m for m in sys.modules if m.startswith('sqlglot')]")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    reads = cli("consumers", "orders_daily", "--format", "json").json()["observed"]
    assert [(r["column"], r["via"]) for r in reads] == [("cents", "query")]
