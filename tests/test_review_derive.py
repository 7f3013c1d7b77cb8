"""Adversarial review of derived datasets (issue 14): each test pins one defect found and fixed.

The oracle is always the derived query run by DuckDB over the published upstreams
(``lakepub query``'s views): after ``reconcile`` exits 0 the derived table must equal it.
"""

from __future__ import annotations

from pathlib import Path

from test_derive import FIRST, MONTHLY, _customer, _define, _ok, _oracle, _plan, _publish, _publish_to, _rows, shop  # noqa: F401

RATES = {"name": "order_rates",  # only an `all` input: one window; a float identity partition
         "projection": {"kind": "sql", "inputs": {"orders_daily": "all"},
                        "query": "SELECT CAST(cents / 1000 AS FLOAT) AS rate, count(*) AS n FROM orders_daily "
                                 "GROUP BY 1"},
         "partition": "identity(rate)"}
RATES_COPY = {"name": "order_rates_copy",  # reads order_rates partition by partition (identity)
              "projection": {"kind": "sql", "inputs": {"order_rates": "identity(rate)"},
                             "query": "SELECT rate, n FROM order_rates"},
              "partition": "identity(rate)"}


def test_identity_partitions_of_a_float_read_their_rows(ws_path: Path, cli):
    # Iceberg labels the float 0.1 '0.10000000149011612' (its double value); the window filter
    # compared that with DuckDB's CAST(rate AS VARCHAR) '0.1': no row matched, every partition
    # was published empty and reconcile exited 0.
    _publish(cli, ws_path, FIRST)
    _define(ws_path, RATES, RATES_COPY)
    _ok(cli("reconcile"))
    assert _rows(cli, "SELECT * FROM order_rates ORDER BY 1") == _oracle(cli, RATES)
    got = _rows(cli, "SELECT * FROM order_rates_copy ORDER BY 1")
    assert len(got) == 5 and got == _oracle(cli, RATES_COPY)
    assert all(p["pending_partitions"] == 0 for p in _plan(cli).values())


def _foreign_append(ws_path: Path, name: str, rows: list[dict]) -> None:
    """Another tool (a pyiceberg script) appends rows to a published table."""
    import pyarrow as pa

    from lakepub.store.layout import summary_id
    from lakepub.workspace import Workspace

    with Workspace.open(ws_path) as ws:
        table = ws.catalog.load_table(summary_id(ws.config.namespace, name))
        schema = table.schema().as_arrow()
        table.append(pa.Table.from_pylist(rows, schema=schema))


def test_a_foreign_write_to_an_input_is_not_taken_for_current(ws_path: Path, cli):
    # The inputs' fingerprints come from lakepub's records only: rows another tool appended to
    # orders_daily changed no fingerprint, so reconcile said nothing to do (exit 0) while the
    # rollup no longer equalled its query over the published orders_daily.
    import datetime

    _publish(cli, ws_path, FIRST)
    _define(ws_path, MONTHLY)
    _ok(cli("reconcile"))
    _foreign_append(ws_path, "orders_daily", [{"day": datetime.date(2025, 10, 9), "cents": 5000, "orders": 1}])
    res = cli("reconcile")
    assert res.code == 3 and "'orders_daily'" in res.err and "outside lakepub" in res.err, res.err
    assert "rollback_to_snapshot" in res.err and "Traceback" not in res.err
    assert "outside lakepub" in _plan(cli)["orders_monthly"]["blocked"]


def test_a_foreign_write_to_a_derived_table_is_not_taken_for_current(ws_path: Path, cli):
    import datetime

    _publish(cli, ws_path, FIRST)
    _define(ws_path, MONTHLY)
    _ok(cli("reconcile"))
    _foreign_append(ws_path, "orders_monthly", [{"month": datetime.date(2025, 10, 1), "cents": 1, "orders": 1}])
    res = cli("reconcile")
    assert res.code == 3 and "'orders_monthly'" in res.err and "outside lakepub" in res.err, res.err


