"""Publish gates (issue 13): the contract's constraints checked on every batch, through the CLI.

strict refuses the batch (exit 3, one report naming rule, column, partition and sample values,
audited, every catalog pointer unchanged); lenient publishes the valid events and commits the
rejected ones with their rules to ``<entity>__rejects`` in the same atomic commit (a crash before
it leaves neither; a retry is already published); rejected versions never advance the ledger;
history_only defaults are flagged; freshness is judged by status. Every table is read back by
DuckDB (``lakepub query``, ``lakepub rejects``, ``iceberg_scan`` of the catalog's location).
"""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pytest
import yaml

from conftest import set_commit_mode
from lakepub import duck
from lakepub.contract.gates import Gates
from lakepub.contract.orders import ORDERS_CONTRACT
from lakepub.workspace import Workspace

FIELDS = """
name: customers
version: "1.0"
entity: {key: [customer_id], version: version, deleted: deleted}
fields:
  customer_id: string
  version: long
  country: {type: string, nullable: true}
  plan: {type: string, nullable: true, default: {value: basic, kind: history_only}}
  status: string
  mrr_cents: {type: long, nullable: true}
  email: {type: string, nullable: true}
  deleted: boolean
"""
CONSTRAINTS = {
    "partition_by": ["country"],
    "not_null": ["mrr_cents"],
    "range": [{"col": "mrr_cents", "rule": "[0, 100000]"}],
    "enum": [{"col": "status", "values": ["ok", "warn", "err"], "on_new": "reject"}],
    "unique": [["email"]],
}
CURRENT = {"name": "customers_current", "source": "customers", "contract": "contracts/customers@v1.0",
           "entity": "customers",
           "projection": {"kind": "current", "columns": ["customer_id", "country", "plan", "status", "mrr_cents", "email"]},
           "partition": "identity(country)"}
NS = "lakepub"


def ev(cid: str, version: int = 1, *, country: str | None = "FR", plan: str | None = "pro", status: str = "ok",
       mrr: int | None = 100, email: str | None = None, deleted: bool = False) -> dict:
    if deleted:
        return {"customer_id": cid, "version": version, "status": "ok", "deleted": True}
    out = {"customer_id": cid, "version": version, "country": country, "status": status, "mrr_cents": mrr,
           "email": email if email is not None else f"{cid}@x", "deleted": False}
    if plan is not None:
        out["plan"] = plan
    return out


def setup(ws_path: Path, mode: str = "strict", constraints: dict | None = None, **terms) -> None:
    contract = yaml.safe_load(FIELDS)
    contract["constraints"] = CONSTRAINTS if constraints is None else constraints
    contract["validation"] = {"mode": mode}
    contract.update(terms)
    (ws_path / "catalog" / "contracts" / "customers@v1.0.yaml").write_text(yaml.safe_dump(contract, sort_keys=False))
    (ws_path / "catalog" / "datasets" / "customers_current.yaml").write_text(yaml.safe_dump(CURRENT, sort_keys=False))


class Batches:
    """Publishes batches through ``lakepub publish`` at the next position."""

    def __init__(self, ws_path: Path, cli):
        self.ws_path, self.cli, self.offset, self.n = ws_path, cli, 0, 0

    def args(self, events: list[dict], start: int | None = None) -> tuple[str, ...]:
        self.n += 1
        path = self.ws_path / f"batch{self.n}.jsonl"
        path.write_text("".join(json.dumps(e) + "\n" for e in events))
        start = self.offset if start is None else start
        return ("publish", "customers_current", "--events", str(path), "--start", json.dumps({"p0": start}),
                "--end", json.dumps({"p0": start + len(events)}), "--format", "json")

    def publish(self, events: list[dict], start: int | None = None):
        res = self.cli(*self.args(events, start))
        if res.code == 0:
            self.offset = (self.offset if start is None else start) + len(events)
        return res


def pointers(ws_path: Path) -> dict[str, str]:
    """Every table of the namespace and its catalog metadata location."""
    catalog = Workspace.open(ws_path).catalog
    return {".".join(i): catalog.load_table(i).metadata_location for i in catalog.list_tables(NS)
            if i[1] != "lakepub_audit"}


def published(cli) -> dict[str, dict]:
    res = cli("query", "SELECT * FROM customers_current ORDER BY customer_id", "--format", "json")
    assert res.code == 0, res.err
    return {r["customer_id"]: r for r in res.json()}


def rejected(cli, *args: str) -> list[dict]:
    res = cli("rejects", "customers_current", "--format", "json", *args)
    assert res.code == 0, res.err
    return res.json()


