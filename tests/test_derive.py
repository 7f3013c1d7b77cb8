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


SALES_CONTRACT = """
name: sales
version: "1.0"
entity: {key: [sale_id], version: version, deleted: deleted}
fields:
  sale_id: string
  version: long
  day: date
  customer_id: string
  cents: long
  deleted: boolean
"""
CUSTOMERS_CONTRACT = """
name: customers
version: "1.0"
entity: {key: [customer_id], version: version, deleted: deleted}
fields:
  customer_id: string
  version: long
  country: {type: string, nullable: true}
  plan: string
  deleted: boolean
"""
SALES_DAILY = {"name": "sales_daily", "source": "sales", "contract": "contracts/sales@v1.0",
               "projection": {"kind": "aggregate", "group_by": ["day", "customer_id"],
                              "measures": {"cents": "sum(cents)", "sales": "count()"}},
               "partition": "month(day)"}
CUSTOMERS = {"name": "customers_current", "source": "customers", "contract": "contracts/customers@v1.0",
             "entity": "customers",
             "projection": {"kind": "current", "columns": ["customer_id", "country", "plan"]},
             "partition": "bucket(4, customer_id)"}
MRR = {"name": "customers_mrr", "source": "customers", "contract": "contracts/customers@v1.0",
       "entity": "customers", "projection": {"kind": "aggregate", "group_by": ["country", "plan"],
                                             "measures": {"n": "count()"}},
       "partition": "identity(country)"}
BY_COUNTRY = {"name": "sales_by_country",
              "projection": {"kind": "sql", "inputs": {"sales_daily": "month(day)", "customers_current": "all"},
                             "query": "SELECT CAST(date_trunc('month', s.day) AS DATE) AS month, "
                                      "coalesce(c.country, '?') AS country, sum(s.cents) AS cents "
                                      "FROM sales_daily s LEFT JOIN customers_current c USING (customer_id) "
                                      "GROUP BY 1, 2"},
              "partition": "month(month)"}
TOTALS = {"name": "sales_totals",  # reads only sales_daily's day and cents
          "projection": {"kind": "sql", "inputs": {"sales_daily": "month(day)"},
                         "query": "SELECT day, sum(cents) AS cents FROM sales_daily GROUP BY day"},
          "partition": "month(day)"}


def _sale(sid, day, cid, cents, version=1):
    return {"sale_id": sid, "version": version, "day": day, "customer_id": cid, "cents": cents, "deleted": False}


def _customer(cid, country, plan="pro", version=1):
    return {"customer_id": cid, "version": version, "country": country, "plan": plan, "deleted": False}


def _publish_to(cli, ws_path, dataset, source, events, start):
    path = write_jsonl(ws_path / f"{dataset}-{start}.jsonl", events)
    _ok(cli("publish", dataset, "--events", str(path), "--source", source, "--start", json.dumps({"p0": start}),
            "--end", json.dumps({"p0": start + len(events)})))


@pytest.fixture
def shop(ws_path: Path, cli):
    (ws_path / "catalog" / "contracts" / "sales@v1.0.yaml").write_text(SALES_CONTRACT)
    (ws_path / "catalog" / "contracts" / "customers@v1.0.yaml").write_text(CUSTOMERS_CONTRACT)
    _define(ws_path, SALES_DAILY, CUSTOMERS, MRR, BY_COUNTRY, TOTALS)
    _publish_to(cli, ws_path, "sales_daily", "sales",
                [_sale("s1", "2025-10-01", "c1", 100), _sale("s2", "2025-10-02", "c2", 50),
                 _sale("s3", "2025-11-01", "c1", 7), _sale("s4", "2025-11-03", "c3", 1)], 0)
    _publish_to(cli, ws_path, "customers_current", "customers",
                [_customer("c1", "FR"), _customer("c2", "DE"), _customer("c3", None)], 0)
    return ws_path