def test_a_comment_in_the_query_does_not_change_the_data_version(ws_path: Path, cli):
    # sqlglot keeps comments in the normalised SQL (and in the column lineage), so editing a
    # comment gave the dataset (and its downstreams) a new data version: a whole offline rebuild.
    _publish(cli, ws_path, FIRST)
    _define(ws_path, MONTHLY)
    _ok(cli("reconcile"))
    before = _plan(cli)["orders_monthly"]
    query = MONTHLY["projection"]["query"]
    commented = {**MONTHLY, "projection": {**MONTHLY["projection"], "query": "-- monthly totals\n" + query.replace(
        "sum(cents) AS cents", "sum(cents) /* in cents */ AS cents") + "  -- done\n"}}
    _define(ws_path, commented)
    after = _plan(cli)["orders_monthly"]
    assert after["desired_version"] == before["desired_version"] and after["change"] == "untouched", after
    # ... while a change inside a string literal is a change of meaning.
    literal = {**MONTHLY, "projection": {**MONTHLY["projection"], "query": query.replace(
        "'month'", "'month' ").replace("date_trunc(", "date_trunc(trim(").replace(", day)", "), day)")}}
    _define(ws_path, literal)
    assert _plan(cli)["orders_monthly"]["desired_version"] != before["desired_version"]


BY_COUNTRY_DIRECT = {"name": "customers_per_country",  # customers_current is partitioned by bucket(4, customer_id)
                     "projection": {"kind": "sql", "inputs": {"customers_current": "identity(country)"},
                                    "query": "SELECT country, count(*) AS n FROM customers_current GROUP BY country"},
                     "partition": "identity(country)"}


def test_the_null_partition_of_an_input_read_by_value(shop: Path, cli):
    # Candidates of an input not partitioned by the expression's column come from SELECT DISTINCT,
    # which dropped the null label: the customers without a country were never computed, and
    # reconcile exited 0 with the null partition missing.
    _define(shop, BY_COUNTRY_DIRECT)
    _ok(cli("reconcile"))
    query = f"SELECT * FROM ({BY_COUNTRY_DIRECT['projection']['query']}) ORDER BY 1 NULLS LAST"
    got = _rows(cli, "SELECT * FROM customers_per_country ORDER BY 1 NULLS LAST")
    assert got == _rows(cli, query) and got[-1]["country"] is None, got
    assert _plan(cli)["customers_per_country"]["pending_partitions"] == 0
    # The last customer without a country gets one: the null partition is recomputed empty.
    _publish_to(cli, shop, "customers_current", "customers", [_customer("c3", "FR", version=2)], 3)
    _ok(cli("reconcile"))
    got = _rows(cli, "SELECT * FROM customers_per_country ORDER BY 1 NULLS LAST")
    assert got == _rows(cli, query) and None not in {r["country"] for r in got}, got


def test_a_dataset_defined_after_the_janitor_expired_old_publishes(ws_path: Path, cli):
    from test_derive import _order

    _publish(cli, ws_path, FIRST)
    _publish(cli, ws_path, [_order("F", 1, "2025-10-05", 1000)])  # rewrites 2025-10 only
    _ok(cli("janitor", "--older-than", "0s", "--retain-last", "1"))
    _define(ws_path, MONTHLY)
    _ok(cli("reconcile"))
    assert _rows(cli, "SELECT * FROM orders_monthly ORDER BY 1") == _oracle(cli, MONTHLY)
    assert _plan(cli)["orders_monthly"]["pending_partitions"] == 0


def test_a_base_rebuild_swaps_in_only_the_table_it_audited(shop: Path, cli, monkeypatch):
    # swap_table reloaded the rebuild table by name: a second 'lakepub rebuild' of the dataset
    # that dropped and re-created it (its crashed-rebuild path) between the first one's audit and
    # swap had its new, still empty table swapped in: an empty dataset published with exit 0.
    import dataclasses

    import pytest

    from lakepub.derive.rebuild_base import rebuild_base
    from lakepub.errors import CommitContention
    from lakepub.ops.data_version import of_spec
    from lakepub.store import commit
    from lakepub.store.layout import summary_id
    from lakepub.store.published import ensure_published
    from lakepub.workspace import Workspace
    from test_derive import MRR

    _define(shop, {**MRR, "projection": {**MRR["projection"], "group_by": ["country"]}})
    before = _rows(cli, "SELECT * FROM customers_mrr ORDER BY 1 NULLS LAST, 2")
    real = commit.swap_table

    def racing_swap(catalog, published, expected, rebuilt, **kw):
        with Workspace.open(shop) as other:  # the other rebuild starts over: drops and re-creates
            spec = other.config.datasets["customers_mrr"]
            other.catalog.drop_table(rebuilt)
            ensure_published(other.catalog, other.config.namespace, dataclasses.replace(
                spec, name=rebuilt[-1]))
        return real(catalog, published, expected, rebuilt, **kw)

    monkeypatch.setattr(commit, "swap_table", racing_swap)
    with Workspace.open(shop) as ws, pytest.raises(CommitContention):
        rebuild_base(ws, "customers_mrr")
    assert _rows(cli, "SELECT * FROM customers_mrr ORDER BY 1 NULLS LAST, 2") == before
    monkeypatch.setattr(commit, "swap_table", real)
    _ok(cli("rebuild", "customers_mrr"))
    oracle = "SELECT country, count(*) AS n FROM customers_current GROUP BY 1 ORDER BY 1 NULLS LAST"
    assert _rows(cli, "SELECT * FROM customers_mrr ORDER BY 1 NULLS LAST") == _rows(cli, oracle)


