"""``lakepub metrics`` (and ``tables``, ``catalog-config``) through the CLI, checked against the
published tables and counts known from the events.

One orders workspace with a correction, a delete, a duplicate, a late older version, a refused
payload conflict and a refused stale start, a lost commit race, and a landing folder ahead of the
published position; the metrics are parsed with prometheus_client's own parser and compared with
DuckDB reads of the published snapshot (``lakepub query``), the Iceberg metadata and the counts
the events imply. The customers example covers the other dataset kinds (aggregate + current).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from conftest import write_jsonl
from lakepub.ops import data_version, metrics as ops_metrics
from lakepub.ops.catalog_config import REDACTED, redact
from lakepub.workspace import Workspace


def _ev(oid: str, version: int, day: str | None, cents: int | None, deleted: bool = False) -> dict:
    return {"order_id": oid, "version": version, "day": day, "cents": cents, "deleted": deleted}


BATCH_1 = [_ev("A", 1, "2025-10-01", 100), _ev("A", 2, "2025-11-02", 150),  # a correction moving month
           _ev("B", 1, "2025-10-01", 70), _ev("D", 2, "2025-10-05", 40)]
BATCH_2 = [_ev("B", 2, None, None, True),  # a delete
           _ev("A", 1, "2025-10-01", 100),  # a duplicate
           _ev("C", 1, "2025-11-03", 30),
           _ev("D", 1, "2025-10-04", 999)]  # a late older version (stale)
# events 8, duplicates 1, stale 1, superseded 1 (A1 under A2 in batch 1), deletes 1, changed 3 + 2
KNOWN = {"events": 8, "duplicates": 1, "stale_versions": 1, "superseded_versions": 1, "deletes": 1,
         "entities_changed": 5, "new_versions": 7}
PENDING = [_ev("E", 1, "2025-12-01", 5), _ev("F", 1, "2025-12-02", 6)]


def families(text: str) -> dict[str, dict[tuple, float]]:
    """{sample name: {sorted label items: value}}, parsed by prometheus_client."""
    out: dict[str, dict[tuple, float]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return out


def one(fams: dict, name: str, **labels) -> float:
    return fams[name][tuple(sorted(labels.items()))]


def _ok(res):
    assert res.code == 0, res.err
    return res


@pytest.fixture
def busy(ws_path: Path, cli, monkeypatch) -> Path:
    """The orders workspace described in the module docstring."""
    _ok(cli("publish", "orders_daily", "--events", str(write_jsonl(ws_path / "b1.jsonl", BATCH_1)),
            "--start", '{"p0":0}', "--end", '{"p0":4}'))
    # The second publish loses one commit race (a concurrent writer moved the tables): it retries.
    from lakepub.publish import publisher as publisher_module
    from lakepub.store.commit import CommitConflict

    real, calls = publisher_module.commit_atomically, []

    def racing(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            raise CommitConflict("simulated lost race")
        return real(*args, **kwargs)

    monkeypatch.setattr(publisher_module, "commit_atomically", racing)
    _ok(cli("publish", "orders_daily", "--events", str(write_jsonl(ws_path / "b2.jsonl", BATCH_2)),
            "--start", '{"p0":4}', "--end", '{"p0":8}'))
    monkeypatch.setattr(publisher_module, "commit_atomically", real)
    assert len(calls) == 2
    conflict = write_jsonl(ws_path / "c.jsonl", [_ev("A", 2, "2025-11-02", 151)])
    assert cli("publish", "orders_daily", "--events", str(conflict), "--start", '{"p0":8}', "--end", '{"p0":9}').code == 3
    stale = write_jsonl(ws_path / "s.jsonl", [_ev("Z", 1, "2025-10-01", 1)])
    assert cli("publish", "orders_daily", "--events", str(stale), "--start", '{"p0":1}', "--end", '{"p0":2}').code == 3
    # Landing: p0 holds the 8 published records and 2 more in an older segment; p1 was never published.
    land = ws_path / "landing" / "orders"
    write_jsonl((land / "p0").mkdir(parents=True) or land / "p0" / "00000.jsonl", BATCH_1 + BATCH_2)
    old = write_jsonl(land / "p0" / "00001.jsonl", PENDING)
    os.utime(old, (time.time() - 7200, time.time() - 7200))
    write_jsonl((land / "p1").mkdir() or land / "p1" / "00000.jsonl", [_ev("G", 1, "2025-12-03", 7)] * 3)
    return ws_path


def test_metrics_match_the_published_tables_and_the_known_counts(busy: Path, cli):
    res = _ok(cli("metrics"))
    fams = families(res.out)
    d = {"dataset": "orders_daily"}
    # Published snapshot and data version: the ones `status` and `tables` show.
    [status] = _ok(cli("status", "orders_daily", "--format", "json")).json()
    [info_labels] = fams["lakepub_published_info"]
    info = dict(info_labels)
    assert info["snapshot_id"] == str(status["snapshot_id"])
    tables = {t["identifier"]: t for t in _ok(cli("tables", "--format", "json")).json()}
    assert info["data_version"] == tables["lakepub.orders_daily"]["data_version"]
    assert info["data_version"].startswith("sha256:") and info["kind"] == "aggregate"
    assert fams["lakepub_published_info"][info_labels] == 1
    # Rows and partitions: read back from the published snapshot by DuckDB and from Iceberg metadata.
    [q] = _ok(cli("query", "SELECT count(*) AS n, count(DISTINCT date_trunc('month', day)) AS m FROM orders_daily",
                  "--format", "json")).json()
    assert one(fams, "lakepub_rows", **d) == q["n"] == 3  # A on 11-02, C on 11-03, D on 10-05; B deleted
    ws = Workspace.open(busy)
    live_partitions = ws.catalog.load_table("lakepub.orders_daily").inspect.partitions().num_rows
    assert one(fams, "lakepub_partitions", **d) == q["m"] == live_partitions == 2
    # Totals of the counts, as the events imply them.
    for name, value in KNOWN.items():
        assert one(fams, f"lakepub_{name}_total", **d) == value, name
    assert one(fams, "lakepub_conflicts_total", **d) == 1
    assert one(fams, "lakepub_stale_starts_total", **d) == 1
    assert one(fams, "lakepub_quality_rejects_total", **d) == 0
    # Positions and lag per source partition.
    assert one(fams, "lakepub_source_position_records", dataset="orders_daily", source="orders", partition="p0") == 8
    assert one(fams, "lakepub_source_position_records", dataset="orders_daily", source="orders", partition="p1") == 0
    p0 = {"dataset": "orders_daily", "source": "orders", "partition": "p0"}
    p1 = {**p0, "partition": "p1"}
    assert one(fams, "lakepub_landing_records", **p0) == 10 and one(fams, "lakepub_lag_records", **p0) == 2
    assert one(fams, "lakepub_landing_records", **p1) == 3 and one(fams, "lakepub_lag_records", **p1) == 3
    assert 7200 <= one(fams, "lakepub_lag_oldest_unprocessed_age_seconds", **p0) < 7200 + 120
    assert 0 <= one(fams, "lakepub_lag_oldest_unprocessed_age_seconds", **p1) < 120  # written just now
    # The last publish: its duration (the lost race's backoff of >= 50 ms included) and its one retry,
    # recorded on its snapshot: its timestamp minus the recorded start of the publish call.
    duration = one(fams, "lakepub_last_publish_duration_seconds", **d)
    head = ws.catalog.load_table("lakepub.orders_daily").current_snapshot()
    started = int(head.summary.additional_properties["lakepub.publish-started-ms"])
    assert duration == (head.timestamp_ms - started) / 1000
    assert 0.05 <= duration < 60
    assert one(fams, "lakepub_last_publish_commit_retries", **d) == 1
    assert head.summary.additional_properties["lakepub.commit-attempts"] == "2"
    assert one(fams, "lakepub_published_timestamp_seconds", **d) == pytest.approx(time.time(), abs=300)
    # Every metric has HELP and TYPE, is lakepub_*, and carries a dataset label.
    for family in text_string_to_metric_families(res.out):
        assert family.name.startswith("lakepub_") and family.documentation and family.type in ("gauge", "counter", "info")
        assert all("dataset" in s.labels for s in family.samples)
    assert res.out.count("# HELP ") == res.out.count("# TYPE ") == len(list(text_string_to_metric_families(res.out)))


def test_the_report_draws_the_recorded_durations(busy: Path, cli, tmp_path: Path):
    out = tmp_path / "report.html"
    _ok(cli("report", "orders_daily", "--out", str(out)))
    page = out.read_text()
    assert "timeline-duration" in page and "not recorded on these snapshots" not in page


def test_metrics_json_carries_the_same_figures(busy: Path, cli):
    [m] = _ok(cli("metrics", "orders_daily", "--format", "json")).json()
    prom = families(_ok(cli("metrics", "orders_daily")).out)
    assert m["dataset"] == "orders_daily" and m["published"] is True and m["kind"] == "aggregate"
    assert str(m["snapshot_id"]) == dict(next(iter(prom["lakepub_published_info"])))["snapshot_id"]
    assert (m["rows"], m["partitions"], m["conflicts"], m["stale_starts"], m["rejected"]) == (3, 2, 1, 1, 0)
    assert {k: m["totals"][k] for k in ("events", "duplicates", "stale", "deletes")} == {
        "events": 8, "duplicates": 1, "stale": 1, "deletes": 1}
    lags = {p["partition"]: p for p in m["partitions_by_source"]}
    assert (lags["p0"]["position"], lags["p0"]["available"], lags["p0"]["lag_records"]) == (8, 10, 2)
    assert (lags["p1"]["position"], lags["p1"]["lag_records"]) == (0, 3)
    assert m["last_publish_commit_retries"] == 1 and m["last_publish_duration_s"] > 0


def test_textfile_is_replaced_atomically(busy: Path, cli, tmp_path: Path, monkeypatch):
    folder = tmp_path / "textfile"
    folder.mkdir()
    target = folder / "lakepub.prom"
    target.write_text("# old\n")
    reader = target.open()  # a reader holding the old file keeps reading it whole
    res = _ok(cli("metrics", "--textfile", str(folder)))
    assert res.out.strip() == f"wrote {target} (1 dataset(s))"
    assert reader.read() == "# old\n"
    reader.close()
    written = families(target.read_text())
    assert one(written, "lakepub_rows", dataset="orders_daily") == 3
    assert sorted(p.name for p in folder.iterdir()) == ["lakepub.prom"]  # no temp file left
    assert oct(target.stat().st_mode & 0o777) == "0o644"
    # A failure before the rename leaves the previous file and no temp file.
    before = target.read_text()

    def boom(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(ops_metrics.os, "replace", boom)
    assert cli("metrics", "--textfile", str(folder)).code != 0
    assert target.read_text() == before
    assert sorted(p.name for p in folder.iterdir()) == ["lakepub.prom"]
    # A folder that does not exist is a usage error (exit 2), nothing written.
    assert cli("metrics", "--textfile", str(tmp_path / "nope")).code == 2


def test_unknown_dataset_and_unpublished_dataset(ws_path: Path, cli):
    bad = cli("metrics", "nope")
    assert bad.code == 2 and "unknown dataset 'nope'" in bad.err and "Traceback" not in bad.err
    land = ws_path / "landing" / "orders" / "p0"
    land.mkdir(parents=True)
    write_jsonl(land / "00000.jsonl", BATCH_1)
    fams = families(_ok(cli("metrics")).out)
    assert one(fams, "lakepub_dataset_published", dataset="orders_daily") == 0
    assert one(fams, "lakepub_lag_records", dataset="orders_daily", source="orders", partition="p0") == 4
    assert "lakepub_published_info" not in fams and "lakepub_rows" not in fams
    assert _ok(cli("tables", "--format", "json")).json() == []


def test_every_dataset_kind(ws_path: Path, cli):
    """The customers example: an aggregate and a current-state table of one entity."""
    from test_any_dataset import CURRENT, MRR, STREAM_1, STREAM_2, _land, _setup

    landing = _setup(ws_path, MRR, CURRENT)
    _land(landing, "00000.jsonl", STREAM_1)
    _ok(cli("run", "customers_mrr"))
    _land(landing, "00001.jsonl", STREAM_2)
    _ok(cli("run", "customers_mrr"))
    fams = families(_ok(cli("metrics", "customers_mrr", "customers_current")).out)
    ws = Workspace.open(ws_path)
    infos = {dict(k)["dataset"]: dict(k) for k in fams["lakepub_published_info"]}
    tables = {t["name"]: t for t in _ok(cli("tables", "--format", "json")).json() if t["kind"] == "dataset"}
    for name, kind in (("customers_mrr", "aggregate"), ("customers_current", "current")):
        [q] = _ok(cli("query", f"SELECT count(*) AS n FROM {name}", "--format", "json")).json()
        table = ws.catalog.load_table(f"lakepub.{name}")
        assert one(fams, "lakepub_rows", dataset=name) == q["n"]
        assert one(fams, "lakepub_partitions", dataset=name) == table.inspect.partitions().num_rows
        assert infos[name]["kind"] == kind
        assert infos[name]["snapshot_id"] == str(table.metadata.current_snapshot_id) == str(tables[name]["snapshot_id"])
        assert infos[name]["data_version"] == tables[name]["data_version"]
        assert one(fams, "lakepub_events_total", dataset=name) == len(STREAM_1) + len(STREAM_2)
        assert one(fams, "lakepub_duplicates_total", dataset=name) == 2  # c1 v1 twice, c5 v1 replayed
        assert one(fams, "lakepub_lag_records", dataset=name, source="customers", partition="p0") == 0
    assert infos["customers_mrr"]["data_version"] != infos["customers_current"]["data_version"]
    ledger = {t["name"]: t for t in _ok(cli("tables", "--format", "json")).json() if t["kind"] == "ledger"}
    assert ledger["customers"]["identifier"] == "lakepub.customers__ledger"
    assert ledger["customers"]["datasets"] == ["customers_current", "customers_mrr"]
    assert ledger["customers"]["snapshot_id"] == ws.catalog.load_table("lakepub.customers__ledger").metadata.current_snapshot_id


def test_tables_name_what_duckdb_reads(busy: Path, cli):
    from lakepub import duck

    found = _ok(cli("tables", "--format", "json")).json()
    assert [(t["kind"], t["identifier"]) for t in found] == [("dataset", "lakepub.orders_daily"),
                                                            ("ledger", "lakepub.orders_daily__ledger")]
    ws = Workspace.open(busy)
    con = duck.connect(ws.config.catalog)
    for t in found:
        table = ws.catalog.load_table(t["identifier"])
        assert t["metadata_location"] == table.metadata_location
        assert t["snapshot_id"] == t["current_snapshot_id"] == table.metadata.current_snapshot_id
    n = con.execute(f"SELECT count(*) FROM iceberg_scan('{found[0]['metadata_location']}')").fetchone()[0]
    assert n == 3
    text = _ok(cli("tables")).out
    assert "lakepub.orders_daily__ledger" in text and found[0]["metadata_location"] in text


def test_data_version_is_the_definition_and_the_contract():
    definition = {"kind": "aggregate", "partition": "month(day)", "entity": "orders"}
    v = data_version.compute(definition, "ab" * 32)
    assert v == data_version.compute(dict(reversed(definition.items())), "ab" * 32)  # key order does not count
    assert v != data_version.compute(definition, "cd" * 32)
    assert v != data_version.compute({**definition, "partition": "day(day)"}, "ab" * 32)
    assert data_version.compute(definition, "") == data_version.compute(definition, None)


def test_rejects_are_read_from_the_publish_counts():
    from types import SimpleNamespace

    def snap(counts: dict, totals: dict | None = None):
        props = {"lakepub.counts": json.dumps(counts), "lakepub.totals": json.dumps(totals or {})}
        return SimpleNamespace(summary=SimpleNamespace(additional_properties=props)), None

    assert ops_metrics._rejected([snap({"events": 3}), snap({"events": 2})]) == 0
    assert ops_metrics._rejected([snap({"rejected": 2}), snap({}), snap({"rejected": 5})]) == 7
    assert ops_metrics._rejected([snap({"rejected": 2}, {"rejected": 40})]) == 40  # running total wins
    assert ops_metrics._rejected([]) == 0


def test_totals_cover_every_count():
    from dataclasses import fields

    from lakepub.store.record import Counts

    assert {f for f, _, _ in ops_metrics._TOTALS} == {f.name for f in fields(Counts)} - {"partitions_rewritten", "rejected"}  # rejected: lakepub_quality_rejects


def test_catalog_config_works_from_any_folder(busy: Path, cli, tmp_path: Path, monkeypatch):
    from pyiceberg.catalog import load_catalog

    config = _ok(cli("catalog-config", "--format", "json")).json()
    assert list(config)[:2] == ["name", "type"] and config["name"] == "lakepub"
    assert config["uri"] == f"sqlite:///{busy / '.lakepub' / 'catalog.db'}"
    assert config["warehouse"] == f"file://{busy / '.lakepub' / 'warehouse'}"
    assert yaml.safe_load(_ok(cli("catalog-config")).out) == config
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    catalog = load_catalog(config.pop("name"), **config)
    table = catalog.load_table("lakepub.orders_daily")
    assert table.metadata_location == Workspace.open(busy).catalog.load_table("lakepub.orders_daily").metadata_location
    assert table.scan().to_arrow().num_rows == 3


def test_catalog_config_redacts_secrets(ws_path: Path, cli):
    shown, hidden = redact({"name": "x", "uri": "postgresql+psycopg2://bob:hunter2@db:5432/lakepub",
                            "s3.secret-access-key": "abc", "s3.access-key-id": "AKIA", "warehouse": "s3://b/wh"})
    assert shown["uri"] == f"postgresql+psycopg2://bob:{REDACTED}@db:5432/lakepub"
    assert shown["s3.secret-access-key"] == REDACTED and shown["s3.access-key-id"] == "AKIA"
    assert sorted(hidden) == ["s3.secret-access-key", "uri"]
    config = (ws_path / "lakepub.yaml").read_text().replace("warehouse: .lakepub/warehouse",
                                                             "warehouse: .lakepub/warehouse\n  token: ${LP_TEST_TOKEN}")
    (ws_path / "lakepub.yaml").write_text(config)
    os.environ["LP_TEST_TOKEN"] = "s3cr3t"
    try:
        res = _ok(cli("catalog-config", "--format", "json"))
        assert res.json()["token"] == REDACTED and "s3cr3t" not in res.out
        assert "token redacted" in res.err
        assert _ok(cli("catalog-config", "--format", "json", "--show-secrets")).json()["token"] == "s3cr3t"
    finally:
        del os.environ["LP_TEST_TOKEN"]


def test_quality_rejects_and_gate_refusals_of_the_publish_gates(ws_path: Path, cli):
    from test_gates import Batches, ev, rejected, setup

    setup(ws_path, "lenient")
    batches = Batches(ws_path, cli)
    bad = [ev("c2", mrr=-5), ev("c3", status="weird")]  # range and enum: rejected, committed to __rejects
    assert batches.publish([ev("c1"), *bad, ev("c4", plan=None)]).code == 0
    setup(ws_path, "strict")
    assert batches.publish([ev("c5", mrr=-1)]).code == 3  # refused by the gate: audited
    res = cli("metrics", "customers_current")
    assert res.code == 0, res.err
    fams = families(res.out)
    assert one(fams, "lakepub_quality_rejects_total", dataset="customers_current") == len(rejected(cli)) == len(bad)
    assert one(fams, "lakepub_gate_refusals_total", dataset="customers_current") == 1
    assert one(fams, "lakepub_inferred_from_schema_default_total", dataset="customers_current") == 1  # c4's plan
    assert one(fams, "lakepub_events_total", dataset="customers_current") == 4
    assert one(fams, "lakepub_rows", dataset="customers_current") == 2