def test_join_with_a_current_state_dimension(shop: Path, cli):
    _ok(cli("reconcile"))
    assert _rows(cli, "SELECT * FROM sales_by_country ORDER BY 1, 2") == \
        _rows(cli, f"SELECT * FROM ({BY_COUNTRY['projection']['query']}) ORDER BY 1, 2")
    # The dimension changes: every partition reads all of it, so every partition is stale.
    _publish_to(cli, shop, "customers_current", "customers", [_customer("c1", "US", version=2)], 3)
    plan = _plan(cli)
    assert {p for w in plan["sales_by_country"]["windows"] for p in w["pending"]} == {"2025-10", "2025-11"}
    assert plan["sales_totals"]["pending_partitions"] == 0  # it does not read customers_current
    _ok(cli("reconcile"))
    assert _rows(cli, "SELECT * FROM sales_by_country ORDER BY 1, 2") == \
        _rows(cli, f"SELECT * FROM ({BY_COUNTRY['projection']['query']}) ORDER BY 1, 2")
    assert {r["country"] for r in _rows(cli, "SELECT country FROM sales_by_country")} == {"US", "DE", "?"}


def test_data_versions_chain_by_column(shop: Path, cli):
    _define(shop, {**YEARLY_SALES})
    _ok(cli("reconcile"))
    first = _plan(cli)
    assert all(first[n]["change"] == "untouched" for n in first if n != "orders_daily"), {n: (p["change"], p["reasons"]) for n, p in first.items()}
    recorded = {s.get("lakepub.data-version") for s in _snapshots(shop, "sales_by_country")}
    assert recorded == {first["sales_by_country"]["desired_version"]}
    # Every base publish records its data version too.
    assert {s.get("lakepub.data-version") for s in _snapshots(shop, "sales_daily")} == \
        {first["sales_daily"]["desired_version"]}
    # A description change is non-breaking: same data version, nothing to recompute.
    _define(shop, {**BY_COUNTRY, "description": "by country", "owner": "bi"})
    plan = _plan(cli)
    assert plan["sales_by_country"]["change"] == "non-breaking"
    assert plan["sales_by_country"]["desired_version"] == first["sales_by_country"]["desired_version"]
    assert plan["sales_by_country"]["pending_partitions"] == 0
    # A definition change: new data versions for it and its downstream only.
    _define(shop, {**BY_COUNTRY, "projection": {**BY_COUNTRY["projection"], "query":
                   BY_COUNTRY["projection"]["query"].replace("'?'", "'unknown'")}})
    plan = _plan(cli)
    changed = {n for n, p in plan.items() if p["desired_version"] != first[n]["desired_version"]}
    assert changed == {"sales_by_country", "sales_yearly"}
    assert plan["sales_by_country"]["change"] == "breaking"
    assert plan["sales_by_country"]["reasons"] == ["definition changed (query, inputs, columns or partitioning)"]
    assert plan["sales_yearly"]["reasons"] == ["upstream column sales_by_country.* has a new version"] or \
        any("sales_by_country" in r for r in plan["sales_yearly"]["reasons"])
    assert plan["sales_by_country"]["pending_partitions"] == 2 and plan["sales_totals"]["change"] == "untouched"
    _ok(cli("reconcile"))
    after = _plan(cli)
    assert all(p["pending_partitions"] == 0 and p["change"] == "untouched" for n, p in after.items() if n != "orders_daily"), after
    assert _rows(cli, "SELECT * FROM sales_yearly ORDER BY 1, 2") == \
        _rows(cli, f"SELECT * FROM ({YEARLY_SALES['projection']['query']}) ORDER BY 1, 2")
    # An upstream change to a column sales_totals does not read (a new measure of sales_daily):
    # sales_daily gets a new data version, sales_totals keeps its own; sales_by_country reads
    # customer_id and cents, untouched too.
    _define(shop, {**SALES_DAILY, "projection": {**SALES_DAILY["projection"], "measures": {
        **SALES_DAILY["projection"]["measures"], "big": "sum(cents)"}}})
    plan = _plan(cli)
    assert plan["sales_daily"]["change"] == "breaking"
    assert plan["sales_totals"]["desired_version"] == after["sales_totals"]["desired_version"]
    assert plan["sales_by_country"]["desired_version"] == after["sales_by_country"]["desired_version"]
    # ... while a change to a column it reads does change it.
    _define(shop, {**SALES_DAILY, "projection": {**SALES_DAILY["projection"], "group_by": ["day", "customer_id",
                                                                                           "sale_id"]}})
    plan = _plan(cli)
    assert plan["sales_totals"]["desired_version"] != after["sales_totals"]["desired_version"]