IMPLICIT = {  # queries that read sales_daily.cents without naming it as a column
    "sales_columns": "SELECT day, COLUMNS('^cents$') FROM sales_daily",
    "sales_rows": "SELECT day, CAST(to_json(s) AS VARCHAR) AS row FROM sales_daily s",
}


def test_columns_read_implicitly_are_in_the_data_version(shop: Path, cli):
    # columns_read saw only the columns sqlglot's references name: COLUMNS('^cents$') or a whole
    # row (to_json(s)) read cents, yet a new version of sales_daily.cents left these datasets'
    # data versions alone (no rebuild; their old version vouching for rows of another meaning).
    from test_derive import SALES_DAILY

    _define(shop, *[{"name": n, "projection": {"kind": "sql", "inputs": {"sales_daily": "month(day)"}, "query": q},
                     "partition": "month(day)"} for n, q in IMPLICIT.items()])
    before = _plan(cli)
    _define(shop, {**SALES_DAILY, "projection": {**SALES_DAILY["projection"], "measures": {
        **SALES_DAILY["projection"]["measures"], "cents": "count()"}}})
    after = _plan(cli)
    assert after["sales_totals"]["desired_version"] != before["sales_totals"]["desired_version"]  # names cents
    for name in IMPLICIT:
        assert after[name]["desired_version"] != before[name]["desired_version"], name


def test_a_merge_on_read_dataset_rebuilt_then_published(shop: Path, cli):
    from test_derive import CUSTOMERS

    mor = {**CUSTOMERS, "write_mode": "merge-on-read"}
    _define(shop, mor)
    _publish_to(cli, shop, "customers_current", "customers", [_customer("c1", "ES", version=2),
                                                               _customer("c4", "IT")], 3)
    _define(shop, {**mor, "partition": "bucket(8, customer_id)"})
    _ok(cli("rebuild", "customers_current"))
    _ok(cli("verify", "customers_current", "--deep"))
    _publish_to(cli, shop, "customers_current", "customers", [_customer("c1", "PT", version=3),
                                                               _customer("c2", "NL", version=2)], 5)
    got = _rows(cli, "SELECT customer_id, country FROM customers_current ORDER BY 1")
    assert got == [{"customer_id": "c1", "country": "PT"}, {"customer_id": "c2", "country": "NL"},
                   {"customer_id": "c3", "country": None}, {"customer_id": "c4", "country": "IT"}], got
    _ok(cli("verify", "customers_current", "--deep"))
    _ok(cli("janitor", "--older-than", "0s", "--retain-last", "1"))
    _publish_to(cli, shop, "customers_current", "customers", [_customer("c4", "FR", version=2)], 7)
    assert _rows(cli, "SELECT country FROM customers_current WHERE customer_id = 'c4'") == [{"country": "FR"}]
    _ok(cli("verify", "customers_current", "--deep"))


def test_backfill_labels_of_another_grain_are_bad_input(ws_path: Path, cli):
    # '--from 2025-09-15 --to 2025-10-31' on a monthly dataset compared labels as strings:
    # 2025-09 < 2025-09-15, so September was silently left out (exit 0, one partition recomputed).
    _publish(cli, ws_path, FIRST)
    _define(ws_path, MONTHLY)
    _ok(cli("reconcile"))
    for first, last, option in (("2025-09-15", "2025-10", "--from"), ("2025-09", "2025-10-31", "--to"),
                                ("2025/09", "2025-10", "--from"), ("2025-13", "2025-10", "--from")):
        res = cli("backfill", "orders_monthly", "--from", first, "--to", last)
        assert res.code == 2 and option in res.err and "month" in res.err and "Traceback" not in res.err, res.err
    res = _ok(cli("backfill", "orders_monthly", "--from", "2025-09", "--to", "2025-10", "--format", "json"))
    assert [w["partitions"] for w in res.json()["windows"]] == [["2025-09", "2025-10"]]


