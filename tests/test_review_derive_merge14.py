"""Review of merge 5b46bc8 (issue 14 derived-build CPU): each test drives the change through the
CLI and compares the published rows, read back by DuckDB, with the query run directly over the
published upstreams (the oracle)."""

from __future__ import annotations

from pathlib import Path

from test_derive import _customer, _define, _ok, _plan, _publish_to, _rows, shop  # noqa: F401

BY_CUSTOMER = {"name": "sales_by_customer",  # customers_current is partitioned by bucket(4, customer_id)
               "projection": {"kind": "sql", "inputs": {"customers_current": "identity(customer_id)"},
                              "query": "SELECT customer_id, country, plan FROM customers_current"},
               "partition": "identity(customer_id)"}


def test_an_input_bucketed_otherwise_is_refused_or_read_whole(shop: Path, cli):
    """The author's suspicion: ``upstream_map`` compares only the kind, so an upstream
    ``bucket(4, c)`` and an input expression ``bucket(8, c)`` would map label by label (bucket 3
    of 8 reading bucket 3 of 4). Not reachable: a bucket input expression is refused when the
    workspace loads (exit 2, naming the file and key), and an identity expression over a
    bucketed upstream reads the upstream by value. ``upstream_map`` now also compares the bucket
    count, so the mapping stays right if bucket inputs are ever allowed."""
    from dataclasses import replace

    from lakepub.derive.model import InputSpec
    from lakepub.derive.state import Context, upstream_map
    from lakepub.projection.partitioning import PartitionBy
    from lakepub.workspace import Workspace

    bucketed = {**BY_CUSTOMER, "projection": {**BY_CUSTOMER["projection"],
                                              "inputs": {"customers_current": "bucket(8, customer_id)"}},
                "partition": "bucket(8, customer_id)"}
    _define(shop, bucketed)
    res = cli("reconcile", "--format", "json")
    assert res.code == 2 and "Traceback" not in res.err, res.out + res.err
    assert res.json()["key"] == "projection.inputs.customers_current", res.json()
    _define(shop, BY_CUSTOMER)
    _ok(cli("reconcile"))
    oracle = f"SELECT * FROM ({BY_CUSTOMER['projection']['query']}) ORDER BY 1"
    assert _rows(cli, "SELECT * FROM sales_by_customer ORDER BY 1") == _rows(cli, oracle)
    _publish_to(cli, shop, "customers_current", "customers", [_customer("c2", "IT", version=2),
                                                               _customer("c9", "PT")], 3)
    _ok(cli("reconcile"))
    got = _rows(cli, "SELECT * FROM sales_by_customer ORDER BY 1")
    assert got == _rows(cli, oracle) and {r["customer_id"] for r in got} == {"c1", "c2", "c3", "c9"}, got
    assert _plan(cli)["sales_by_customer"]["pending_partitions"] == 0
    with Workspace.open(shop) as ws:
        ctx = Context(ws)
        spec = ctx.graph.derived["sales_by_customer"]
        assert upstream_map(ctx, spec, "customers_current") is None  # identity over bucket: by value
        for n, want in [(8, None), (4, "same")]:
            expr = PartitionBy("bucket", "customer_id", n)
            other = replace(spec, inputs={"customers_current": InputSpec("customers_current", expr)})
            assert upstream_map(ctx, other, "customers_current") == want, n


def test_the_rebuild_audit_reads_the_manifests_the_swap_publishes(cli, ws_path, monkeypatch):
    """The offline rebuild's audit is the check that the table swapped in holds the rows its
    records vouch for. It took the rebuild's files from the entries this process remembered
    writing (``live_files``), not from the manifests on disk: a manifest whose bytes lack a file
    the window wrote (a writer fault, e.g. the one-block Avro encoding over pyiceberg's private
    writer after an upgrade) passed the audit, was swapped in, and reconcile exited 0 with a day
    missing from the published table. The audit must refuse it (nothing swapped)."""
    from test_derive import FIRST, _publish
    from test_derive_perf import DAILY

    from lakepub.store import write

    _publish(cli, ws_path, FIRST)
    _define(ws_path, DAILY)
    _ok(cli("reconcile"))
    before = _rows(cli, "SELECT * FROM orders_by_day ORDER BY 1")
    assert len(before) == 5
    original = write.add_in_one_block
    monkeypatch.setattr(write, "add_in_one_block", lambda writer, entries: original(writer, entries[:-1]))
    changed = {**DAILY, "projection": {**DAILY["projection"], "query": DAILY["projection"]["query"].replace(
        "count(*) AS n", "count(*) + 1 AS n")}}
    _define(ws_path, changed)
    res = cli("reconcile", "orders_by_day")
    monkeypatch.setattr(write, "add_in_one_block", original)
    got = _rows(cli, "SELECT * FROM orders_by_day ORDER BY 1")
    assert res.code != 0 and "audit" in res.err, (res.code, res.err, got)
    assert got == before  # the published table was not touched