YEARLY_SALES = {"name": "sales_yearly",
                "projection": {"kind": "sql", "inputs": {"sales_by_country": "year(month)"},
                               "query": "SELECT CAST(date_trunc('year', month) AS DATE) AS year, country, "
                                        "sum(cents) AS cents FROM sales_by_country GROUP BY 1, 2"},
                "partition": "year(year)"}


@pytest.mark.parametrize("change, key, words", [
    ({"projection": {**MONTHLY["projection"], "inputs": {"orders_daily": "month(day)", "nope": "all"}}},
     "projection.inputs.nope",
     "unknown dataset 'nope'"),
    ({"projection": {**MONTHLY["projection"], "query": "SELECT * FROM orders_daily JOIN other USING (day)"}},
     "projection.query", "'other', which is not listed under projection.inputs"),
    ({"projection": {**MONTHLY["projection"], "query": "SELEC day FROM orders_daily"}}, "projection.query",
     "not valid DuckDB SQL"),
    ({"projection": {**MONTHLY["projection"], "query": "SELECT * FROM read_parquet('/etc/x.parquet')"}},
     "projection.query", "reads only the datasets listed"),
    ({"projection": {**MONTHLY["projection"], "inputs": {"orders_daily": "bucket(4, day)"}}},
     "projection.inputs.orders_daily", "not understood"),
    ({"projection": {**MONTHLY["projection"], "inputs": {"orders_daily": "week(day)"}}},
     "projection.inputs.orders_daily", "expected none"),
    ({"projection": {**MONTHLY["projection"], "inputs": {"orders_daily": "day(day)"}}},
     "projection.inputs.orders_daily", "output partition's transform"),
    ({"projection": {**MONTHLY["projection"], "query": "SELECT nope FROM orders_daily"}}, "projection.query",
     "does not run over its inputs' columns"),
    ({"partition": "month(nope)"}, "partition", "not a column"),
    ({"projection": {**MONTHLY["projection"], "colour": 1}}, "projection.colour", "unknown key"),
])
def test_graph_errors_exit_2_naming_file_and_key(ws_path: Path, cli, change, key, words):
    _define(ws_path, {**MONTHLY, **change})
    res = cli("plan", "--format", "json")
    assert res.code == 2, res.out + res.err
    error = res.json()
    assert error["file"].endswith("orders_monthly.yaml") and error["key"] == key, error
    assert words in error["message"], error["message"]
    assert "Traceback" not in res.err


def test_a_cycle_is_an_error_naming_file_and_key(ws_path: Path, cli):
    a = {"name": "a", "projection": {"kind": "sql", "inputs": {"b": "all"}, "query": "SELECT * FROM b"}}
    b = {"name": "b", "projection": {"kind": "sql", "inputs": {"a": "all"}, "query": "SELECT * FROM a"}}
    _define(ws_path, a, b)
    res = cli("plan", "--format", "json")
    assert res.code == 2 and "cycle" in res.json()["message"] and res.json()["key"] == "projection.inputs.b", res.out