def scan(ws_path: Path, table: str, sql: str = "SELECT * FROM t") -> list[tuple]:
    ws = Workspace.open(ws_path)
    location = ws.catalog.load_table((NS, table)).metadata_location
    con = duck.connect(ws.config.catalog)
    try:
        return con.execute(sql.replace("FROM t", f"FROM {duck.scan_sql(location)}")).fetchall()
    finally:
        con.close()


def status(cli, *args: str) -> dict:
    res = cli("status", "customers_current", "--format", "json", *args)
    assert res.code == 0, res.err
    return res.json()[0]


# --- strict --------------------------------------------------------------------------------------

GOOD = [ev("c1"), ev("c2", country="DE")]
STRICT_CASES = [
    ("not_null", [ev("c9", mrr=None, country="DE")], ["rule not_null", "column mrr_cents", "country=DE", "null"]),
    ("range", [ev("c9", mrr=-5), ev("c8", mrr=100001)],
     ["rule range [0, 100000]", "column mrr_cents", "2 event(s)", "country=FR", "-5", "100001"]),
    ("enum", [ev("c9", status="new", country="US")],
     ["rule enum", "on_new reject", "column status", "country=US", "'new'"]),
    ("unique", [ev("c9", email="same@x"), ev("c8", email="same@x", country="DE")],
     ["rule unique", "column email", "2 event(s)", "country=DE, country=FR", "'same@x'"]),
]


@pytest.mark.parametrize("rule,bad,fragments", STRICT_CASES, ids=[c[0] for c in STRICT_CASES])
def test_strict_refuses_the_batch_naming_rule_column_partition_and_values(ws_path: Path, cli, rule, bad, fragments):
    setup(ws_path)
    batches = Batches(ws_path, cli)
    assert batches.publish(GOOD).code == 0
    before = pointers(ws_path)
    res = batches.publish([ev("c3"), *bad])
    assert res.code == 3, res.err
    line = res.err.strip()
    assert "\n" not in line and "Traceback" not in line
    assert "validation.mode strict" in line and "nothing was published" in line and f"{len(bad)} of {len(bad) + 1}" in line
    for fragment in fragments:
        assert fragment in line, line
    assert pointers(ws_path) == before  # nothing visible: no table moved, no rejects table made
    assert set(published(cli)) == {"c1", "c2"}
    s = status(cli)
    assert s["gate_refused"] == 1 and s["positions"] == {"customers": {"p0": 2}}
    # Fixed, the same range publishes.
    assert batches.publish([ev("c3"), *[{**e, "mrr_cents": 1, "status": "ok", "email": None} for e in bad]]).code == 0


def test_units_promise_refuses_every_batch_in_any_mode(ws_path: Path, cli):
    setup(ws_path, "lenient", {"units": {"mrr_cents": "EUR/100"}})
    assert Batches(ws_path, cli).publish(GOOD).code == 0  # every numeric column has its unit
    setup(ws_path, "lenient", {"units": {"country": "1"}})  # mrr_cents has none now
    res = Batches(ws_path, cli).publish([ev("c3")], start=2)
    assert res.code == 3 and "rule units" in res.err and "'mrr_cents'" in res.err and "constraints.units" in res.err


def test_a_contract_without_gates_costs_nothing():
    assert Gates.of(ORDERS_CONTRACT) is None  # primary key / not_null on key, version, deleted: already enforced


# --- lenient -------------------------------------------------------------------------------------


