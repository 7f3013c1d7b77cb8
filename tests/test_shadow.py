"""``lakepub shadow``: a new contract version run beside the current one on the same landing
input, compared by key, partition and column, publishing nothing (lakepub/contract/shadow.py)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

from tests.conftest import published_pointers
from tests.test_any_dataset import CONTRACT, CURRENT, MRR, STREAM_1, STREAM_2, _land, _setup

V1_1 = CONTRACT.replace('version: "1.0"', 'version: "1.1"') + "  referrer: {type: string, nullable: true}\n"


def _published(cli, sql: str) -> list[dict]:
    r = cli("query", sql, "--format", "json")
    assert r.code == 0, r.err
    return json.loads(r.out)


def _workspace(ws_path: Path, cli) -> None:
    landing = _setup(ws_path, MRR, CURRENT)
    _land(landing, "0001.jsonl", STREAM_1)
    _land(landing, "0002.jsonl", STREAM_2)
    assert cli("run", "customers_mrr").code == 0


def test_a_compatible_version_publishes_the_same_rows_and_nothing_is_published(ws_path: Path, cli, ws):
    _workspace(ws_path, cli)
    (ws_path / "catalog" / "contracts" / "customers@v1.1.yaml").write_text(V1_1)
    before = [published_pointers(ws, d) for d in ("customers_mrr", "customers_current")]
    r = cli("shadow", "customers_mrr", "--contract", "contracts/customers@v1.1", "--format", "json")
    assert r.code == 0, r.err
    s = json.loads(r.out)
    published = _published(cli, "SELECT * FROM customers_mrr")
    assert s["rows_old"] == s["rows_new"] == len(published)  # the old side reproduces the published table
    assert (s["only_old"], s["only_new"], s["changed"], s["unchanged"]) == (0, 0, 0, len(published))
    assert s["row_key"] == ["country", "plan"] and s["ok"] and s["events"] == len(STREAM_1) + len(STREAM_2)
    assert s["max_relative_diff"] == {"mrr_cents": 0.0, "customers": 0.0}
    assert [published_pointers(ws, d) for d in ("customers_mrr", "customers_current")] == before
    out = ws_path / ".lakepub" / "shadow" / "customers_mrr" / "customers@v1.1"
    assert json.loads((out / "shadow.summary.json").read_text())["diff_sha256"] == s["diff_sha256"]
    assert list(csv.reader((out / "shadow.diff.csv").open()))[1:] == []  # a header, no differing row


ALL_COLUMNS = {**CURRENT, "name": "customers_all", "projection": {"kind": "current"}}
V2_WITHOUT_SIGNUP = (CONTRACT.replace('version: "1.0"', 'version: "2.0"').replace("  signup_day: date\n", "")
                     + "extra_fields: ignore\n")


def test_a_removed_field_is_reported_and_the_shared_columns_compared(ws_path: Path, cli, ws):
    landing = _setup(ws_path, ALL_COLUMNS)
    _land(landing, "0001.jsonl", STREAM_1)
    assert cli("run", "customers_all").code == 0
    (ws_path / "catalog" / "contracts" / "customers@v2.0.yaml").write_text(V2_WITHOUT_SIGNUP)
    before = published_pointers(ws, "customers_all")
    out = ws_path / "shadow-out"
    r = cli("shadow", "customers_all", "--contract", "contracts/customers@v2.0", "--out", str(out))
    assert r.code == 0, (r.out, r.err)
    assert "columns only old: signup_day" in r.out and str(out / "shadow.diff.csv") in r.out
    s = json.loads((out / "shadow.summary.json").read_text())
    live = _published(cli, "SELECT customer_id FROM customers_all ORDER BY 1")
    assert s["columns_only_old"] == ["signup_day"] and s["row_key"] == ["customer_id"]
    assert s["unchanged"] == len(live) and s["changed"] == 0 and s["ok"]  # the shared columns agree
    assert published_pointers(ws, "customers_all") == before


def test_from_a_position_compares_only_the_input_after_it(ws_path: Path, cli):
    _workspace(ws_path, cli)
    (ws_path / "catalog" / "contracts" / "customers@v1.1.yaml").write_text(V1_1)
    r = cli("shadow", "customers_mrr", "--contract", "contracts/customers@v1.1", "--from",
            json.dumps({"p0": len(STREAM_1)}), "--format", "json")
    assert r.code == 0, r.err
    s = json.loads(r.out)
    assert s["events"] == len(STREAM_2) and s["start"] == {"p0": len(STREAM_1)}
    latest = {}
    for e in STREAM_2:  # c5's tombstone (v2) wins over its late v1
        if e["customer_id"] not in latest or e["version"] > latest[e["customer_id"]]["version"]:
            latest[e["customer_id"]] = e
    live = {(e["country"], e["plan"]) for e in latest.values() if not e["deleted"]}
    assert s["rows_old"] == s["rows_new"] == len(live) and s["ok"]
    r = cli("shadow", "customers_mrr", "--contract", "contracts/customers@v1.1", "--from", '{"p0": 99}')
    assert r.code == 2 and "past the published position" in r.err
    assert len(r.err.strip().splitlines()) == 1, r.err  # off a terminal, no progress label before it


def test_unknown_thresholds_and_other_contracts_are_refused_naming_file_and_key(ws_path: Path, cli):
    _workspace(ws_path, cli)
    path = ws_path / "catalog" / "contracts" / "customers@v1.1.yaml"
    path.write_text(V1_1 + "shadow:\n  enabled: true\n  thresholds: {max_diff: 0.1}\n")
    r = cli("shadow", "customers_mrr", "--contract", str(path))
    assert r.code == 2 and f"{path}: shadow.thresholds.max_diff: unknown threshold" in r.err, r.err
    other = ws_path / "other@v1.0.yaml"
    other.write_text(CONTRACT.replace("name: customers", "name: other"))
    r = cli("shadow", "customers_mrr", "--contract", str(other))
    assert r.code == 2 and "is not a version of 'customers'" in r.err, r.err


LENIENT_RANGE = (V1_1 + "constraints:\n  range: [{col: mrr_cents, rule: \"[100, 100000]\"}]\n"
                 "validation: {mode: lenient}\n")


def test_a_known_difference_is_listed_by_key_and_partition_and_judged_by_the_thresholds(ws_path: Path, cli, ws):
    _workspace(ws_path, cli)
    path = ws_path / "catalog" / "contracts" / "customers@v1.1.yaml"
    path.write_text(LENIENT_RANGE)  # c6 (DE, pro, 50 cents) falls below the new range: rejected
    before = [published_pointers(ws, d) for d in ("customers_mrr", "customers_current")]
    r = cli("shadow", "customers_mrr", "--contract", "contracts/customers@v1.1")
    assert r.code == 3, (r.out, r.err)
    assert "1 changed row(s) > max_changed 0" in r.err and "nothing was published" in r.err
    assert "partition DE: changed 1" in r.out and "gate: FAILED" in r.out
    out = ws_path / ".lakepub" / "shadow" / "customers_mrr" / "customers@v1.1"
    rows = list(csv.DictReader((out / "shadow.diff.csv").open()))
    assert [(r["country"], r["plan"], r["status"]) for r in rows] == [("DE", "pro", "changed")]
    (row,) = rows
    assert (row["old_mrr_cents"], row["new_mrr_cents"], row["old_customers"], row["new_customers"]) == \
        ("1250", "1200", "2", "1")
    assert abs(float(row["rel_diff_mrr_cents"]) - 50 / 1250) < 1e-9 and float(row["rel_diff_customers"]) == 0.5
    s = json.loads((out / "shadow.summary.json").read_text())
    assert s["max_relative_diff"] == {"mrr_cents": 0.04, "customers": 0.5} and s["changed"] == 1
    assert [published_pointers(ws, d) for d in ("customers_mrr", "customers_current")] == before
    # Thresholds that admit the difference let the gate pass, with the same diff.
    path.write_text(LENIENT_RANGE + "shadow: {enabled: true, thresholds: {max_relative_diff: 0.5, max_changed: 1, "
                    "max_changed_fraction: 0.5}}\n")
    r = cli("shadow", "customers_mrr", "--contract", "contracts/customers@v1.1", "--format", "json")
    assert r.code == 0, r.err
    assert r.json()["ok"] and r.json()["changed"] == 1