def test_base_commands_keep_working_and_name_derived_datasets(ws_path: Path, cli):
    _publish(cli, ws_path, FIRST)
    _define(ws_path, MONTHLY)
    _ok(cli("status"))
    _ok(cli("tables"))
    _ok(cli("metrics"))
    res = cli("run", "orders_monthly")
    assert res.code == 2 and "derived" in res.err and "reconcile" in res.err, res.err
    res = cli("query", "SELECT * FROM orders_monthly")
    assert res.code == 2 and "lakepub reconcile orders_monthly" in res.err, res.err
    res = cli("reconcile", "orders_daily")
    assert res.code == 2 and "base dataset" in res.err and "lakepub run orders_daily" in res.err, res.err
    _ok(cli("reconcile", "orders_monthly"))
    assert _rows(cli, "SELECT count(*) AS n FROM orders_monthly") == [{"n": 4}]
    _ok(cli("status"))
    _ok(cli("verify", "orders_daily"))


def test_lookback_recomputes_the_newest_partitions(ws_path: Path, cli):
    _publish(cli, ws_path, FIRST)
    _define(ws_path, {**MONTHLY, "lookback": 2})
    _ok(cli("reconcile"))
    plan = _plan(cli)["orders_monthly"]
    assert [(w["pending"], w["why"]) for w in plan["windows"]] == \
        [(["2025-10", "2025-11"], {"2025-10": "lookback", "2025-11": "lookback"})]
    res = _ok(cli("reconcile", "--format", "json"))
    assert [w["partitions"] for w in res.json()["windows"]] == [["2025-10", "2025-11"]]
    assert _rows(cli, "SELECT * FROM orders_monthly ORDER BY 1") == _oracle(cli, MONTHLY)


def test_windows_by_id_and_by_workers_end_equal(ws_path: Path, cli, cli_process):
    _publish(cli, ws_path, FIRST + [_order("H", 1, "2025-01-05", 11), _order("I", 1, "2025-03-05", 12)])
    _define(ws_path, MONTHLY, YEARLY)
    plan = _plan(cli, "--batch-partitions", "2")["orders_monthly"]
    ids = [w["id"] for w in plan["windows"]]
    assert len(ids) == 3 and _plan(cli, "--batch-partitions", "2")["orders_monthly"]["windows"][0]["id"] == ids[0]
    res = _ok(cli("reconcile", "orders_monthly", "--window", ids[1], "--batch-partitions", "2", "--format", "json"))
    assert res.json()["windows"][0]["partitions"] == plan["windows"][1]["pending"]
    rest = _plan(cli, "--batch-partitions", "2")["orders_monthly"]
    assert [w["id"] for w in rest["windows"]] == [ids[0], ids[2]]  # ids stay stable as windows complete
    res = cli("reconcile", "orders_monthly", "--window", "000000000000", "--batch-partitions", "2")
    assert res.code == 3 and "not in the plan" in res.err, res.err
    res = cli_process("reconcile", "--workers", "2", "--batch-partitions", "1")
    assert res.code == 0, res.err
    assert len([line for line in res.out.splitlines() if line.startswith("window ")]) == 3 + 3  # one per window
    assert _rows(cli, "SELECT * FROM orders_monthly ORDER BY 1") == _oracle(cli, MONTHLY)
    assert _rows(cli, "SELECT * FROM orders_yearly ORDER BY 1") == _oracle(cli, YEARLY)
    assert all(p["pending_partitions"] == 0 for p in _plan(cli).values())


DAILY = {"name": "orders_per_day",  # orders_daily is partitioned by month: a day reads its month
         "projection": {"kind": "sql", "inputs": {"orders_daily": "day(day)"},
                        "query": "SELECT day, cents FROM orders_daily"},
         "partition": "day(day)"}
COUNTRIES = {"name": "customers_by_country",  # only `all` inputs: one window, every partition
             "projection": {"kind": "sql", "inputs": {"customers_current": "all"},
                            "query": "SELECT coalesce(country, '?') AS country, count(*) AS n "
                                     "FROM customers_current GROUP BY 1"},
             "partition": "identity(country)"}