def test_lenient_publishes_the_valid_events_and_commits_the_rejected_ones_with_them(ws_path: Path, cli):
    setup(ws_path, "lenient")
    batches = Batches(ws_path, cli)
    batch = [ev("c1"), ev("c2", mrr=-5), ev("c3", status="new", country="DE"), ev("c4", mrr=None, country="US"),
             ev("c5", email="dup@x"), ev("c6", email="dup@x", country="DE"), ev("c7", country="DE")]
    res = batches.publish(batch)
    assert res.code == 0, res.err
    out = res.json()
    assert out["counts"]["events"] == 7 and out["counts"]["rejected"] == 5
    assert out["positions"] == {"customers": {"p0": 7}}  # positions advance over the whole batch
    assert set(published(cli)) == {"c1", "c7"}

    rows = rejected(cli)
    assert {r["event"] and json.loads(r["event"])["customer_id"]: (r["rule"], r["column"]) for r in rows} == {
        "c2": ("range", "mrr_cents"), "c3": ("enum", "status"), "c4": ("not_null", "mrr_cents"),
        "c5": ("unique", "email"), "c6": ("unique", "email")}
    by_id = {json.loads(r["event"])["customer_id"]: r for r in rows}
    assert by_id["c2"]["value"] == "-5" and by_id["c2"]["detail"] == "[0, 100000]" and by_id["c2"]["partition"] == "country=FR"
    assert {r["batch_id"] for r in rows} == {out["batch_id"]} and {r["source"] for r in rows} == {"customers"}

    # Same commit: the rejects snapshot carries the batch id of the published snapshot, and the
    # entity's tables moved together (one commit: the rejects table's only snapshot is this batch's).
    ws = Workspace.open(ws_path)
    rejects = ws.catalog.load_table((NS, "customers__rejects"))
    current = ws.catalog.load_table((NS, "customers_current")).current_snapshot()
    assert [s.summary.additional_properties["lakepub.batch-id"] for s in rejects.metadata.snapshots] == [out["batch_id"]]
    assert current.summary.additional_properties["lakepub.batch-id"] == out["batch_id"]
    assert scan(ws_path, "customers__rejects", "SELECT count(*) FROM t") == [(5,)]

    # A retry of the same batch is already published and appends no rejects again.
    again = batches.publish(batch, start=0)
    assert again.code == 0 and again.json()["status"] == "already-published"
    assert len(rejected(cli)) == 5

    # status and log count them.
    s = status(cli)
    assert s["totals"]["rejected"] == 5 and s["totals"]["events"] == 7
    text = cli("status", "customers_current")
    assert "rejected 5 event(s)" in text.out
    log = cli("log", "customers_current", "--format", "json").json()
    assert log[0]["counts"]["rejected"] == 5
    assert "rejected" in cli("log", "customers_current").out

    # A batch all of whose events are rejected still advances the position, publishing nothing else.
    before = published(cli)
    res = batches.publish([ev("c8", mrr=-1)])
    assert res.code == 0 and res.json()["counts"]["rejected"] == 1 and res.json()["positions"]["customers"] == {"p0": 8}
    assert published(cli) == before and len(rejected(cli)) == 6
    assert cli("verify", "customers_current", "--deep").code == 0


@pytest.mark.parametrize("mode", ["atomic", "ordered"])
@pytest.mark.parametrize("point", ["after-data-write", "before-pointer-swap"])
def test_a_crash_before_the_commit_leaves_neither_and_the_retry_publishes_both_once(ws_path: Path, cli, cli_process,
                                                                                     point, mode):
    setup(ws_path, "lenient")
    set_commit_mode(ws_path, mode)
    batches = Batches(ws_path, cli)
    assert batches.publish([ev("c1")]).code == 0
    before = pointers(ws_path)
    args = batches.args([ev("c2"), ev("c3", mrr=-1)])
    crashed = cli_process(*args, env={"LAKEPUB_FAULT": point})
    assert crashed.code == -9, crashed.err
    after = pointers(ws_path)
    assert after["lakepub.customers_current"] == before["lakepub.customers_current"]
    assert set(published(cli)) == {"c1"}
    if mode == "atomic":
        assert after == before  # neither the rejects table nor the ledger moved
        assert rejected(cli) == []
    retry = cli_process(*args)
    assert retry.code == 0, retry.err
    assert set(published(cli)) == {"c1", "c2"}
    assert [json.loads(r["event"])["customer_id"] for r in rejected(cli)] == ["c3"]  # exactly once


def test_a_rejected_version_does_not_advance_its_entity(ws_path: Path, cli):
    setup(ws_path, "lenient")
    batches = Batches(ws_path, cli)
    assert batches.publish([ev("c1", 1, mrr=10), ev("c2", 1, mrr=20)]).code == 0
    # c1 v3 is rejected: c1 stays at v1, and a later valid v2 (below the rejected one) applies.
    res = batches.publish([ev("c1", 3, mrr=-3)])
    assert res.json()["counts"]["rejected"] == 1 and published(cli)["c1"]["mrr_cents"] == 10
    assert batches.publish([ev("c1", 2, mrr=12)]).json()["counts"]["new_versions"] == 1
    assert published(cli)["c1"]["mrr_cents"] == 12
    # The rejected version itself, corrected, is a new version (the ledger never had it).
    assert batches.publish([ev("c1", 3, mrr=13)]).json()["counts"]["new_versions"] == 1
    assert published(cli)["c1"]["mrr_cents"] == 13
    # A rejected delete (its enum breaks the rule) leaves the entity live; a valid one deletes it.
    res = batches.publish([{**ev("c2", 2, deleted=True), "status": "gone"}])
    assert res.json()["counts"]["rejected"] == 1 and "c2" in published(cli)
    res = batches.publish([ev("c2", 2, deleted=True)])
    assert res.json()["counts"]["deletes"] == 1 and "c2" not in published(cli)
    ledger = scan(ws_path, "customers__ledger", "SELECT customer_id, version FROM t ORDER BY 1, 2")
    assert ledger == [("c1", 1), ("c1", 2), ("c1", 3), ("c2", 1), ("c2", 2)]


