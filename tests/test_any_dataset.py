"""Any entity, declared in YAML only: the issue's customers example through the CLI.

A customers contract (key, version, deleted flag, typed fields), an aggregate (live MRR per
country and plan) and a current-state table of the same entity, published together from one
landing source; a dataset added once history exists; a changed definition, an undeclared input
field and an overflowing sum refused with nothing published. Every published table is read back
through DuckDB (``lakepub query``) and compared with an oracle over the accepted events.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import yaml

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
  signup_day: date
  deleted: boolean
"""
MRR = {"name": "customers_mrr", "source": "customers", "contract": "contracts/customers@v1.0", "entity": "customers",
       "projection": {"kind": "aggregate", "group_by": ["country", "plan"],
                      "measures": {"mrr_cents": "sum(mrr_cents)", "customers": "count()"}},
       "partition": "identity(country)"}
CURRENT = {"name": "customers_current", "source": "customers", "contract": "contracts/customers@v1.0",
           "entity": "customers",
           "projection": {"kind": "current", "columns": ["customer_id", "country", "plan", "mrr_cents", "signup_day"]},
           "partition": "bucket(8, customer_id)"}
BY_PLAN = {"name": "customers_by_plan", "source": "customers", "contract": "contracts/customers@v1.0",
           "entity": "customers",
           "projection": {"kind": "aggregate", "group_by": ["plan"], "measures": {"n": "count()", "mrr": "sum(mrr_cents)"}}}


def _event(cid: str, version: int, country: str | None, plan: str, mrr: int, deleted: bool = False) -> dict:
    if deleted:
        return {"customer_id": cid, "version": version, "country": None, "plan": None, "mrr_cents": None,
                "signup_day": None, "deleted": True}
    return {"customer_id": cid, "version": version, "country": country, "plan": plan, "mrr_cents": mrr,
            "signup_day": "2025-01-15", "deleted": False}


STREAM_1 = [
    _event("c1", 1, "FR", "pro", 1000), _event("c2", 1, "DE", "basic", 200), _event("c3", 1, None, "pro", 700),
    _event("c1", 1, "FR", "pro", 1000),  # a duplicate
    _event("c4", 2, "FR", "basic", 300), _event("c4", 1, "US", "basic", 999),  # a late older version
    _event("c5", 1, "US", "pro", 5000),
]
STREAM_2 = [
    _event("c1", 2, "DE", "pro", 1200),  # moves to another country (another partition)
    _event("c5", 2, None, None, None, deleted=True), _event("c5", 1, "US", "pro", 5000),  # tombstone, old replay
    _event("c3", 3, "US", "basic", 100), _event("c6", 1, "DE", "pro", 50),
]


def _setup(ws_path: Path, *datasets: dict) -> Path:
    (ws_path / "catalog" / "contracts" / "customers@v1.0.yaml").write_text(CONTRACT)
    for d in datasets:
        (ws_path / "catalog" / "datasets" / f"{d['name']}.yaml").write_text(yaml.safe_dump(d, sort_keys=False))
    landing = ws_path / "landing" / "customers" / "p0"
    landing.mkdir(parents=True)
    return landing


def _land(landing: Path, name: str, events: list[dict]) -> None:
    (landing / name).write_text("".join(json.dumps(e) + "\n" for e in events))


def _live(events: list[dict]) -> dict[str, dict]:
    latest: dict[str, dict] = {}
    for e in events:
        if e["customer_id"] not in latest or e["version"] > latest[e["customer_id"]]["version"]:
            latest[e["customer_id"]] = e
    return {k: e for k, e in latest.items() if not e["deleted"]}


def _oracle_mrr(events: list[dict]) -> dict:
    out: dict = defaultdict(lambda: [0, 0])
    for e in _live(events).values():
        out[(e["country"], e["plan"])][0] += e["mrr_cents"]
        out[(e["country"], e["plan"])][1] += 1
    return {k: tuple(v) for k, v in out.items()}


def _query(cli, sql: str) -> list[dict]:
    res = cli("query", sql, "--format", "json")
    assert res.code == 0, res.err
    return res.json()


def _published_mrr(cli) -> dict:
    return {(r["country"], r["plan"]): (r["mrr_cents"], r["customers"])
            for r in _query(cli, "SELECT * FROM customers_mrr")}


def _published_current(cli) -> dict:
    return {r["customer_id"]: (r["country"], r["plan"], r["mrr_cents"])
            for r in _query(cli, "SELECT * FROM customers_current")}