def test_an_input_partitioned_coarser_than_its_expression(ws_path: Path, cli):
    _publish(cli, ws_path, FIRST)
    _define(ws_path, DAILY)
    _ok(cli("reconcile"))
    assert _rows(cli, "SELECT * FROM orders_per_day ORDER BY 1") == _oracle(cli, DAILY)
    _publish(cli, ws_path, [_order("F", 1, "2025-10-05", 1000)])
    pending = {p for w in _plan(cli)["orders_per_day"]["windows"] for p in w["pending"]}
    assert pending == {"2025-10-01", "2025-10-20", "2025-10-05"}  # the days of the month that moved
    _ok(cli("reconcile"))
    assert _rows(cli, "SELECT * FROM orders_per_day ORDER BY 1") == _oracle(cli, DAILY)


def test_only_all_inputs_make_one_window_and_the_janitor_keeps_it_current(shop: Path, cli):
    _define(shop, COUNTRIES)
    _ok(cli("reconcile"))
    query = f"SELECT * FROM ({COUNTRIES['projection']['query']}) ORDER BY 1"
    assert _rows(cli, "SELECT * FROM customers_by_country ORDER BY 1") == _rows(cli, query)
    _publish_to(cli, shop, "customers_current", "customers", [_customer("c3", "FR", version=2)], 3)
    plan = _plan(cli)["customers_by_country"]
    assert [w["pending"] for w in plan["windows"]] == [["*"]]
    _ok(cli("reconcile"))
    got = _rows(cli, "SELECT * FROM customers_by_country ORDER BY 1")
    assert got == _rows(cli, query) and "?" not in {r["country"] for r in got}  # its partition is gone
    report = _ok(cli("janitor", "--older-than", "0s", "--retain-last", "1", "--format", "json")).json()
    assert "customers_by_country" in json.dumps(report)
    assert all(p["pending_partitions"] == 0 for p in _plan(cli).values())
    assert _rows(cli, "SELECT * FROM customers_by_country ORDER BY 1") == _rows(cli, query)
    assert "nothing to do" in _ok(cli("reconcile")).out


def test_backfill_recomputes_two_partitions_and_touches_nothing_else(ws_path: Path, cli):
    _publish(cli, ws_path, FIRST)
    _define(ws_path, MONTHLY)
    _ok(cli("reconcile"))
    before = {s["snapshot_id"]: s for s in _snapshots(ws_path, "orders_monthly")}
    files_before = _files(ws_path, "orders_monthly")
    res = _ok(cli("backfill", "orders_monthly", "--from", "2025-09", "--to", "2025-10", "--format", "json"))
    assert [w["partitions"] for w in res.json()["windows"]] == [["2025-09", "2025-10"]]
    new = [s for i, s in _snapshots_by_id(ws_path, "orders_monthly").items() if i not in before]
    assert len(new) == 1 and sorted(json.loads(new[0]["lakepub.checksums"])) == ["2025-09", "2025-10"]
    files_after = _files(ws_path, "orders_monthly")
    assert {k: v for k, v in files_after.items() if k not in ("2025-09", "2025-10")} == \
        {k: v for k, v in files_before.items() if k not in ("2025-09", "2025-10")}
    assert files_after["2025-10"] != files_before["2025-10"]
    assert _rows(cli, "SELECT * FROM orders_monthly ORDER BY 1") == _oracle(cli, MONTHLY)
    res = cli("backfill", "orders_monthly", "--from", "2030-01", "--to", "2030-02")
    assert res.code == 3 and "no partition" in res.err


def _snapshots_by_id(ws_path: Path, name: str) -> dict:
    return {s["snapshot_id"]: s for s in _snapshots(ws_path, name)}


