"""Derived datasets (issue 14) through the CLI on real Iceberg tables, read back by DuckDB.

A monthly rollup over ``orders_daily`` (``month(day)``) and a join of a fact with a current-state
dimension (``all``): each published result equals the same SQL run directly by DuckDB over the
published upstreams (the oracle); new upstream data makes exactly the affected partitions stale
and reconcile recomputes only those; a definition change gives new data versions to the dataset
and its downstream only; a change to an upstream column a downstream does not read leaves its
data version alone; lookback; graph errors exit 2 naming file and key; ``--window`` and
``--workers``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from conftest import write_jsonl

MONTHLY = {"name": "orders_monthly", "description": "cents per month",
           "projection": {"kind": "sql", "inputs": {"orders_daily": "month(day)"},
                          "query": "SELECT CAST(date_trunc('month', day) AS DATE) AS month, sum(cents) AS cents, "
                                   "sum(orders) AS orders FROM orders_daily GROUP BY 1"},
           "partition": "month(month)"}
YEARLY = {"name": "orders_yearly",
          "projection": {"kind": "sql", "inputs": {"orders_monthly": "year(month)"},
                         "query": "SELECT CAST(date_trunc('year', month) AS DATE) AS year, sum(cents) AS cents "
                                  "FROM orders_monthly GROUP BY 1"},
          "partition": "year(year)"}
DAYS_ONLY = {"name": "order_days",
             "projection": {"kind": "sql", "inputs": {"orders_daily": "month(day)"},
                            "query": "SELECT day, orders FROM orders_daily WHERE orders > 0"},
             "partition": "month(day)"}


def _order(oid: str, version: int, day: str, cents: int, deleted: bool = False) -> dict:
    return {"order_id": oid, "version": version, "day": day, "cents": cents, "deleted": deleted}


def _define(ws_path: Path, *datasets: dict) -> None:
    for d in datasets:
        (ws_path / "catalog" / "datasets" / f"{d['name']}.yaml").write_text(yaml.safe_dump(d, sort_keys=False))


_POS = {"orders": 0}


def _publish(cli, ws_path: Path, events: list[dict]) -> None:
    start = _POS.setdefault(str(ws_path), 0)
    path = write_jsonl(ws_path / f"b{start}.jsonl", events)
    res = cli("publish", "orders_daily", "--events", str(path), "--start", json.dumps({"p0": start}),
              "--end", json.dumps({"p0": start + len(events)}))
    assert res.code == 0, res.err
    _POS[str(ws_path)] = start + len(events)


def _ok(res):
    assert res.code == 0, res.err + res.out
    return res


def _rows(cli, sql: str) -> list[dict]:
    return _ok(cli("query", sql, "--format", "json")).json()


def _plan(cli, *args: str) -> dict:
    return {d["dataset"]: d for d in _ok(cli("plan", *args, "--format", "json")).json()["datasets"]}


def _oracle(cli, spec: dict) -> list[dict]:
    """The derived query run directly by DuckDB over the published upstreams (lakepub query's views)."""
    return _rows(cli, f"SELECT * FROM ({spec['projection']['query']}) ORDER BY 1")


FIRST = [_order("A", 1, "2025-09-03", 100), _order("B", 1, "2025-10-01", 70), _order("C", 1, "2025-10-20", 5),
         _order("D", 1, "2025-11-02", 40), _order("E", 1, "2024-12-31", 9)]


def test_rollup_equals_duckdb_and_only_affected_partitions_are_recomputed(ws_path: Path, cli):
    _publish(cli, ws_path, FIRST)
    _define(ws_path, MONTHLY)
    plan = _plan(cli)
    assert plan["orders_monthly"]["change"] == "new" and plan["orders_monthly"]["pending_partitions"] == 4
    assert plan["orders_daily"]["change"] == "untouched" and plan["orders_daily"]["kind"] == "base"
    res = _ok(cli("reconcile", "--format", "json"))
    windows = res.json()["windows"]
    assert sorted(p for w in windows for p in w["partitions"]) == ["2024-12", "2025-09", "2025-10", "2025-11"]
    assert _rows(cli, "SELECT * FROM orders_monthly ORDER BY 1") == _oracle(cli, MONTHLY)
    assert _plan(cli)["orders_monthly"]["pending_partitions"] == 0
    again = _ok(cli("reconcile"))
    assert "nothing to do" in again.out
    # New upstream data in October only (and a new month): exactly those become stale/missing.
    _publish(cli, ws_path, [_order("F", 1, "2025-10-05", 1000), _order("G", 1, "2026-01-01", 3)])
    plan = _plan(cli)["orders_monthly"]
    assert plan["change"] == "untouched"
    pending = {p: why for w in plan["windows"] for p, why in w["why"].items()}
    assert pending == {"2025-10": "stale: its input partitions changed", "2026-01": "missing"}, pending
    before = {s["snapshot_id"] for s in _snapshots(ws_path, "orders_monthly")}
    res = _ok(cli("reconcile", "--format", "json"))
    assert sorted(p for w in res.json()["windows"] for p in w["partitions"]) == ["2025-10", "2026-01"]
    assert _rows(cli, "SELECT * FROM orders_monthly ORDER BY 1") == _oracle(cli, MONTHLY)
    assert len({s["snapshot_id"] for s in _snapshots(ws_path, "orders_monthly")} - before) == 1
    # A delete empties 2024-12 upstream: the derived partition goes away too.
    _publish(cli, ws_path, [_order("E", 2, "2024-12-31", 9, deleted=True)])
    _ok(cli("reconcile"))
    got = _rows(cli, "SELECT * FROM orders_monthly ORDER BY 1")
    assert got == _oracle(cli, MONTHLY) and "2024-12-01" not in {str(r["month"]) for r in got}


def _snapshots(ws_path: Path, name: str) -> list[dict]:
    from lakepub.store.layout import summary_id
    from lakepub.workspace import Workspace

    ws = Workspace.open(ws_path)
    table = ws.catalog.load_table(summary_id(ws.config.namespace, name))
    out = [{"snapshot_id": s.snapshot_id, **s.summary.additional_properties} for s in table.snapshots()]
    ws.close()
    return out