def test_a_cte_name_does_not_open_a_file_outside_its_scope(ws_path: Path, cli):
    # check_query let through any table named like a CTE anywhere in the query; outside that
    # CTE's scope DuckDB reads such a name as a file (a replacement scan): every Parquet file of
    # orders_daily's folder, superseded ones included, not its published snapshot.
    from test_derive import _order

    _publish(cli, ws_path, FIRST)
    _publish(cli, ws_path, [_order("B", 2, "2025-10-01", 1)])  # supersedes October's file
    files = f"{ws_path}/.lakepub/warehouse/lakepub/orders_daily/data/**/*.parquet"
    escape = {**MONTHLY, "projection": {**MONTHLY["projection"], "query": (
        f"SELECT CAST(date_trunc('month', f.day) AS DATE) AS month, sum(f.cents) AS cents, "
        f"sum(f.orders) AS orders FROM (WITH \"{files}\" AS (SELECT 1 AS x) SELECT x FROM \"{files}\") q, "
        f"\"{files}\" f, orders_daily o WHERE o.day = f.day GROUP BY 1")}}
    _define(ws_path, escape)
    res = cli("reconcile")
    assert res.code == 2 and "projection.query" in res.err and "Traceback" not in res.err, res.err + res.out


def test_a_window_refused_in_a_worker_process_exits_3(ws_path: Path, cli, cli_process):
    _publish(cli, ws_path, FIRST)
    shifted = {**MONTHLY, "projection": {**MONTHLY["projection"], "query": MONTHLY["projection"]["query"].replace(
        "CAST(date_trunc('month', day) AS DATE)", "CAST(date_trunc('month', day) + INTERVAL 1 MONTH AS DATE)")}}
    _define(ws_path, shifted)
    res = cli_process("reconcile", "--workers", "2", "--batch-partitions", "1")
    assert res.code == 3 and "put rows in partition" in res.err and "Traceback" not in res.err, res.err


def test_retired_datasets_are_not_rebuilt_or_backfilled(shop: Path, cli):
    # rebuild_base swapped in a new table without the retirement record: a retired dataset came
    # back in query views and listings (exit 0); backfill and --window wrote into a retired
    # derived dataset, which reconcile and run skip.
    from test_derive import MRR

    _ok(cli("reconcile"))
    _ok(cli("retire", "customers_mrr"))
    _define(shop, {**MRR, "projection": {**MRR["projection"], "group_by": ["country"]}})
    res = cli("rebuild", "customers_mrr")
    assert res.code == 3 and "retired" in res.err and "restore" in res.err, res.err + res.out
    _ok(cli("retire", "sales_totals"))
    res = cli("backfill", "sales_totals", "--from", "2025-10", "--to", "2025-11")
    assert res.code == 3 and "retired" in res.err, res.err + res.out
    res = cli("reconcile", "sales_totals", "--window", "000000000000")
    assert res.code == 3 and "retired" in res.err, res.err + res.out


def test_a_window_under_an_old_data_version_is_not_written_into_a_swapped_table(ws_path: Path, cli):
    # A long reconcile that loaded the old definition kept committing its windows after another
    # one (the new definition) had rebuilt and swapped the table: old-version partitions landed in
    # the new-version table (same columns), a mixed table with exit 0.
    import pytest

    from lakepub.derive.compute import WindowRefused
    from lakepub.derive.reconcile import reconcile
    from lakepub.derive.state import Batching
    from lakepub.workspace import Workspace
    from test_derive import _order

    _publish(cli, ws_path, FIRST)
    _define(ws_path, MONTHLY)
    _ok(cli("reconcile"))
    _publish(cli, ws_path, [_order("F", 1, "2025-10-05", 1000), _order("G", 1, "2025-11-05", 3)])
    doubled = {**MONTHLY, "projection": {**MONTHLY["projection"], "query": MONTHLY["projection"]["query"].replace(
        "sum(cents) AS cents", "sum(cents) * 2 AS cents")}}

    def deploy(result) -> None:  # the new definition lands and is reconciled meanwhile
        _define(ws_path, doubled)
        _ok(cli("reconcile"))

    with Workspace.open(ws_path) as ws, pytest.raises(WindowRefused) as refused:
        reconcile(ws, ["orders_monthly"], batching=Batching(partitions=1), on_window=deploy)
    assert "data version" in str(refused.value)
    assert _rows(cli, "SELECT * FROM orders_monthly ORDER BY 1") == _oracle(cli, doubled)
    assert _plan(cli)["orders_monthly"]["pending_partitions"] == 0