def _files(ws_path: Path, name: str) -> dict[str, list[str]]:
    from lakepub.store.layout import summary_id
    from lakepub.workspace import Workspace

    ws = Workspace.open(ws_path)
    table = ws.catalog.load_table(summary_id(ws.config.namespace, name))
    out: dict[str, list[str]] = {}
    for task in table.scan().plan_files():
        label = ws.config.derived[name].partition.label(task.file.partition[0])
        out.setdefault(label, []).append(task.file.file_path)
    ws.close()
    return out


class _Crash(Exception):
    pass


def test_offline_rebuild_is_invisible_until_the_swap_and_resumes_after_a_crash(ws_path: Path, cli):
    from lakepub.derive.reconcile import reconcile
    from lakepub.derive.state import Batching
    from lakepub.workspace import Workspace

    _publish(cli, ws_path, FIRST)
    _define(ws_path, MONTHLY, YEARLY)
    _ok(cli("reconcile"))
    old = _rows(cli, "SELECT * FROM orders_monthly ORDER BY 1")
    old_yearly = _rows(cli, "SELECT * FROM orders_yearly ORDER BY 1")
    # A new column: a new data version with other columns, built offline.
    changed = {**MONTHLY, "projection": {**MONTHLY["projection"], "query": MONTHLY["projection"]["query"].replace(
        "sum(orders) AS orders", "sum(orders) AS orders, max(day) AS last_day")}}
    _define(ws_path, changed)
    plans = _plan(cli)
    plan = plans["orders_monthly"]
    assert plan["change"] == "breaking" and plan["rebuild"].startswith("orders_monthly__rebuild_")
    # orders_yearly does not read the new column: same data version, no rebuild (column lineage).
    assert plans["orders_yearly"]["change"] == "untouched" and plans["orders_yearly"]["rebuild"] is None
    seen = []

    def reader(result) -> None:  # a reader between two windows of the rebuild sees the old version only
        seen.append(_rows(cli, "SELECT * FROM orders_monthly ORDER BY 1"))
        if len(seen) == 2:
            raise _Crash()

    with Workspace.open(ws_path) as ws, pytest.raises(_Crash):
        reconcile(ws, ["orders_monthly"], batching=Batching(partitions=1), on_window=reader)
    assert seen == [old, old]
    assert _rows(cli, "SELECT * FROM orders_yearly ORDER BY 1") == old_yearly
    plan = _plan(cli, "--batch-partitions", "1")["orders_monthly"]
    assert plan["pending_partitions"] == 2  # 2 of 4 windows were committed before the crash
    with Workspace.open(ws_path) as ws:
        done = reconcile(ws, batching=Batching(partitions=1))
    # The 2 remaining windows of the rebuild; then orders_yearly's 2 partitions in place: its
    # input partitions' checksums moved (they cover every column), its data version did not.
    assert sorted(r.dataset for r in done) == ["orders_monthly"] * 2 + ["orders_yearly"] * 2
    got = _rows(cli, "SELECT * FROM orders_monthly ORDER BY 1")
    assert got == _oracle(cli, changed) and "last_day" in got[0]
    assert _rows(cli, "SELECT * FROM orders_yearly ORDER BY 1") == _oracle(cli, YEARLY) == old_yearly
    assert all(p["pending_partitions"] == 0 and p["change"] == "untouched"
               for n, p in _plan(cli).items() if n != "orders_daily")
    tables = {t["identifier"]: t for t in _ok(cli("tables", "--format", "json")).json()}
    assert not any("__rebuild_" in t for t in tables)
    monthly = tables["lakepub.orders_monthly"]
    assert monthly["kind"] == "derived" and monthly["data_version"] == _plan(cli)["orders_monthly"]["current_version"]
    # The janitor cleans the swapped-in table (its folder is the rebuild's) without losing a row.
    _ok(cli("janitor", "--older-than", "0s", "--retain-last", "1"))
    assert _rows(cli, "SELECT * FROM orders_monthly ORDER BY 1") == _oracle(cli, changed)
    assert _plan(cli)["orders_monthly"]["pending_partitions"] == 0