def test_customers_published_from_yaml_only(ws_path: Path, cli):
    landing = _setup(ws_path, MRR, CURRENT)
    _land(landing, "00000.jsonl", STREAM_1)
    res = cli("run", "customers_mrr", "--format", "json")
    assert res.code == 0, res.err
    assert _published_mrr(cli) == _oracle_mrr(STREAM_1)
    assert _published_current(cli) == {k: (e["country"], e["plan"], e["mrr_cents"]) for k, e in _live(STREAM_1).items()}

    _land(landing, "00001.jsonl", STREAM_2)
    res = cli("run", "customers_current", "--format", "json")
    assert res.code == 0, res.err
    events = STREAM_1 + STREAM_2
    assert _published_mrr(cli) == _oracle_mrr(events)
    assert _published_current(cli) == {k: (e["country"], e["plan"], e["mrr_cents"]) for k, e in _live(events).items()}
    [mrr] = cli("status", "customers_mrr", "--format", "json").json()
    [cur] = cli("status", "customers_current", "--format", "json").json()
    assert mrr["positions"] == cur["positions"] == {"customers": {"p0": len(events)}}
    assert mrr["totals"]["deletes"] == 1 and mrr["totals"]["duplicates"] == 2  # c1/v1 again, c5/v1 after its delete
    for name in ("customers_mrr", "customers_current"):
        assert cli("verify", name, "--deep").code == 0

    # A dataset added once the entity has history is built from the ledger, then kept with the others.
    (ws_path / "catalog" / "datasets" / "customers_by_plan.yaml").write_text(yaml.safe_dump(BY_PLAN, sort_keys=False))
    assert cli("run", "customers_by_plan").code == 0
    by_plan: dict = defaultdict(lambda: [0, 0])
    for e in _live(events).values():
        by_plan[e["plan"]][0] += 1
        by_plan[e["plan"]][1] += e["mrr_cents"]
    assert {r["plan"]: (r["n"], r["mrr"]) for r in _query(cli, "SELECT * FROM customers_by_plan")} == \
        {k: tuple(v) for k, v in by_plan.items()}
    more = [_event("c7", 1, "FR", "basic", 10)]
    _land(landing, "00002.jsonl", more)
    assert cli("run", "customers_by_plan").code == 0
    assert _published_mrr(cli) == _oracle_mrr(events + more)
    for name in ("customers_mrr", "customers_current", "customers_by_plan"):
        assert cli("verify", name, "--deep").code == 0


def test_refusals_name_file_key_and_change_nothing(ws_path: Path, cli):
    landing = _setup(ws_path, MRR, CURRENT)
    _land(landing, "00000.jsonl", STREAM_1)
    assert cli("run", "customers_mrr").code == 0
    before = published_pointers_of(ws_path)

    # An undeclared input field.
    _land(landing, "00001.jsonl", [{**_event("c9", 1, "FR", "pro", 1), "nickname": "x"}])
    res = cli("run", "customers_mrr")
    assert res.code == 2 and "00001.jsonl:1" in res.err and "nickname" in res.err, res.err
    assert published_pointers_of(ws_path) == before

    # A sum leaving int64.
    _land(landing, "00001.jsonl", [_event("c9", 1, "FR", "pro", 2**62), _event("c10", 1, "FR", "pro", 2**62)])
    res = cli("run", "customers_mrr")
    assert res.code == 2 and "overflow" in res.err and "mrr_cents" in res.err, res.err
    assert published_pointers_of(ws_path) == before

    # A changed meaning of a published dataset.
    path = ws_path / "catalog" / "datasets" / "customers_mrr.yaml"
    path.write_text(yaml.safe_dump({**MRR, "projection": {**MRR["projection"], "group_by": ["plan", "country"]}}))
    _land(landing, "00001.jsonl", [_event("c9", 1, "FR", "pro", 1)])
    res = cli("run", "customers_mrr")
    assert res.code == 2 and "customers_mrr.yaml" in res.err and "projection.group_by" in res.err, res.err
    assert "['country', 'plan']" in res.err and "['plan', 'country']" in res.err
    assert published_pointers_of(ws_path) == before

    # The same version with another payload.
    path.write_text(yaml.safe_dump(MRR))
    _land(landing, "00001.jsonl", [_event("c1", 1, "FR", "pro", 999)])
    res = cli("run", "customers_mrr")
    assert res.code == 3 and "c1" in res.err and "conflict" in res.err, res.err
    assert published_pointers_of(ws_path) == before


def test_a_contract_typo_is_one_line_naming_file_and_key(ws_path: Path, cli):
    _setup(ws_path, MRR)
    path = ws_path / "catalog" / "contracts" / "customers@v1.0.yaml"
    path.write_text(CONTRACT.replace("plan: string", "plan: banana"))
    res = cli("status", "customers_mrr")
    assert res.code == 2 and "customers@v1.0.yaml" in res.err and "fields.plan" in res.err and "banana" in res.err
    path.write_text(CONTRACT)
    bad = {**MRR, "projection": {**MRR["projection"], "measures": {"top": "max(mrr_cents)", "customers": "count()"}}}
    (ws_path / "catalog" / "datasets" / "customers_mrr.yaml").write_text(yaml.safe_dump(bad))
    res = cli("status", "customers_mrr")
    assert res.code == 2 and "projection.measures.top" in res.err and "retraction" in res.err, res.err