def test_a_rebuild_window_after_the_swap_does_not_recreate_the_rebuild_table(ws_path: Path, cli):
    # A window planned into X__rebuild_<v> (a job runner's --window fan-out) that ran after
    # another process swapped that rebuild in re-created X__rebuild_<v>: a stray table in the
    # folder the published table now lives in (its files orphans to that table, for the janitor).
    import pytest

    from lakepub.derive.compute import WindowRefused, compute_window
    from lakepub.derive.state import Context, plan_dataset
    from lakepub.workspace import Workspace

    _publish(cli, ws_path, FIRST)
    _define(ws_path, MONTHLY)
    _ok(cli("reconcile"))
    changed = {**MONTHLY, "projection": {**MONTHLY["projection"], "query": MONTHLY["projection"]["query"].replace(
        "sum(cents) AS cents", "sum(cents) * 2 AS cents")}}
    _define(ws_path, changed)
    with Workspace.open(ws_path) as ws:
        ctx = Context(ws)
        plan = plan_dataset(ctx, "orders_monthly")
        assert plan.rebuild and plan.pending
        _ok(cli("reconcile"))  # another process builds and swaps it in meanwhile
        window = plan.pending[0]
        with pytest.raises(WindowRefused):
            compute_window(ctx, "orders_monthly", window.pending, window.id, into=plan.rebuild)
        tables = [t[-1] for t in ws.catalog.list_tables(ws.config.namespace)]
    assert not any("__rebuild_" in t for t in tables), tables
    assert _rows(cli, "SELECT * FROM orders_monthly ORDER BY 1") == _oracle(cli, changed)


def test_window_ids_stay_stable_when_a_window_empties_a_partition(ws_path: Path, cli):
    # A window that emptied a partition (its input rows deleted) took the label out of the plan,
    # so every later window got another id and a job runner's remaining '--window ID' were
    # refused (exit 3, 'not in the plan') though nothing had changed for them.
    from test_derive import _order

    _publish(cli, ws_path, FIRST)
    _define(ws_path, MONTHLY)
    _ok(cli("reconcile"))
    _publish(cli, ws_path, [_order("E", 2, "2024-12-31", 9, deleted=True), _order("G", 1, "2025-11-09", 5)])
    windows = _plan(cli, "--batch-partitions", "2")["orders_monthly"]["windows"]
    assert [w["pending"] for w in windows] == [["2024-12"], ["2025-11"]], windows
    for w in windows:  # a job runner fans them out
        _ok(cli("reconcile", "orders_monthly", "--window", w["id"], "--batch-partitions", "2"))
    assert _rows(cli, "SELECT * FROM orders_monthly ORDER BY 1") == _oracle(cli, MONTHLY)
    assert _plan(cli)["orders_monthly"]["pending_partitions"] == 0


def test_a_base_rebuild_that_lost_the_swap_leaves_no_rebuild_table(shop: Path, cli, monkeypatch):
    # A base rebuild is not resumable (the next one starts over), yet one that lost its swap (a
    # publish, or another rebuild that swapped first) left its X__rebuild_<v> table behind; after
    # another rebuild's swap that stray table sits in the folder the published table lives in.
    import pytest

    from lakepub.derive.rebuild_base import rebuild_base
    from lakepub.errors import CommitContention
    from lakepub.store import commit
    from lakepub.workspace import Workspace
    from test_derive import MRR

    _define(shop, {**MRR, "projection": {**MRR["projection"], "group_by": ["country"]}})
    real = commit.swap_table

    def publish_first(catalog, published, expected, rebuilt, **kw):  # the table moves meanwhile
        with catalog.load_table(published).transaction() as tx:
            tx.set_properties({"owner.note": "moved"})
        return real(catalog, published, expected, rebuilt, **kw)

    monkeypatch.setattr(commit, "swap_table", publish_first)
    with Workspace.open(shop) as ws:
        with pytest.raises(CommitContention):
            rebuild_base(ws, "customers_mrr")
        tables = [t[-1] for t in ws.catalog.list_tables(ws.config.namespace)]
    assert not any("__rebuild_" in t for t in tables), tables
