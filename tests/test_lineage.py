"""`lakepub explain` and `lakepub diff` through the CLI, on a generated order stream with
corrections that move orders between days and months, exact duplicates, late versions and
deletes, published batch by batch into two datasets of one entity (an aggregate and a
current-state table, both month(day)).

explain is checked against an oracle that replays the landing events batch by batch (each
batch's events are read back from the landing folder by the source positions `lakepub log`
reports), and diff against the two snapshots read directly with DuckDB."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest
import yaml

from lakepub import duck
from lakepub.generate import generate_stream, partition_dirs, read_partition
from lakepub.store.layout import summary_id
from lakepub.workspace import Workspace
from tests.conftest import write_jsonl

CURRENT = {"name": "orders_current", "source": "orders", "contract": "contracts/orders@v1.0",
           "entity": "orders_daily", "projection": {"kind": "current", "columns": ["order_id", "day", "cents"]},
           "partition": "month(day)"}


def _month(day: str) -> str:
    return day[:7]


def _contribution(dataset: str, event: dict | None):
    """What a live order state puts into the dataset (None when not live): partition, group, values."""
    if event is None or event["deleted"]:
        return None
    if dataset == "orders_daily":
        return _month(event["day"]), (event["day"],), (event["cents"], 1)
    return _month(event["day"]), (event["order_id"],), (event["day"], event["cents"])


def oracle(batches: list[tuple[str, list[dict]]], dataset: str, partition: str, group: str | None = None):
    """{batch_id: {(order_id, version)}} of the events that moved the partition (and group):
    per order the highest version wins, only a higher version changes it, tombstones hold."""
    state: dict[str, dict] = {}
    out: dict[str, set] = {}
    for batch_id, events in batches:
        top: dict[str, dict] = {}
        for e in events:
            if e["order_id"] not in top or e["version"] > top[e["order_id"]]["version"]:
                top[e["order_id"]] = e
        for oid, e in top.items():
            before = state.get(oid)
            if before is not None and e["version"] <= before["version"]:
                continue
            old, new = _contribution(dataset, before), _contribution(dataset, e)
            state[oid] = e
            inside = [c for c in (old, new) if c is not None and c[0] == partition
                      and (group is None or c[1][0] == group)]
            if old != new and inside:
                out.setdefault(batch_id, set()).add((oid, e["version"]))
    return out


def landed_batches(ws_path: Path, cli) -> list[tuple[str, list[dict]]]:
    """(batch id, events) of every publish, oldest first, read back from the landing folder by
    the source positions the log reports."""
    parts = {p.name: list(read_partition(p)) for p in partition_dirs(ws_path / "landing" / "orders")}
    log = cli("log", "orders_daily", "--format", "json").json()
    out = []
    for entry in reversed(log):
        if entry["source"] != "orders":
            continue
        events = [e for name, end in entry["end"].items() for e in parts[name][entry["start"].get(name, 0):end]]
        out.append((entry["batch_id"], events))
    return out


def explained(cli, dataset: str, partition: str, group: str | None = None) -> dict[str, set]:
    args = ["explain", dataset, "--partition", partition, "--format", "json"] + (["--group", group] if group else [])
    res = cli(*args)
    assert res.code == 0, res.err
    out: dict[str, set] = {}
    for change in res.json()["changes"]:
        if change["events"]:
            out[change["batch_id"]] = {(e["key"]["order_id"], e["version"]) for e in change["events"]}
    return out


@pytest.fixture
def stream_ws(ws_path: Path, cli):
    (ws_path / "catalog" / "datasets" / "orders_current.yaml").write_text(yaml.safe_dump(CURRENT, sort_keys=False))
    stats = generate_stream(ws_path / "landing" / "orders", events=2400, partitions=2, days=75, seed=5,
                            segment_size=300)
    assert stats.corrections and stats.duplicates and stats.deletes and stats.late_versions
    res = cli("run", "orders_daily", "--max-batch", "500")
    assert res.code == 0, res.err
    return ws_path


def _months(batches) -> list[str]:
    return sorted({_month(e["day"]) for _, events in batches for e in events if e["day"]})


def test_explain_names_exactly_the_events_that_moved_each_partition(stream_ws: Path, cli):
    batches = landed_batches(stream_ws, cli)
    assert len(batches) >= 5
    months = _months(batches)
    assert len(months) >= 3
    moved_between_months = 0
    for dataset in ("orders_daily", "orders_current"):
        for month in months:
            want = oracle(batches, dataset, month)
            assert explained(cli, dataset, month) == want, (dataset, month)
        # one day of one month: the group filter
    day = sorted({e["day"] for _, events in batches for e in events if e["day"]})[10]
    assert explained(cli, "orders_daily", _month(day), day) == oracle(batches, "orders_daily", _month(day), day)
    # old -> new of an event that moved an order out of the month: both sides named, with the measures
    res = cli("explain", "orders_daily", "--partition", months[0], "--format", "json").json()
    assert res["publishes_retained"] == len(batches) and res["versions_without_publish"] == 0 and not res["notes"]
    for change in res["changes"]:
        assert change["rewrote_partition"] and change["source"] == "orders" and change["end"]
        for e in change["events"]:
            old, new = e["old"], e["new"]
            if old and new and old["partition"] != new["partition"]:
                moved_between_months += 1
                assert old["measures"]["orders"] == 1 and new["group"]["day"][:7] == new["partition"]
            if e["deleted"]:
                assert new is None and old["partition"] == months[0]
    assert moved_between_months, "the stream should move orders between months"
    text = cli("explain", "orders_daily", "--partition", months[0])
    assert text.code == 0 and "publish(es) changed it" in text.out and "delete" in text.out
    newest = cli("explain", "orders_daily", "--partition", months[0], "--limit", "1", "--format", "json").json()
    assert newest["changes"] == res["changes"][:1] and newest["changes_total"] == len(res["changes"]) > 1


def test_explain_refuses_an_unknown_partition_and_group(stream_ws: Path, cli):
    res = cli("explain", "orders_daily", "--partition", "1999-01")
    assert res.code == 2 and "--partition" in res.err and "1999-01" in res.err, res.err
    res = cli("explain", "orders_daily", "--partition", "2025-01", "--group", "country=DE")
    assert res.code == 2 and "--group" in res.err, res.err
    res = cli("explain", "orders_daily", "--partition", "2025-01", "--group", "2024-12-31")
    assert res.code == 2 and "--group" in res.err and "2024-12-31" in res.err, res.err
    res = cli("explain", "nope", "--partition", "2025-01")
    assert res.code == 2 and "unknown dataset" in res.err


def test_explain_after_compaction_and_janitor(stream_ws: Path, cli):
    batches = landed_batches(stream_ws, cli)
    month = _months(batches)[0]
    before = explained(cli, "orders_daily", month)
    assert cli("compact", "orders_daily").code == 0
    # the base ledger snapshot is retained: the same events, and a note saying what was compacted
    res = cli("explain", "orders_daily", "--partition", month, "--format", "json").json()
    assert {c["batch_id"]: {(e["key"]["order_id"], e["version"]) for e in c["events"]}
            for c in res["changes"] if c["events"]} == before
    assert len(res["compactions"]) == 1 and res["compactions"][0]["base_retained"]
    ws = Workspace.open(stream_ws)
    table = ws.catalog.load_table(summary_id(ws.config.namespace, "orders_daily"))
    log = cli("log", "orders_daily", "--format", "json").json()
    assert log[0]["source"] == "(compaction)"
    named = table.snapshot_by_id(log[1]["snapshot_id"]).summary.additional_properties["lakepub.ledger-snapshot"]
    assert res["compactions"][0]["base"] == int(named)
    assert any("compacted on" in n for n in res["notes"])
    # a correction after compaction moves one order out of the month into another
    live = {r["order_id"]: r for r in ws.query("SELECT * FROM orders_current").to_pylist()}
    target = next(oid for oid, r in live.items() if r["day"].isoformat()[:7] == month)
    new_day = f"{int(month[:4]) + 1}-{month[5:]}-03"
    path = write_jsonl(stream_ws / "fix.jsonl", [{"order_id": target, "version": 99, "day": new_day, "cents": 5,
                                                  "deleted": False}])
    assert cli("publish", "orders_daily", "--events", str(path), "--source", "fixes", "--start", "{}",
               "--end", '{"p0": 1}').code == 0
    assert cli("janitor", "--older-than", "0s", "--retain-last", "1").code == 0
    res = cli("explain", "orders_daily", "--partition", month, "--format", "json").json()
    newest = res["changes"][0]
    assert newest["source"] == "fixes" and [(e["key"]["order_id"], e["version"]) for e in newest["events"]] == \
        [(target, 99)]
    assert newest["events"][0]["old"]["partition"] == month and newest["events"][0]["new"]["partition"] == new_day[:7]
    assert not res["compactions"][0]["base_retained"]
    assert any("expired" in n for n in res["notes"])
    # the other month got the order: explain there names the same event
    assert explained(cli, "orders_daily", new_day[:7]) == {newest["batch_id"]: {(target, 99)}}


def _snapshot(con, ws: Workspace, dataset: str, snapshot_id: int, group: list[str]) -> dict:
    table = ws.catalog.load_table(summary_id(ws.config.namespace, dataset))
    rows = con.execute(f"SELECT * FROM {duck.scan_sql(table.metadata_location, snapshot_id)}").to_arrow_table()
    out = {}
    for r in rows.to_pylist():
        key = tuple(json.loads(json.dumps(r[g], default=str)) for g in group)
        out[key] = {k: json.loads(json.dumps(v, default=str)) for k, v in r.items() if k not in group}
    return out


@pytest.mark.parametrize("dataset,group", [("orders_daily", ["day"]), ("orders_current", ["order_id"])])
def test_diff_between_two_snapshots_matches_duckdb(stream_ws: Path, cli, dataset: str, group: list[str]):
    log = cli("log", dataset, "--format", "json").json()
    a, b = log[3]["snapshot_id"], log[0]["snapshot_id"]
    res = cli("diff", dataset, str(a), log[0]["batch_id"][:12], "--format", "json")
    assert res.code == 0, res.err
    got = res.json()
    ws = Workspace.open(stream_ws)
    con = duck.connect(ws.config.catalog)
    try:
        old, new = _snapshot(con, ws, dataset, a, group), _snapshot(con, ws, dataset, b, group)
    finally:
        con.close()
    want = {}
    for key in set(old) | set(new):
        if old.get(key) != new.get(key):
            want[key] = ("added" if key not in old else "removed" if key not in new else "changed",
                         old.get(key), new.get(key))
    have = {tuple(json.loads(json.dumps(g["group"][c], default=str)) for c in group):
            (g["status"], g["a"], g["b"]) for g in got["groups"]}
    assert have == want and want
    assert got["a"]["snapshot_id"] == a and got["b"]["snapshot_id"] == b
    if dataset == "orders_daily":
        for g in got["groups"]:
            assert g["delta"]["cents"] == (g["b"] or {}).get("cents", 0) - (g["a"] or {}).get("cents", 0)
        months = {}
        for key in set(old) | set(new):
            d = months.setdefault(key[0][:7], [0, 0])
            d[0] += new.get(key, {}).get("cents", 0) - old.get(key, {}).get("cents", 0)
        for p in got["partitions"]:
            assert p["delta"]["cents"] == months[p["partition"]][0]
    else:
        moved = [g for g in got["groups"] if "old_partition" in g]
        for g in moved:
            assert g["a"]["day"][:7] == g["old_partition"] and g["b"]["day"][:7] == g["partition"]
    text = cli("diff", dataset, str(a), "current")
    assert text.code == 0 and f"snapshot {a} -> {b}" in text.out
    same = cli("diff", dataset, str(b), "current", "--format", "json").json()
    assert same["groups"] == [] and same["partitions"] == []
    bad = cli("diff", dataset, "12345", "current")
    assert bad.code == 2 and "SNAPSHOT_A" in bad.err and "12345" in bad.err


def test_explain_and_diff_for_composite_groups_null_partitions_buckets_and_builds(ws_path: Path, cli):
    """customers (tests/test_any_dataset.py): an aggregate by (country, plan) partitioned by
    identity(country) (a null country is partition "null"), a current-state table in
    bucket(8, customer_id), and a dataset added later (built from the ledger)."""
    from lakepub.projection.partitioning import PartitionBy
    from tests.test_any_dataset import BY_PLAN, CURRENT as CUSTOMERS_CURRENT, MRR, STREAM_1, STREAM_2, _land, _setup

    landing = _setup(ws_path, MRR, CUSTOMERS_CURRENT)
    _land(landing, "00000.jsonl", STREAM_1)
    assert cli("run", "customers_mrr").code == 0
    _land(landing, "00001.jsonl", STREAM_2)
    assert cli("run", "customers_mrr").code == 0
    log = cli("log", "customers_mrr", "--format", "json").json()
    second, first = log[0]["batch_id"], log[1]["batch_id"]

    def events(*args: str) -> dict[str, set]:
        res = cli("explain", *args, "--format", "json")
        assert res.code == 0, res.err
        return {c["batch_id"]: {(e["key"]["customer_id"], e["version"]) for e in c["events"]}
                for c in res.json()["changes"]}

    assert events("customers_mrr", "--partition", "DE") == {second: {("c1", 2), ("c6", 1)}, first: {("c2", 1)}}
    assert events("customers_mrr", "--partition", "DE", "--group", "country=DE,plan=pro") == \
        {second: {("c1", 2), ("c6", 1)}}
    assert events("customers_mrr", "--partition", "null") == {second: {("c3", 3)}, first: {("c3", 1)}}
    assert events("customers_mrr", "--partition", "US") == {second: {("c3", 3), ("c5", 2)}, first: {("c5", 1)}}
    res = cli("explain", "customers_mrr", "--partition", "US", "--format", "json").json()
    c5 = next(e for e in res["changes"][0]["events"] if e["key"]["customer_id"] == "c5")
    assert c5["deleted"] and c5["new"] is None and c5["old"] == {
        "partition": "US", "group": {"country": "US", "plan": "pro"}, "measures": {"mrr_cents": 5000, "customers": 1}}
    bucket = PartitionBy.parse("bucket(8, customer_id)", "test")
    label = bucket.labels(pa.table({"customer_id": ["c1"]}))[0]
    assert events("customers_current", "--partition", label, "--group", "c1") == {second: {("c1", 2)}, first: {("c1", 1)}}
    # a dataset added later is built from the ledger: explain names the build, not the batches before it
    (ws_path / "catalog" / "datasets" / "customers_by_plan.yaml").write_text(yaml.safe_dump(BY_PLAN, sort_keys=False))
    assert cli("run", "customers_by_plan").code == 0
    res = cli("explain", "customers_by_plan", "--partition", "all", "--format", "json").json()
    assert [c["kind"] for c in res["changes"]] == ["build"] and "built from the ledger" in res["changes"][0]["note"]
    assert res["versions_without_publish"] > 0
    # diff of the aggregate from the first publish to now, by (country, plan), null groups included
    got = cli("diff", "customers_mrr", str(log[1]["snapshot_id"]), "current", "--format", "json").json()
    status = {(g["group"]["country"], g["group"]["plan"]): g["status"] for g in got["groups"]}
    assert status == {("FR", "pro"): "removed", ("DE", "pro"): "added", (None, "pro"): "removed",
                      ("US", "pro"): "removed", ("US", "basic"): "added"}
    parts = {p["partition"]: (p["status"], p["rows_a"], p["rows_b"]) for p in got["partitions"]}
    assert parts == {"FR": ("changed", 2, 1), "DE": ("changed", 1, 2), "null": ("removed", 1, 0),
                     "US": ("changed", 1, 1)}
    delta = {p["partition"]: p["delta"] for p in got["partitions"]}
    assert delta["DE"] == {"mrr_cents": 1200 + 50, "customers": 2} and delta["null"] == {"mrr_cents": -700, "customers": -1}