def test_enum_mapping_and_history_only_defaults_are_flagged(ws_path: Path, cli):
    setup(ws_path, "strict", {"enum": [{"col": "status", "values": ["ok", "warn", "other"], "on_new": "map-to-other",
                                        "other": "other"},
                                       {"col": "country", "values": ["FR", "DE"], "on_new": "unknown"}]})
    batches = Batches(ws_path, cli)
    # c1 arrives three times: mapped and filled, the copies are one version (duplicates, no conflict).
    c1 = ev("c1", plan=None, status="brand-new", country="US")
    res = batches.publish([c1, ev("c2", plan="pro"), {**c1, "status": "other"}, {**c1, "plan": "basic", "country": None}])
    assert res.code == 0, res.err
    counts = res.json()["counts"]
    assert counts["rejected"] == 0 and counts["inferred_from_schema_default"] == 2 and counts["duplicates"] == 2
    rows = published(cli)
    assert (rows["c1"]["plan"], rows["c1"]["status"], rows["c1"]["country"]) == ("basic", "other", None)
    assert rows["c2"]["plan"] == "pro"
    ws = Workspace.open(ws_path)
    summary = ws.catalog.load_table((NS, "customers_current")).current_snapshot().summary.additional_properties
    assert json.loads(summary["lakepub.inferred-from-schema-default"]) == {"plan": 2}
    assert status(cli)["totals"]["inferred_from_schema_default"] == 2


def test_the_janitor_keeps_live_rejects_and_removes_orphans(ws_path: Path, cli, cli_process):
    setup(ws_path, "lenient")
    batches = Batches(ws_path, cli)
    assert batches.publish([ev("c1"), ev("c2", mrr=-1)]).code == 0
    crashed = cli_process(*batches.args([ev("c3", mrr=-2)]), env={"LAKEPUB_FAULT": "after-data-write"})
    assert crashed.code == -9
    res = cli("janitor", "--older-than", "0s", "--format", "json")
    assert res.code == 0, res.err
    report = {t["table"]: t for t in res.json()["tables"]}
    assert report["lakepub.customers__rejects"]["role"] == "rejects"
    assert report["lakepub.customers__rejects"]["files_removed"] >= 1  # the crashed attempt's rejects file
    assert [json.loads(r["event"])["customer_id"] for r in rejected(cli)] == ["c2"]


# --- freshness -----------------------------------------------------------------------------------


def test_freshness_on_time_and_late_in_text_and_json(ws_path: Path, cli):
    setup(ws_path, "strict", {}, freshness="within 2h")
    assert Batches(ws_path, cli).publish(GOOD).code == 0
    published_at = status(cli)["published_at"]
    fresh = status(cli)["freshness"]
    assert fresh["state"] == "on time" and fresh["late_by_s"] is None and fresh["max_age_s"] == 7200
    from datetime import datetime, timedelta

    later = (datetime.fromisoformat(published_at) + timedelta(hours=3, seconds=30)).isoformat()
    late = status(cli, "--as-of", later)["freshness"]
    assert late["state"] == "late" and late["late_by_s"] == pytest.approx(3630, abs=1)
    assert "late by 1h00m (within 2h" in cli("status", "customers_current", "--as-of", later).out

    setup(ws_path, "strict", {}, freshness="published by 08:00 UTC daily")
    day = datetime.fromisoformat(published_at)
    deadline = day.replace(hour=8, minute=0, second=0)
    if day <= deadline:  # published before the day's deadline: on time once it has passed
        s = status(cli, "--as-of", (deadline + timedelta(hours=1)).isoformat())["freshness"]
        assert s["state"] == "on time" and s["deadline"].startswith(deadline.date().isoformat())
    else:  # published after it: that day's data came late by the difference
        s = status(cli, "--as-of", (day + timedelta(minutes=1)).isoformat())["freshness"]
        assert s["state"] == "late" and s["late_by_s"] == pytest.approx((day - deadline).total_seconds(), abs=1)
    # Nothing published for the next day's deadline: late, and counting.
    s = status(cli, "--as-of", (deadline + timedelta(days=2, minutes=30)).isoformat())["freshness"]
    assert s["state"] == "late" and s["late_by_s"] == pytest.approx(1800, abs=1)
    res = cli("status", "customers_current", "--as-of", "yesterday")
    assert res.code == 2 and "--as-of" in res.err