def test_a_folder_decoded_to_another_window_label_is_refused(tmp_path, monkeypatch):
    """A file's partition is now its folder's value, decoded. If the decoding and DuckDB's
    encoding ever disagree (a DuckDB that leaves ``%`` as is: folder ``%41`` decodes to ``A``),
    the files of partition ``%41`` were entered as partition ``A``: a partition without files and
    one with another's rows, committed. Each window label must get its files and the files must
    hold the window's rows, else nothing is committed."""
    from urllib.parse import unquote

    import pyarrow as pa
    import pytest
    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.schema import Schema
    from pyiceberg.types import NestedField

    from lakepub.derive.output import group
    from lakepub.errors import BlockedError
    from lakepub.projection.partitioning import PartitionBy, iceberg_type
    from lakepub.store import duck_files

    rows = pa.table({"s": pa.array(["%41", "A", "b"], pa.string()), "n": pa.array([1, 2, 3], pa.int64())})
    catalog = SqlCatalog("t", uri=f"sqlite:///{tmp_path}/c.db", warehouse=f"file://{tmp_path}/wh")
    catalog.create_namespace("ns")
    schema = Schema(*[NestedField(i, f.name, iceberg_type(f.type), required=False)
                      for i, f in enumerate(rows.schema, start=1)])
    partition = PartitionBy.parse("identity(s)", "test")
    table = catalog.create_table("ns.t", schema=schema, partition_spec=partition.iceberg_spec(schema))
    g = group(rows, partition)
    original = duck_files._folder_label
    monkeypatch.setattr(duck_files, "_folder_label", lambda field, relative: unquote(original(field, relative)))
    with pytest.raises(BlockedError, match="partition"):
        duck_files.write_partitions(table.metadata, g.rows, g.index, g.values, g.labels)


DAYS_DAILY = {"name": "order_days_daily",  # a daily output over the monthly order_days: labels from its rows
              "projection": {"kind": "sql", "inputs": {"order_days": "day(day)"},
                             "query": "SELECT day, sum(orders) AS orders FROM order_days GROUP BY 1"},
              "partition": "day(day)"}


def test_remembered_input_labels_follow_an_input_rebuilt_and_swapped(cli, ws_path):
    """The input's distinct labels are remembered per (table uuid, snapshot): an input rebuilt
    offline and swapped in (another table, fewer days) is scanned again, in this process and in a
    new one (the on-disk file of the old table is not taken for the new), and the daily output
    drops the day the input lost."""
    from test_derive import DAYS_ONLY, FIRST, _publish

    from lakepub.derive import labels

    _publish(cli, ws_path, FIRST)
    _define(ws_path, DAYS_ONLY, DAYS_DAILY)
    _ok(cli("reconcile"))
    oracle = f"SELECT * FROM ({DAYS_DAILY['projection']['query']}) ORDER BY 1"
    assert _rows(cli, "SELECT * FROM order_days_daily ORDER BY 1") == _rows(cli, oracle)
    assert len(_rows(cli, oracle)) == 5
    fewer = {**DAYS_ONLY, "projection": {**DAYS_ONLY["projection"], "query": DAYS_ONLY["projection"]["query"]
                                         + " AND day >= DATE '2025-01-01'"}}
    _define(ws_path, fewer)
    _ok(cli("reconcile"))
    got = _rows(cli, "SELECT * FROM order_days_daily ORDER BY 1")
    assert got == _rows(cli, oracle) and len(got) == 4, got
    labels.clear_memo()  # a new process: the files of both tables are on disk
    assert "nothing to do" in _ok(cli("reconcile")).out
    assert _plan(cli)["order_days_daily"]["pending_partitions"] == 0