def test_a_rebuild_with_lookback_completes_and_catches_up_with_new_input(ws_path: Path, cli):
    from lakepub.derive.reconcile import reconcile
    from lakepub.workspace import Workspace

    _publish(cli, ws_path, FIRST)
    _define(ws_path, {**MONTHLY, "lookback": 1})
    _ok(cli("reconcile"))
    changed = {**MONTHLY, "lookback": 1, "projection": {**MONTHLY["projection"], "query": MONTHLY["projection"][
        "query"].replace("sum(orders) AS orders", "sum(orders) AS orders, min(day) AS first_day")}}
    _define(ws_path, changed)
    published = []

    def late_data(result) -> None:  # new input lands while the first window of the rebuild commits
        if not published:
            published.append(1)
            _publish(cli, ws_path, [_order("Z", 1, "2025-11-20", 77)])

    with Workspace.open(ws_path) as ws:
        reconcile(ws, ["orders_monthly"], on_window=late_data)
    assert _rows(cli, "SELECT * FROM orders_monthly ORDER BY 1") == _oracle(cli, changed)
    plan = _plan(cli)["orders_monthly"]
    assert plan["change"] == "untouched" and plan["rebuild"] is None
    assert [w["why"] for w in plan["windows"]] == [{"2025-11": "lookback"}]


PER_COUNTRY = {"name": "plans_per_country",
               "projection": {"kind": "sql", "inputs": {"customers_mrr": "identity(country)"},
                              "query": "SELECT country, count(*) AS plans, sum(n) AS customers FROM customers_mrr "
                                       "GROUP BY country"},
               "partition": "identity(country)"}


def test_identity_partitions_with_a_null_partition_and_batch_days(shop: Path, cli):
    _define(shop, PER_COUNTRY)
    _publish_to(cli, shop, "customers_current", "customers", [_customer("c4", "FR", "basic")], 3)
    plan = _plan(cli)["plans_per_country"]
    assert sorted(p for w in plan["windows"] for p in w["pending"]) == ["DE", "FR", "null"], plan["blocked"]
    # Calendar windows: days 20362 (2025-10-01) and 20393 (2025-11-01) are both in span 328 of 62 days.
    windows = _plan(cli, "--batch-days", "62")["sales_by_country"]["windows"]
    assert [w["pending"] for w in windows] == [["2025-10", "2025-11"]]
    windows = _plan(cli, "--batch-days", "1")["sales_by_country"]["windows"]
    assert [w["pending"] for w in windows] == [["2025-10"], ["2025-11"]]
    _ok(cli("reconcile", "--batch-partitions", "1"))
    query = f"SELECT * FROM ({PER_COUNTRY['projection']['query']}) ORDER BY 1 NULLS LAST"
    assert _rows(cli, "SELECT * FROM plans_per_country ORDER BY 1 NULLS LAST") == _rows(cli, query)
    assert _rows(cli, "SELECT * FROM plans_per_country WHERE country IS NULL") == [
        {"country": None, "plans": 1, "customers": 1}]
    assert _plan(cli, "--batch-days", "7")["plans_per_country"]["pending_partitions"] == 0  # by partitions


def test_checked_queries_are_cached_and_a_changed_query_is_checked_again(ws_path: Path, cli):
    _define(ws_path, MONTHLY)
    _ok(cli("plan"))
    cached = json.loads((ws_path / ".lakepub" / "derive" / "queries.json").read_text())
    assert len(cached) == 1
    _define(ws_path, {**MONTHLY, "projection": {**MONTHLY["projection"], "query": "SELECT * FROM other"}})
    res = cli("status")  # every command loads the workspace: the new query is checked
    assert res.code == 2 and "'other', which is not listed" in res.err, res.err