def test_unique_is_checked_over_the_published_current_state_too(ws_path: Path, cli):
    setup(ws_path, "lenient")
    batches = Batches(ws_path, cli)
    assert batches.publish([ev("c1", email="a@x"), ev("c2", email="b@x")]).code == 0
    # c9 takes c1's published email: rejected. c1 moves to a new email in the same batch as c10
    # takes its old one: both fine (the published row of c1 is replaced by this batch).
    res = batches.publish([ev("c9", email="b@x"), ev("c1", 2, email="new@x"), ev("c10", email="a@x")])
    assert res.code == 0 and res.json()["counts"]["rejected"] == 1, res.out
    [row] = rejected(cli)
    assert json.loads(row["event"])["customer_id"] == "c9" and row["rule"] == "unique"
    assert "published rows of customers_current" in row["detail"]
    assert {k: r["email"] for k, r in published(cli).items()} == {"c1": "new@x", "c2": "b@x", "c10": "a@x"}

    setup(ws_path, "strict")
    res = batches.publish([ev("c11", email="new@x", country="DE")])
    assert res.code == 3 and "rule unique (over the published rows of customers_current) on column email" in res.err
    assert "country=DE" in res.err and "'new@x'" in res.err


def test_the_position_check_comes_before_the_gates(ws_path: Path, cli):
    setup(ws_path, "lenient")
    batches = Batches(ws_path, cli)
    batch = [ev("c1"), ev("c2", mrr=-5)]
    assert batches.publish(batch).json()["counts"]["rejected"] == 1
    setup(ws_path, "strict")  # the contract turned strict: the published batch is still published
    again = batches.publish(batch, start=0)
    assert again.code == 0 and again.json()["status"] == "already-published"
    stale = batches.publish([ev("c3", mrr=-1)], start=1)  # a stale start is refused as such
    assert stale.code == 3 and "stale start" in stale.err and "publish gate" not in stale.err
    assert status(cli)["gate_refused"] == 0


def test_run_from_landing_counts_the_rejected_events(ws_path: Path, cli):
    setup(ws_path, "lenient")
    landing = ws_path / "landing" / "customers" / "p0"
    landing.mkdir(parents=True)
    (landing / "00000.jsonl").write_text("".join(json.dumps(e) + "\n" for e in [ev("c1"), ev("c2", mrr=-1), ev("c3")]))
    res = cli("run", "customers_current")
    assert res.code == 0 and "1 rejected by the publish gates" in res.out, res.out + res.err
    assert set(published(cli)) == {"c1", "c3"} and len(rejected(cli)) == 1
    assert cli("run", "customers_current").code == 0 and len(rejected(cli)) == 1  # nothing new: nothing again


def test_unique_over_published_rows_is_checked_again_after_a_lost_race(ws_path: Path, monkeypatch):
    # Another writer publishes c8 with the same email between this batch's check and its commit:
    # the commit loses the race, and the retry must check the unique rule against the new rows.
    setup(ws_path, "lenient")
    ours, theirs = Workspace.open(ws_path), Workspace.open(ws_path)
    ours.publish("customers_current", [ev("c1", email="a@x")], start={"p0": 0}, end={"p0": 1})
    publisher = ours.publisher("customers_current")
    real, raced = publisher._attempt, []

    def attempt(*args, **kwargs):
        if not raced:  # their publish lands after our verdict, before our commit
            raced.append(theirs.publish("customers_current", [ev("c8", email="same@x")], source="other",
                                        start={"p0": 0}, end={"p0": 1}))
        return real(*args, **kwargs)

    monkeypatch.setattr(publisher, "_attempt", attempt)
    result = ours.publish("customers_current", [ev("c9", email="same@x", country="DE")],
                          start={"p0": 1}, end={"p0": 2})
    assert raced and result.attempts == 2 and result.counts.rejected == 1
    rows = Workspace.open(ws_path).query("SELECT customer_id, email FROM customers_current ORDER BY 1").to_pylist()
    assert rows == [{"customer_id": "c1", "email": "a@x"}, {"customer_id": "c8", "email": "same@x"}]
