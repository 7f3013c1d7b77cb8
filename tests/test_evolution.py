"""Evolution applied with the data (issue 13): a compatible new contract version evolves the
ledger's and the published tables' Iceberg schemas in the same atomic commit as its first batch
(lakepub/publish/evolution.py); a breaking one is refused with nothing visible.

A customers entity with an aggregate (MRR per country and plan) and a current-state table with
the default column list (every field: it gains the new column). Version 1.1 adds an optional
``referrer`` and promotes ``seats`` int -> long. Everything through the CLI on real Iceberg
tables, read back by DuckDB (``lakepub query``, ``iceberg_scan``) and pyiceberg.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.conftest import published_pointers, write_jsonl

CONTRACT = """
name: customers
version: "1.0"
entity:
  key: [customer_id]
  version: version
  deleted: deleted
fields:
  customer_id: string
  version: long
  country: {type: string, nullable: true}
  plan: string
  mrr_cents: long
  seats: {type: int, nullable: true}
  deleted: boolean
"""
V1_1 = (CONTRACT.replace('version: "1.0"', 'version: "1.1"')
        .replace("seats: {type: int, nullable: true}", "seats: {type: long, nullable: true}")
        + "  referrer: {type: string, nullable: true}\n")
MRR = {"name": "customers_mrr", "source": "customers", "contract": "contracts/customers@v1.0", "entity": "customers",
       "projection": {"kind": "aggregate", "group_by": ["country", "plan"],
                      "measures": {"mrr_cents": "sum(mrr_cents)", "customers": "count()"}},
       "partition": "identity(country)"}
ALL = {"name": "customers_all", "source": "customers", "contract": "contracts/customers@v1.0", "entity": "customers",
       "projection": {"kind": "current"}, "partition": "bucket(4, customer_id)"}
DATASETS = ("customers_mrr", "customers_all")
TABLES = ("customers_mrr", "customers_all", "customers__ledger")


def _event(cid: str, version: int, country: str | None, plan: str, mrr: int, seats: int | None = 1,
           **extra) -> dict:
    return {"customer_id": cid, "version": version, "country": country, "plan": plan, "mrr_cents": mrr,
            "seats": seats, "deleted": False, **extra}


OLD = [_event("c1", 1, "FR", "pro", 1000), _event("c2", 1, "DE", "basic", 200, seats=None),
       _event("c3", 1, "US", "pro", 700, seats=3)]
NEW = [_event("c4", 1, "FR", "pro", 50, seats=3_000_000_000, referrer="ads"),  # needs the long
       _event("c2", 2, "DE", "pro", 900, seats=2, referrer="partner")]  # c2 changes (index lookup of an old run)


def _setup(ws_path: Path) -> Path:
    (ws_path / "catalog" / "contracts" / "customers@v1.0.yaml").write_text(CONTRACT)
    for d in (MRR, ALL):
        _dataset(ws_path, d, "contracts/customers@v1.0")
    landing = ws_path / "landing" / "customers" / "p0"
    landing.mkdir(parents=True)
    return landing


def _dataset(ws_path: Path, d: dict, contract: str) -> None:
    (ws_path / "catalog" / "datasets" / f"{d['name']}.yaml").write_text(
        yaml.safe_dump({**d, "contract": contract}, sort_keys=False))


def _land(landing: Path, name: str, events: list[dict]) -> None:
    write_jsonl(landing / name, events)


def _to_v1_1(ws_path: Path, contract: str = V1_1) -> None:
    (ws_path / "catalog" / "contracts" / "customers@v1.1.yaml").write_text(contract)
    for d in (MRR, ALL):
        _dataset(ws_path, d, "contracts/customers@v1.1")


def _tables(ws_path: Path) -> dict:
    from lakepub.workspace import Workspace

    ws = Workspace.open(ws_path)
    return {name: ws.catalog.load_table((ws.config.namespace, name)) for name in TABLES}


def _state(ws_path: Path) -> dict:
    """Per table: (number of snapshots, current snapshot id, its schema id, the table's schema id)."""
    out = {}
    for name, t in _tables(ws_path).items():
        snap = t.current_snapshot()
        out[name] = (len(t.metadata.snapshots), snap.snapshot_id, snap.schema_id, t.metadata.current_schema_id)
    return out


def _query(cli, sql: str) -> list[dict]:
    r = cli("query", sql, "--format", "json")
    assert r.code == 0, r.err
    return r.json()


def _published(ws_path: Path, cli) -> None:
    landing = _setup(ws_path)
    _land(landing, "0001.jsonl", OLD)
    r = cli("run", "customers_mrr")
    assert r.code == 0, r.err


@pytest.mark.parametrize("variant", ["key-index", "duckdb-join", pytest.param("postgres", marks=pytest.mark.integration)])
def test_a_compatible_version_evolves_every_table_in_the_commit_of_its_first_data(ws_path: Path, cli, variant,
                                                                                   request):
    if variant == "duckdb-join":  # the ledger is looked up by a DuckDB join of snapshots from before the evolution
        config = ws_path / "lakepub.yaml"
        config.write_text(config.read_text().replace("key_index: true", "key_index: false"))
    if variant == "postgres":  # the same multi-table commit on a PostgreSQL catalog
        from tests.conftest import set_catalog

        set_catalog(ws_path, type="sql", uri=request.getfixturevalue("pg_url"), warehouse=".lakepub/warehouse")
    _published(ws_path, cli)
    _to_v1_1(ws_path)
    before = _state(ws_path)
    # Until data arrives under the new version nothing changes.
    assert cli("run", "customers_mrr").code == 0
    assert cli("status", "customers_all").code == 0
    assert _state(ws_path) == before
    _land(ws_path / "landing" / "customers" / "p0", "0002.jsonl", NEW)
    r = cli("run", "customers_mrr", "--format", "json")
    assert r.code == 0, r.err
    after = _state(ws_path)
    for name in TABLES:  # one new snapshot per table, carrying the next schema
        n, snap, snap_schema, schema = after[name]
        assert n == before[name][0] + 1 and snap != before[name][1], name
        evolves = name != "customers_mrr"  # the aggregate uses neither column: its schema stays
        assert snap_schema == schema == before[name][3] + evolves, name
    tables = _tables(ws_path)
    ledger = tables["customers__ledger"]
    assert str(ledger.schema().find_field("seats").field_type) == "long"
    assert str(ledger.schema().find_field("referrer").field_type) == "string"
    assert ledger.metadata.properties["lakepub.contract-ref"] == "contracts/customers@v1.1"
    assert "referrer" in tables["customers_all"].schema().column_names
    assert "referrer" not in tables["customers_mrr"].schema().column_names  # the aggregate does not use it
    [status] = cli("status", "customers_all", "--format", "json").json()
    assert status["positions"] == {"customers": {"p0": len(OLD) + len(NEW)}}

    # Old rows read back with nulls: DuckDB through the views and iceberg_scan, and pyiceberg.
    rows = {r["customer_id"]: (r["referrer"], r["seats"], r["plan"])
            for r in _query(cli, "SELECT customer_id, referrer, seats, plan FROM customers_all")}
    assert rows == {"c1": (None, 1, "pro"), "c2": ("partner", 2, "pro"), "c3": (None, 3, "pro"),
                    "c4": ("ads", 3_000_000_000, "pro")}
    from lakepub import duck

    con = duck.connect()
    scanned = con.execute(f"SELECT customer_id, version, referrer, seats FROM "
                          f"iceberg_scan('{ledger.metadata_location}') ORDER BY 1, 2").fetchall()
    assert scanned == [("c1", 1, None, 1), ("c2", 1, None, None), ("c2", 2, "partner", 2), ("c3", 1, None, 3),
                       ("c4", 1, "ads", 3_000_000_000)]
    arrow = ledger.scan(selected_fields=("customer_id", "version", "referrer", "seats")).to_arrow()
    assert sorted(zip(*(arrow.column(n).to_pylist() for n in ("customer_id", "version", "referrer", "seats")))) \
        == scanned
    current = tables["customers_all"].scan().to_arrow()
    assert dict(zip(current.column("customer_id").to_pylist(), current.column("referrer").to_pylist())) == \
        {"c1": None, "c2": "partner", "c3": None, "c4": "ads"}
    mrr = {(r["country"], r["plan"]): r["mrr_cents"] for r in _query(cli, "SELECT * FROM customers_mrr")}
    assert mrr == {("FR", "pro"): 1050, ("DE", "pro"): 900, ("US", "pro"): 700}
    for name in DATASETS:
        v = cli("verify", name, "--deep")
        assert v.code == 0, (v.out, v.err)
    d = cli("diff", "customers_all", str(before["customers_all"][1]), "current", "--format", "json")
    assert d.code == 0, d.err  # the snapshot before the evolution reads with the new column null
    groups = {g["group"]["customer_id"]: g for g in d.json()["groups"]}
    assert set(groups) == {"c2", "c4"} and groups["c4"]["status"] == "added"
    assert groups["c2"]["a"]["referrer"] is None and "referrer" in groups["c2"]["changed"]

    # Publishing goes on over the key index's old runs (they lack referrer, seats is int there),
    # and compaction merges them.
    more = [_event("c1", 2, "FR", "basic", 10, referrer="mail"), _event("c3", 2, "US", "pro", 700, seats=4)]
    _land(ws_path / "landing" / "customers" / "p0", "0003.jsonl", more)
    assert cli("run", "customers_all").code == 0
    assert cli("compact", "customers_mrr").code == 0
    rows = {r["customer_id"]: (r["referrer"], r["seats"], r["plan"])
            for r in _query(cli, "SELECT customer_id, referrer, seats, plan FROM customers_all")}
    assert rows["c1"] == ("mail", 1, "basic") and rows["c3"] == (None, 4, "pro")
    _land(ws_path / "landing" / "customers" / "p0", "0004.jsonl", [_event("c1", 2, "FR", "basic", 10, referrer="mail"),
                                                                    _event("c4", 2, "US", "pro", 60, referrer="ads")])
    assert cli("run", "customers_all").code == 0
    for name in DATASETS:
        v = cli("verify", name, "--deep")
        assert v.code == 0, (v.out, v.err)


def test_type_promotion_int_to_long_alone(ws_path: Path, cli):
    _published(ws_path, cli)
    promoted = CONTRACT.replace('version: "1.0"', 'version: "1.1"').replace(
        "seats: {type: int, nullable: true}", "seats: {type: long, nullable: true}")
    _to_v1_1(ws_path, promoted)
    before = _state(ws_path)
    _land(ws_path / "landing" / "customers" / "p0", "0002.jsonl", [_event("c9", 1, "FR", "pro", 5, seats=2**40)])
    r = cli("run", "customers_mrr")
    assert r.code == 0, r.err
    tables = _tables(ws_path)
    for name in ("customers_all", "customers__ledger"):
        assert str(tables[name].schema().find_field("seats").field_type) == "long"
        assert _state(ws_path)[name][2] == before[name][3] + 1
    assert _state(ws_path)["customers_mrr"][2] == before["customers_mrr"][3]  # no seats column: unchanged schema
    seats = {r["customer_id"]: r["seats"] for r in _query(cli, "SELECT customer_id, seats FROM customers_all")}
    assert seats == {"c1": 1, "c2": None, "c3": 3, "c9": 2**40}
    for name in DATASETS:
        assert cli("verify", name, "--deep").code == 0


BREAKING = {
    "a required field without default": (CONTRACT.replace('version: "1.0"', 'version: "1.1"')
                                         + "  referrer: string\n", "fields.referrer"),
    "a narrowing": (CONTRACT.replace('version: "1.0"', 'version: "1.1"').replace("mrr_cents: long", "mrr_cents: int"),
                    "fields.mrr_cents"),
    "a key change": (CONTRACT.replace('version: "1.0"', 'version: "1.1"').replace(
        "key: [customer_id]", "key: [customer_id, plan]").replace("plan: string", "plan: {type: string}"),
        "entity.key"),
    "a major version": (CONTRACT.replace('version: "1.0"', 'version: "2.0"').replace("mrr_cents: long",
                                                                                      "mrr_cents: int"),
                        "fields.mrr_cents"),
}


@pytest.mark.parametrize("case", list(BREAKING))
def test_a_breaking_version_is_refused_with_nothing_visible(ws_path: Path, cli, ws, case):
    _published(ws_path, cli)
    text, key = BREAKING[case]
    version = "2.0" if "2.0" in text else "1.1"
    (ws_path / "catalog" / "contracts" / f"customers@v{version}.yaml").write_text(text)
    for d in (MRR, ALL):
        _dataset(ws_path, d, f"contracts/customers@v{version}")
    before = {d: published_pointers(ws, d) for d in DATASETS}
    schemas = _state(ws_path)
    event = _event("c9", 1, "FR", "pro", 5, referrer="x") if "referrer" in text else _event("c9", 1, "FR", "pro", 5)
    _land(ws_path / "landing" / "customers" / "p0", "0002.jsonl", [event])
    r = cli("run", "customers_mrr", "--format", "json")
    assert r.code == 3, (r.out, r.err)
    err = json.loads(r.out)
    assert err["kind"] == "refused" and err["key"] == key and f"customers@v{version}.yaml" in err["file"]
    assert "not a compatible evolution of contracts/customers@v1.0" in err["message"]
    assert "new major version into a new dataset" in err["message"]
    assert {d: published_pointers(ws, d) for d in DATASETS} == before and _state(ws_path) == schemas


def test_a_crash_before_the_commit_leaves_the_old_schema_and_data_and_the_retry_is_recognised(ws_path: Path, cli,
                                                                                               cli_process, ws):
    _published(ws_path, cli)
    _to_v1_1(ws_path)
    before = {d: published_pointers(ws, d) for d in DATASETS}
    schemas = _state(ws_path)
    batch = write_jsonl(ws_path / "batch.jsonl", NEW)
    args = ("publish", "customers_mrr", "--events", str(batch), "--source", "customers",
            "--start", json.dumps({"p0": len(OLD)}), "--end", json.dumps({"p0": len(OLD) + len(NEW)}))
    for point in ("after-data-write", "before-pointer-swap"):
        crashed = cli_process(*args, env={"LAKEPUB_FAULT": point})
        assert crashed.code == -9, crashed.err
        assert {d: published_pointers(ws, d) for d in DATASETS} == before and _state(ws_path) == schemas
        rows = _query(cli, "SELECT * FROM customers_all ORDER BY customer_id")
        assert [r["customer_id"] for r in rows] == ["c1", "c2", "c3"] and "referrer" not in rows[0]  # old schema
    crashed = cli_process(*args, env={"LAKEPUB_FAULT": "after-commit"})
    assert crashed.code == -9
    after = _state(ws_path)
    assert all(after[n][2] == schemas[n][3] + 1 for n in ("customers_all", "customers__ledger"))
    retry = cli_process(*args)
    assert retry.code == 0 and "already published" in retry.out, (retry.out, retry.err)
    assert _state(ws_path) == after
    for name in DATASETS:
        assert cli("verify", name, "--deep").code == 0


def test_a_ledger_compacted_before_the_evolution_gains_the_field_in_its_history_too(ws_path: Path, cli):
    landing = _setup(ws_path)
    _land(landing, "0001.jsonl", OLD + [_event("c1", 2, "FR", "pro", 1100)])
    assert cli("run", "customers_mrr").code == 0
    assert cli("compact", "customers_mrr").code == 0  # adds history (version, state fields) to the ledger
    _to_v1_1(ws_path)
    _land(landing, "0002.jsonl", NEW + [_event("c1", 3, "FR", "pro", 1200, referrer="x")])
    r = cli("run", "customers_mrr")
    assert r.code == 0, r.err
    ledger = _tables(ws_path)["customers__ledger"]
    history = ledger.schema().find_field("history").field_type.element_type
    types = {f.name: str(f.field_type) for f in history.fields}
    assert list(types)[-1] == "referrer" and types["seats"] == "long"
    assert cli("compact", "customers_mrr").code == 0
    # A replay of the compacted-away version with its original payload is still a duplicate.
    _land(landing, "0003.jsonl", [_event("c1", 1, "FR", "pro", 1000)])
    r = cli("run", "customers_mrr", "--format", "json")
    assert r.code == 0, r.err
    for name in DATASETS:
        v = cli("verify", name, "--deep")
        assert v.code == 0, (v.out, v.err)
    rows = {r["customer_id"]: r["referrer"] for r in _query(cli, "SELECT customer_id, referrer FROM customers_all")}
    assert rows == {"c1": "x", "c2": "partner", "c3": None, "c4": "ads"}


PICKED = {"name": "customers_picked", "source": "customers", "entity": "customers",
          "projection": {"kind": "current", "columns": ["plan", "mrr_cents"]}, "partition": "none"}


def test_a_listed_column_evolves_only_for_a_new_field(ws_path: Path, cli, ws):
    landing = _setup(ws_path)
    _dataset(ws_path, PICKED, "contracts/customers@v1.0")
    _land(landing, "0001.jsonl", OLD)
    assert cli("run", "customers_mrr").code == 0
    before = published_pointers(ws, "customers_picked")
    # seats is no new field: its published values would be null where the ledger has them.
    listed = {**PICKED, "projection": {"kind": "current", "columns": ["plan", "mrr_cents", "seats"]}}
    _dataset(ws_path, listed, "contracts/customers@v1.0")
    _land(landing, "0002.jsonl", [_event("c9", 1, "FR", "pro", 5)])
    r = cli("run", "customers_mrr")
    assert r.code == 2 and "customers_picked.yaml" in r.err and "projection.columns" in r.err, r.err
    assert published_pointers(ws, "customers_picked") == before
    # referrer is: v1.1 adds it, and listing it evolves the table with the data.
    _to_v1_1(ws_path)
    listed = {**PICKED, "projection": {"kind": "current", "columns": ["plan", "mrr_cents", "referrer"]}}
    _dataset(ws_path, listed, "contracts/customers@v1.1")
    _land(landing, "0002.jsonl", [_event("c9", 1, "FR", "pro", 5, referrer="web")])
    r = cli("run", "customers_mrr")
    assert r.code == 0, r.err
    rows = {r["customer_id"]: r["referrer"] for r in _query(cli, "SELECT * FROM customers_picked")}
    assert rows == {"c1": None, "c2": None, "c3": None, "c9": "web"}
    assert cli("verify", "customers_picked", "--deep").code == 0


def test_ordered_commit_a_crash_between_the_ledger_and_the_table_is_finished_by_the_retry(ws_path: Path, cli,
                                                                                           cli_process, ws):
    from tests.conftest import set_commit_mode

    set_commit_mode(ws_path, "ordered")  # one dataset per entity: the ledger commits first, evolved
    landing = _setup(ws_path)
    (ws_path / "catalog" / "datasets" / "customers_mrr.yaml").unlink()
    _land(landing, "0001.jsonl", OLD)
    assert cli("run", "customers_all").code == 0
    (ws_path / "catalog" / "contracts" / "customers@v1.1.yaml").write_text(V1_1)
    _dataset(ws_path, ALL, "contracts/customers@v1.1")
    _land(landing, "0002.jsonl", NEW)
    crashed = cli_process("run", "customers_all", env={"LAKEPUB_FAULT": "before-pointer-swap"})
    assert crashed.code == -9, crashed.err
    catalog = ws.catalog
    table = catalog.load_table(("lakepub", "customers_all"))
    assert "referrer" not in table.schema().column_names  # the published table is untouched
    assert "referrer" in catalog.load_table(("lakepub", "customers__ledger")).schema().column_names
    r = cli("run", "customers_all")
    assert r.code == 0, r.err
    rows = {r["customer_id"]: (r["referrer"], r["seats"]) for r in _query(cli, "SELECT * FROM customers_all")}
    assert rows == {"c1": (None, 1), "c2": ("partner", 2), "c3": (None, 3), "c4": ("ads", 3_000_000_000)}
    v = cli("verify", "customers_all", "--deep")
    assert v.code == 0, (v.out, v.err)


def test_two_writers_racing_to_evolve_evolve_once_and_both_publish(ws_path: Path, cli, monkeypatch):
    """Two publishers of different sources, both under v1.1: the second commits in the middle of
    the first's commit (after it staged its evolution); the first loses the race on the schema it
    planned on, reloads, finds the tables evolved and publishes its batch on top."""
    from lakepub.publish import publisher as publisher_module
    from lakepub.workspace import Workspace

    _published(ws_path, cli)
    _to_v1_1(ws_path)
    before = _state(ws_path)
    first, second = Workspace.open(ws_path), Workspace.open(ws_path)
    real, calls = publisher_module.commit_atomically, []

    def racing(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:  # the other writer commits first (its own commit is call 2)
            second.publish("customers_mrr", [_event("c8", 1, "US", "basic", 8, referrer="b")], source="other",
                           start={}, end={"p0": 1})
        return real(*args, **kwargs)

    monkeypatch.setattr(publisher_module, "commit_atomically", racing)
    result = first.publish("customers_mrr", NEW, start={"p0": len(OLD)}, end={"p0": len(OLD) + len(NEW)})
    monkeypatch.setattr(publisher_module, "commit_atomically", real)
    assert result.status == "published" and result.attempts == 2 and len(calls) == 3
    after = _state(ws_path)
    for name in ("customers_all", "customers__ledger"):
        assert after[name][3] == before[name][3] + 1 and after[name][0] == before[name][0] + 2  # evolved once
    rows = {r["customer_id"]: r["referrer"] for r in _query(cli, "SELECT customer_id, referrer FROM customers_all")}
    assert rows == {"c1": None, "c2": "partner", "c3": None, "c4": "ads", "c8": "b"}
    for name in DATASETS:
        assert cli("verify", name, "--deep").code == 0


def test_compaction_waits_for_the_evolution_to_arrive_with_data(ws_path: Path, cli, ws):
    landing = _setup(ws_path)
    _land(landing, "0001.jsonl", OLD + [_event("c1", 2, "FR", "pro", 1100)])
    assert cli("run", "customers_mrr").code == 0
    _to_v1_1(ws_path)
    before = {d: published_pointers(ws, d) for d in DATASETS}
    for name in DATASETS:  # verify reads the tables as published, before the evolution
        v = cli("verify", name, "--deep")
        assert v.code == 0, (v.out, v.err)
    r = cli("compact", "customers_mrr")
    assert r.code == 3 and "customers@v1.1 is not applied to the tables yet" in r.err, r.err
    assert "add referrer" in r.err and "promote seats to long" in r.err
    assert {d: published_pointers(ws, d) for d in DATASETS} == before
    _land(landing, "0002.jsonl", NEW)
    assert cli("run", "customers_mrr").code == 0
    r = cli("compact", "customers_mrr")
    assert r.code == 0, r.err
    for name in DATASETS:
        assert cli("verify", name, "--deep").code == 0


NUMBERS = """
name: meters
version: "1.0"
entity: {key: [meter_id], version: version}
fields:
  meter_id: string
  version: long
  site: string
  reading: {type: float, nullable: true}
  price: {type: "decimal(10,2)", nullable: true}
"""


def test_float_to_double_and_decimal_precision_rewrite_every_partition_so_verify_holds(ws_path: Path, cli):
    """A float rendered as a double is another text (0.1f is 0.10000000149011612): a partition the
    evolving batch does not touch still gets rewritten and re-checksummed, or verify would fail."""
    (ws_path / "catalog" / "contracts" / "meters@v1.0.yaml").write_text(NUMBERS)
    table = {"name": "meters_now", "source": "meters", "entity": "meters", "projection": {"kind": "current"},
             "partition": "identity(site)"}
    _dataset(ws_path, table, "contracts/meters@v1.0")
    landing = ws_path / "landing" / "meters" / "p0"
    landing.mkdir(parents=True)
    _land(landing, "0001.jsonl", [{"meter_id": "m1", "version": 1, "site": "a", "reading": 0.1, "price": "12.30"},
                                  {"meter_id": "m2", "version": 1, "site": "b", "reading": 2.5, "price": "1.05"}])
    assert cli("run", "meters_now").code == 0
    (ws_path / "catalog" / "contracts" / "meters@v1.1.yaml").write_text(
        NUMBERS.replace('version: "1.0"', 'version: "1.1"').replace("type: float", "type: double")
        .replace("decimal(10,2)", "decimal(12,2)"))
    _dataset(ws_path, table, "contracts/meters@v1.1")
    _land(landing, "0002.jsonl", [{"meter_id": "m3", "version": 1, "site": "b", "reading": 0.1,
                                   "price": "1234567890.12"}])  # site a is not touched
    r = cli("run", "meters_now", "--format", "json")
    assert r.code == 0, r.err
    t = _tables_of(ws_path, "meters_now")
    assert [str(t.schema().find_field(n).field_type) for n in ("reading", "price")] == ["double", "decimal(12, 2)"]
    [log] = cli("log", "meters_now", "--limit", "1", "--format", "json").json()
    assert log["partitions"] == ["a", "b"]  # both rewritten
    v = cli("verify", "meters_now", "--deep")
    assert v.code == 0, (v.out, v.err)
    rows = {r["meter_id"]: (r["reading"], r["price"]) for r in _query(cli, "SELECT meter_id, reading, CAST(price AS VARCHAR) AS price FROM meters_now")}
    assert rows["m3"] == (0.1, "1234567890.12") and abs(rows["m1"][0] - 0.1) < 1e-7 and rows["m1"][1] == "12.30"


def _tables_of(ws_path: Path, name: str):
    from lakepub.workspace import Workspace

    ws = Workspace.open(ws_path)
    return ws.catalog.load_table((ws.config.namespace, name))


def test_a_merge_on_read_current_table_evolves_with_its_data(ws_path: Path, cli):
    """A merge-on-read current table (position deletes live) gains the new column in the commit
    of its first v1.1 data: the located rows of files written before the evolution are read with
    the column null (the merge used to fail with an internal error), later deletes still apply,
    and DuckDB, pyiceberg and verify --deep agree."""
    from lakepub.workspace import Workspace

    landing = _setup(ws_path)
    mor = {**ALL, "write_mode": "merge-on-read", "fold_threshold": 1.0}  # its delete files stay live
    _dataset(ws_path, mor, "contracts/customers@v1.0")
    _land(landing, "0001.jsonl", OLD)
    assert cli("run", "customers_mrr").code == 0
    _land(landing, "0002.jsonl", [{**OLD[0], "version": 2, "mrr_cents": 1}])  # a delete file on c1's old row
    assert cli("run", "customers_mrr").code == 0
    (ws_path / "catalog" / "contracts" / "customers@v1.1.yaml").write_text(V1_1)
    _dataset(ws_path, MRR, "contracts/customers@v1.1")
    _dataset(ws_path, mor, "contracts/customers@v1.1")
    _land(landing, "0003.jsonl", NEW)
    r = cli("run", "customers_mrr")
    assert r.code == 0, r.err
    _land(landing, "0004.jsonl", [{**NEW[1], "version": 3, "mrr_cents": 5}])
    r = cli("run", "customers_mrr")
    assert r.code == 0, r.err
    r = cli("verify", "customers_all", "--deep")
    assert r.code == 0, r.out + r.err
    rows = _query(cli, "SELECT customer_id, mrr_cents, referrer FROM customers_all ORDER BY customer_id")
    assert rows == [{"customer_id": "c1", "mrr_cents": 1, "referrer": None},
                    {"customer_id": "c2", "mrr_cents": 5, "referrer": "partner"},
                    {"customer_id": "c3", "mrr_cents": 700, "referrer": None},
                    {"customer_id": "c4", "mrr_cents": 50, "referrer": "ads"}]
    ws = Workspace.open(ws_path)
    table = ws.catalog.load_table((ws.config.namespace, "customers_all"))
    got = table.scan().to_arrow().select(["customer_id", "mrr_cents", "referrer"]).to_pylist()
    assert sorted(got, key=lambda r: r["customer_id"]) == rows