def published_pointers_of(ws_path: Path) -> tuple:
    from lakepub.workspace import Workspace

    ws = Workspace.open(ws_path)
    out = []
    for name in ("customers_mrr", "customers_current", "customers__ledger"):
        try:
            out.append(ws.catalog.load_table((ws.config.namespace, name)).metadata_location)
        except Exception:  # noqa: BLE001 - not created yet
            out.append(None)
    return tuple(out)


def test_an_unpartitioned_dataset_survives_the_janitor(ws_path: Path, cli):
    landing = _setup(ws_path, BY_PLAN)
    _land(landing, "00000.jsonl", STREAM_1)
    assert cli("run", "customers_by_plan").code == 0
    before = _query(cli, "SELECT * FROM customers_by_plan ORDER BY plan")
    res = cli("janitor", "--older-than", "0s", "--retain-last", "1", "--format", "json")
    assert res.code == 0, res.err
    assert "lakepub.customers__ledger" in {t["table"] for t in res.json()["tables"]}  # the entity's ledger, once
    assert _query(cli, "SELECT * FROM customers_by_plan ORDER BY plan") == before
    assert cli("verify", "customers_by_plan", "--deep").code == 0


def test_a_changed_contract_or_entity_of_published_data_is_refused(ws_path: Path, cli):
    landing = _setup(ws_path, MRR, CURRENT)
    _land(landing, "00000.jsonl", STREAM_1)
    assert cli("run", "customers_mrr").code == 0
    before = published_pointers_of(ws_path)
    _land(landing, "00001.jsonl", [_event("c2", 2, "DE", "basic", 250)])
    contract = ws_path / "catalog" / "contracts" / "customers@v1.0.yaml"
    for edited, key in ((CONTRACT.replace("key: [customer_id]", "key: [customer_id, plan]"), "entity.key"),
                        (CONTRACT + "  email: {type: string, nullable: true}\n", "fields.email")):
        contract.write_text(edited)
        res = cli("run", "customers_mrr")
        assert res.code == 2 and "customers@v1.0.yaml" in res.err and f"'{key}'" in res.err, res.err
        assert published_pointers_of(ws_path) == before
    contract.write_text(CONTRACT)
    path = ws_path / "catalog" / "datasets" / "customers_current.yaml"
    path.write_text(yaml.safe_dump({**CURRENT, "entity": "cust2"}))
    res = cli("run", "customers_current")
    assert res.code == 2 and "'entity'" in res.err and "cust2" in res.err, res.err
    assert published_pointers_of(ws_path) == before


def test_a_dataset_left_out_while_its_siblings_published_is_rebuilt(ws_path: Path, cli):
    landing = _setup(ws_path, MRR, CURRENT)
    _land(landing, "00000.jsonl", STREAM_1)
    assert cli("run", "customers_mrr").code == 0
    current = ws_path / "catalog" / "datasets" / "customers_current.yaml"
    current.rename(ws_path / "customers_current.yaml.off")
    _land(landing, "00001.jsonl", STREAM_2)
    assert cli("run", "customers_mrr").code == 0
    (ws_path / "customers_current.yaml.off").rename(current)
    more = [_event("c8", 1, "US", "pro", 5)]
    _land(landing, "00002.jsonl", more)
    assert cli("run", "customers_mrr").code == 0
    events = STREAM_1 + STREAM_2 + more
    assert _published_current(cli) == {k: (e["country"], e["plan"], e["mrr_cents"]) for k, e in _live(events).items()}
    assert _published_mrr(cli) == _oracle_mrr(events)
    assert cli("verify", "customers_current", "--deep").code == 0


def test_conflicts_name_the_key_field_and_count_for_every_dataset_of_the_entity(ws_path: Path, cli):
    landing = _setup(ws_path, MRR, CURRENT)
    _land(landing, "00000.jsonl", STREAM_1)
    assert cli("run", "customers_mrr").code == 0
    _land(landing, "00001.jsonl", [_event("c1", 1, "FR", "pro", 999)])
    res = cli("run", "customers_current")
    assert res.code == 3 and "customer_id='c1'" in res.err, res.err
    for name in ("customers_mrr", "customers_current"):
        assert cli("status", name, "--format", "json").json()[0]["conflicts"] == 1


def test_a_dataset_named_like_a_ledger_is_refused(ws_path: Path, cli):
    _setup(ws_path, {**MRR, "name": "orders_daily__ledger"})
    res = cli("status")
    assert res.code == 2 and "orders_daily__ledger" in res.err and "'name'" in res.err, res.err