def test_a_derived_query_runs_sandboxed(ws_path: Path, cli, tmp_path: Path):
    from dataclasses import replace

    from lakepub.derive.compute import WindowRefused, run_query
    from lakepub.derive.state import Context
    from lakepub.workspace import Workspace

    secret = tmp_path / "secret.txt"
    secret.write_text("s3cr3t")
    _publish(cli, ws_path, FIRST)
    _define(ws_path, {**MONTHLY, "projection": {**MONTHLY["projection"], "query":
                      "SELECT CAST(date_trunc('month', day) AS DATE) AS month, "
                      f"(SELECT max(content) FROM read_text('{secret}')) AS n FROM orders_daily GROUP BY 1"}})
    res = cli("reconcile")  # refused when the workspace loads: it reads a table function
    assert res.code == 2 and "projection.query" in res.err and "Traceback" not in res.err, res.err
    _define(ws_path, MONTHLY)
    with Workspace.open(ws_path) as ws:  # and were the check bypassed, DuckDB could not read the file
        ctx = Context(ws)
        spec = ctx.graph.derived["orders_monthly"]
        ctx.graph.derived["orders_monthly"] = replace(spec, query=spec.query.replace(
            "sum(orders) AS orders", f"(SELECT max(content) FROM read_text('{secret}')) AS orders"))
        with pytest.raises(WindowRefused) as refused:
            run_query(ctx, "orders_monthly", ["2025-10"])
    assert "s3cr3t" not in str(refused.value) and "Permission" in str(refused.value), str(refused.value)


def test_a_base_dataset_with_a_changed_definition_is_rebuilt_offline(shop: Path, cli):
    _ok(cli("reconcile"))
    by_plan = {**MRR, "projection": {**MRR["projection"], "group_by": ["country"]}}  # plan dropped
    _define(shop, by_plan)
    res = cli("publish", "customers_mrr", "--events", str(write_jsonl(shop / "c.jsonl", [_customer("c5", "DE")])),
              "--source", "customers", "--start", '{"p0":3}', "--end", '{"p0":4}')
    assert res.code == 2 and "group_by" in res.err, res.err  # refused as before: it needs a rebuild
    plan = _plan(cli)
    assert plan["customers_mrr"]["change"] == "breaking"
    before = _rows(cli, "SELECT * FROM customers_mrr ORDER BY 1 NULLS LAST, 2")
    res = _ok(cli("rebuild", "customers_mrr", "--format", "json"))
    assert res.json()["data_version"] == plan["customers_mrr"]["desired_version"]
    oracle = "SELECT country, count(*) AS n FROM customers_current GROUP BY 1 ORDER BY 1 NULLS LAST"
    assert _rows(cli, "SELECT * FROM customers_mrr ORDER BY 1 NULLS LAST") == _rows(cli, oracle) != before
    assert _plan(cli)["customers_mrr"]["change"] == "untouched"
    assert "nothing to rebuild" in _ok(cli("rebuild", "customers_mrr")).out
    # Maintained with its siblings from then on.
    _publish_to(cli, shop, "customers_current", "customers", [_customer("c5", "DE")], 3)
    assert _rows(cli, "SELECT * FROM customers_mrr ORDER BY 1 NULLS LAST") == _rows(cli, oracle)
    _ok(cli("verify", "customers_mrr", "--deep"))
    _ok(cli("janitor", "--older-than", "0s", "--retain-last", "1"))
    _publish_to(cli, shop, "customers_current", "customers", [_customer("c6", None)], 4)
    assert _rows(cli, "SELECT * FROM customers_mrr ORDER BY 1 NULLS LAST") == _rows(cli, oracle)
    _ok(cli("verify", "customers_mrr", "--deep"))
    res = cli("rebuild", "sales_by_country")
    assert res.code == 2 and "derived" in res.err
