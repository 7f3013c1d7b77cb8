"""DUAL_WRITE: a breaking major version (``mrr_cents`` narrowed from long to int) is built beside
the published one, published with it in one atomic commit per batch, and swapped in by the
promotion to DEFAULT (lakepub/publish/dual.py, lakepub/contract/dual_write.py). Real tables,
read back by DuckDB."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lakepub import duck
from lakepub.workspace import Workspace
from tests.test_any_dataset import STREAM_1, STREAM_2, _event, _land, _live, _setup
from tests.test_lifecycle import V1_0
from tests.test_shadow import ALL_COLUMNS

V2 = (V1_0.replace('version: "1.0"', 'version: "2.0"').replace("status: DEFAULT\n", "")
      .replace("mrr_cents: {type: long, unit: EUR/100}", "mrr_cents: {type: int, unit: EUR/100}")
      + "compat_mode: break\nshadow: {enabled: true}\n")
REF = "contracts/customers@v2.0"


def _pointers(root: Path, *names: str) -> dict[str, str | None]:
    catalog = Workspace.open(root).catalog
    return {n: (catalog.load_table(("lakepub", n)).metadata_location if catalog.table_exists(("lakepub", n)) else None)
            for n in names}


TABLES = ("customers_all", "customers__ledger", "customers_all__v2", "customers__v2__ledger")


def _scan(root: Path, table: str, sql: str = "SELECT customer_id, mrr_cents FROM t ORDER BY 1") -> tuple[list, str]:
    """The rows and the mrr_cents type of a table's current metadata, read by DuckDB."""
    location = Workspace.open(root).catalog.load_table(("lakepub", table)).metadata_location
    con = duck.connect()
    con.execute(f"CREATE OR REPLACE TEMP VIEW t AS SELECT * FROM {duck.scan_sql(location)}")
    kind = con.execute("SELECT data_type FROM information_schema.columns WHERE table_name = 't' "
                       "AND column_name = 'mrr_cents'").fetchone()[0]
    return con.execute(sql).fetchall(), kind


def _oracle(events: list[dict]) -> list[tuple]:
    return sorted((k, e["mrr_cents"]) for k, e in _live(events).items())


def _dual_write(ws_path: Path, cli) -> Path:
    """v1.0 published from the landing; v2.0 promoted step by step to DUAL_WRITE."""
    landing = _setup(ws_path, ALL_COLUMNS)
    contracts = ws_path / "catalog" / "contracts"
    (contracts / "customers@v1.0.yaml").write_text(V1_0)
    _land(landing, "0001.jsonl", STREAM_1)
    assert cli("run", "customers_all").code == 0
    (contracts / "customers@v2.0.yaml").write_text(V2)
    assert cli("contract", "promote", REF, "--to", "VALIDATED").code == 0
    assert cli("shadow", "customers_all", "--contract", REF).code == 0
    assert cli("contract", "promote", REF, "--to", "CANARY").code == 0
    r = cli("contract", "promote", REF, "--to", "DUAL_WRITE", "--format", "json")
    assert r.code == 0, r.err
    assert {c["name"] for c in r.json()["conditions"] if c["ok"]} >= {"shadow", "major version", "atomic commit",
                                                                       "projection", "free names"}
    return landing


def test_both_versions_are_published_in_one_commit_and_the_new_one_swapped_in(ws_path: Path, cli):
    landing = _dual_write(ws_path, cli)
    before = _pointers(ws_path, *TABLES)
    assert before["customers_all__v2"] is None
    # Leaving the window before the new version is built is refused, naming what to run.
    r = cli("contract", "promote", REF, "--to", "DEFAULT")
    assert r.code == 3 and "customers_all__v2 does not exist" in r.err and "run 'lakepub run'" in r.err, r.err

    # 1. Built beside from the landing: the published tables do not move.
    r = cli("run", "customers_all")
    assert r.code == 0, r.err
    built = _pointers(ws_path, *TABLES)
    assert built["customers_all"] == before["customers_all"] and built["customers__ledger"] == before["customers__ledger"]
    assert _scan(ws_path, "customers_all__v2") == (_oracle(STREAM_1), "INTEGER")

    # 2. Dual write: one run, both versions advance with the same positions.
    _land(landing, "0002.jsonl", STREAM_2)
    r = cli("run", "customers_all")
    assert r.code == 0, r.err
    after = _pointers(ws_path, *TABLES)
    assert all(after[n] != built[n] for n in TABLES)
    old_rows, old_type = _scan(ws_path, "customers_all")
    assert (old_rows, old_type) == (_oracle(STREAM_1 + STREAM_2), "BIGINT")  # old readers: old version's rows
    assert _scan(ws_path, "customers_all__v2") == (_oracle(STREAM_1 + STREAM_2), "INTEGER")
    ws = Workspace.open(ws_path)
    from lakepub.store.record import latest_record

    records = [latest_record(ws.catalog.load_table(("lakepub", n))) for n in ("customers_all", "customers_all__v2")]
    assert records[0].positions == records[1].positions == {"customers": {"p0": 12}}
    assert records[0].contract == "contracts/customers@v1.0" and records[1].contract == REF
    # The published view (lakepub query) is still the old version.
    q = cli("query", "SELECT count(*) AS n FROM customers_all", "--format", "json")
    assert q.json() == [{"n": len(_live(STREAM_1 + STREAM_2))}]
    # The new version is queryable beside it under its documented name.
    q = cli("query", "SELECT any_value(typeof(mrr_cents)) AS t, sum(mrr_cents) AS s FROM customers_all__v2", "--format", "json")
    assert q.code == 0 and q.json() == [{"t": "INTEGER", "s": sum(v for _, v in _oracle(STREAM_1 + STREAM_2))}], q.err

    # The janitor keeps both versions' files (each is a table of the catalog).
    r = cli("janitor", "--older-than", "0s", "--retain-last", "1")
    assert r.code == 0, r.err
    assert _scan(ws_path, "customers_all__v2")[0] == _scan(ws_path, "customers_all")[0] == _oracle(STREAM_1 + STREAM_2)
    after = _pointers(ws_path, *TABLES)

    # 3. A value the new version refuses (out of int) refuses the batch for both: nothing moves.
    _land(landing, "0003.jsonl", [_event("c7", 1, "FR", "pro", 3_000_000_000)])
    r = cli("run", "customers_all")
    assert r.code == 2 and "mrr_cents" in r.err, (r.code, r.err)
    assert _pointers(ws_path, *TABLES) == after
    (landing / "0003.jsonl").write_text(json.dumps(_event("c7", 1, "FR", "pro", 700)) + "\n")
    assert cli("run", "customers_all").code == 0

    # 4. DEFAULT: one swap; the published name reads the new version, the old one is kept.
    r = cli("contract", "promote", REF, "--to", "DEFAULT")
    assert r.code == 0, r.err
    everything = STREAM_1 + STREAM_2 + [_event("c7", 1, "FR", "pro", 700)]
    assert _scan(ws_path, "customers_all") == (_oracle(everything), "INTEGER")
    assert _scan(ws_path, "customers_all__v1") == (_oracle(everything), "BIGINT")
    assert _pointers(ws_path, "customers_all__v2", "customers__v2__ledger") == {
        "customers_all__v2": None, "customers__v2__ledger": None}
    assert "contract: contracts/customers@v2.0" in (ws_path / "catalog" / "datasets" / "customers_all.yaml").read_text()
    r = cli("verify", "customers_all", "--deep")  # the swapped-in ledger and table agree
    assert r.code == 0, (r.out, r.err)
    for _ in range(2):  # a first run marks superseded folders, a second deletes them: the swap supersedes none
        assert cli("janitor", "--older-than", "0s", "--retain-last", "1").code == 0
    assert _scan(ws_path, "customers_all")[0] == _scan(ws_path, "customers_all__v1")[0] == _oracle(everything)
    # Publishing goes on under v2 alone, and v1 is deprecated.
    _land(landing, "0004.jsonl", [_event("c8", 1, "DE", "pro", 5)])
    r = cli("run", "customers_all")
    assert r.code == 0, r.err
    assert _scan(ws_path, "customers_all") == (_oracle(everything + [_event("c8", 1, "DE", "pro", 5)]), "INTEGER")
    assert _pointers(ws_path, "customers_all__v2")["customers_all__v2"] is None  # no dual write any more
    assert cli("query", "SELECT 1 FROM customers_all__v2").code == 2  # its view went with it
    assert cli("contract", "promote", "contracts/customers@v1.0", "--to", "DEPRECATED").code == 0
    # Readers not migrated yet read the old version under its kept name until it is retired.
    q = cli("query", "SELECT any_value(typeof(mrr_cents)) AS t, count(*) AS n FROM customers_all__v1", "--format", "json")
    assert q.code == 0 and q.json() == [{"t": "BIGINT", "n": len(_live(everything))}], q.err
    r = cli("contract", "promote", "contracts/customers@v1.0", "--to", "RETIRED")
    assert r.code == 0, r.err
    assert cli("query", "SELECT 1 FROM customers_all__v1").code == 2


def test_a_crash_before_the_pointer_swap_leaves_neither_version_moved(ws_path: Path, cli, cli_process):
    landing = _dual_write(ws_path, cli)
    assert cli("run", "customers_all").code == 0  # built beside
    _land(landing, "0002.jsonl", STREAM_2)
    before = _pointers(ws_path, *TABLES)
    for point in ("after-data-write", "before-pointer-swap"):
        r = cli_process("run", "customers_all", env={"LAKEPUB_FAULT": point})
        assert r.code == -9, (point, r.code, r.err)
        assert _pointers(ws_path, *TABLES) == before, point
    r = cli_process("run", "customers_all", env={"LAKEPUB_FAULT": "after-commit"})
    assert r.code == -9
    after = _pointers(ws_path, *TABLES)
    assert all(after[n] != before[n] for n in TABLES)  # both landed together
    assert _scan(ws_path, "customers_all__v2")[0] == _scan(ws_path, "customers_all")[0] == _oracle(STREAM_1 + STREAM_2)
    r = cli("run", "customers_all")  # the retry: nothing left to publish
    assert r.code == 0 and _pointers(ws_path, *TABLES) == after


def test_refusals_say_what_to_do(ws_path: Path, cli):
    landing = _setup(ws_path, ALL_COLUMNS)
    contracts = ws_path / "catalog" / "contracts"
    (contracts / "customers@v1.0.yaml").write_text(V1_0)
    _land(landing, "0001.jsonl", STREAM_1)
    assert cli("run", "customers_all").code == 0
    new = contracts / "customers@v2.0.yaml"
    new.write_text(V2 + "status: CANARY\n")  # set by hand, no shadow run of this content
    r = cli("contract", "promote", REF, "--to", "DUAL_WRITE")
    assert r.code == 3 and "no shadow run of customers_all" in r.err and "nothing was changed" in r.err, r.err
    assert "status: CANARY" in new.read_text()
    # A compatible (minor) version has no dual-write window.
    (contracts / "customers@v1.1.yaml").write_text(
        V1_0.replace('version: "1.0"', 'version: "1.1"').replace("status: DEFAULT\n", "status: CANARY\n"))
    assert cli("shadow", "customers_all", "--contract", "contracts/customers@v1.1").code == 0
    r = cli("contract", "promote", "contracts/customers@v1.1", "--to", "DUAL_WRITE")
    assert r.code == 3 and "major version: no dataset publishes an earlier major version" in r.err, r.err
    # The old version's kept name taken: refused before any table is built.
    (contracts / "customers@v1.1.yaml").unlink()
    assert cli("shadow", "customers_all", "--contract", REF).code == 0
    ws = Workspace.open(ws_path)
    ws.catalog.create_table(("lakepub", "customers_all__v1"), ws.catalog.load_table(("lakepub", "customers_all")).schema())
    r = cli("contract", "promote", REF, "--to", "DUAL_WRITE")
    assert r.code == 3 and "free names: table(s) customers_all__v1 exist" in r.err, r.err


def test_the_swap_is_one_transaction_and_a_promotion_stopped_after_it_finishes(ws_path: Path, cli, tmp_path: Path):
    from lakepub.contract import dual_write
    from lakepub.contract.model import load_contract
    from lakepub.store.commit import CommitConflict, exchange_tables

    _dual_write(ws_path, cli)
    # An explicit batch (lakepub publish) is dual-written too: read again under the new contract.
    batch = tmp_path / "batch.jsonl"
    _land(tmp_path, "batch.jsonl", [_event("c9", 1, "DE", "basic", 42)])
    r = cli("run", "customers_all")  # builds the new version beside, up to p0=7
    assert r.code == 0, r.err
    r = cli("publish", "customers_all", "--events", str(batch), "--source", "customers", "--start", '{"p0": 7}',
            "--end", '{"p0": 8}')
    assert r.code == 0, r.err
    assert ("c9", 42) in _scan(ws_path, "customers_all__v2")[0] and ("c9", 42) in _scan(ws_path, "customers_all")[0]

    ws = Workspace.open(ws_path)
    contract = load_contract(ws_path / "catalog" / "contracts" / "customers@v2.0.yaml")
    pairs, lagging, swapped = dual_write._pairs(ws.config, contract, ws.catalog)
    assert not lagging and not swapped and [p[0][1] for p in pairs] == ["customers__ledger", "customers_all"]
    before = _pointers(ws_path, *TABLES, "customers_all__v1")
    stale = [pairs[0], (*pairs[1][:3], pairs[1][1], pairs[1][4])]  # the second asserts a pointer it does not have
    try:
        exchange_tables(ws.catalog, stale)
        raise AssertionError("a stale pointer must fail the swap")
    except CommitConflict:
        pass
    assert _pointers(ws_path, *TABLES, "customers_all__v1") == before  # the first pair's renames rolled back too
    # The swap lands, and the process stops before rewriting the dataset file: promoting again finishes.
    _land(ws_path / "landing" / "customers" / "p0", "0002.jsonl", [_event("c9", 1, "DE", "basic", 42)])  # the producer's copy
    ws.run("customers_all")  # a long-lived workspace, its publisher on v1.0 with the v2.0 partner attached
    exchange_tables(ws.catalog, pairs)
    assert "contract: contracts/customers@v1.0" in (ws_path / "catalog" / "datasets" / "customers_all.yaml").read_text()
    # Nothing publishes v1.0 rows into the swapped-in tables: not a new process reading the files
    # the promotion did not rewrite yet, nor the long-lived workspace.
    _land(ws_path / "landing" / "customers" / "p0", "0009.jsonl", [_event("c11", 1, "FR", "pro", 1)])
    r = cli("run", "customers_all")
    assert r.code == 3 and "if that promotion stopped before rewriting the dataset files, run it again" in r.err, r.err
    from lakepub.errors import BlockedError

    try:
        ws.run("customers_all")
        raise AssertionError("the stale workspace must be refused")
    except BlockedError as exc:
        assert "was swapped to a newer major version" in str(exc)
    publisher = ws.publisher("customers_all")  # a publish already under way (no partner): its next load refuses
    publisher.companion = None
    try:
        publisher.load()
        raise AssertionError("a ledger swapped under a publisher must be refused")
    except BlockedError as exc:
        assert "was swapped to a newer major version" in str(exc)
    swapped = _pointers(ws_path, "customers_all", "customers_all__v1")
    r = cli("contract", "promote", REF, "--to", "DEFAULT")
    assert r.code == 0, r.err
    assert _pointers(ws_path, "customers_all", "customers_all__v1") == swapped  # finished: nothing swapped twice
    assert "contract: contracts/customers@v2.0" in (ws_path / "catalog" / "datasets" / "customers_all.yaml").read_text()
    assert _scan(ws_path, "customers_all")[1] == "INTEGER" and _scan(ws_path, "customers_all__v1")[1] == "BIGINT"


def test_lenient_rejects_are_dual_written_and_swapped_with_the_tables(ws_path: Path, cli):
    lenient = "validation: {mode: lenient}\nconstraints:\n  range: [{col: mrr_cents, rule: \"[0, 100000]\"}]\n"
    landing = _setup(ws_path, ALL_COLUMNS)
    contracts = ws_path / "catalog" / "contracts"
    (contracts / "customers@v1.0.yaml").write_text(V1_0 + lenient)
    _land(landing, "0001.jsonl", STREAM_1)
    assert cli("run", "customers_all").code == 0
    (contracts / "customers@v2.0.yaml").write_text(V2.replace("compat_mode: break\n", "compat_mode: break\n" + lenient)
                                                   + "status: DUAL_WRITE\n")  # set by hand: the publish path only
    _land(landing, "0002.jsonl", [_event("c9", 1, "FR", "pro", -5), _event("c10", 1, "DE", "pro", 9)])
    r = cli("run", "customers_all")
    assert r.code == 0, r.err
    ws = Workspace.open(ws_path)
    counts = {n: ws.catalog.load_table(("lakepub", n)).scan().to_arrow().num_rows
              for n in ("customers__rejects", "customers__v2__rejects")}
    assert counts == {"customers__rejects": 1, "customers__v2__rejects": 1}
    assert _scan(ws_path, "customers_all__v2")[0] == _scan(ws_path, "customers_all")[0]
    assert ("c9", -5) not in _scan(ws_path, "customers_all")[0] and ("c10", 9) in _scan(ws_path, "customers_all")[0]
    from lakepub.contract import dual_write
    from lakepub.contract.model import load_contract

    dual_write.swap(ws.config, load_contract(contracts / "customers@v2.0.yaml"))
    assert _pointers(ws_path, "customers__v1__rejects", "customers__v2__rejects")["customers__v2__rejects"] is None
    r = cli("rejects", "customers_all", "--format", "json")
    assert r.code == 0 and len(r.json()) == 1, (r.out, r.err)


def test_deprecate_then_remove_across_two_versions(ws_path: Path, cli):
    """v1.1 deprecates signup_day (compatible: published in place), v2.0 removes it: a removal is
    never applied to the published tables in place, it goes through the dual-write window."""
    landing = _setup(ws_path, ALL_COLUMNS)
    contracts = ws_path / "catalog" / "contracts"
    (contracts / "customers@v1.0.yaml").write_text(V1_0)
    _land(landing, "0001.jsonl", STREAM_1)
    assert cli("run", "customers_all").code == 0
    v1_1 = (V1_0.replace('version: "1.0"', 'version: "1.1"').replace("status: DEFAULT\n", "status: DEFAULT\n")
            .replace("  signup_day: date\n", "  signup_day: {type: date, deprecated: true}\n"))
    (contracts / "customers@v1.1.yaml").write_text(v1_1)
    dataset = ws_path / "catalog" / "datasets" / "customers_all.yaml"
    dataset.write_text(dataset.read_text().replace("customers@v1.0", "customers@v1.1"))
    _land(landing, "0002.jsonl", STREAM_2)
    r = cli("run", "customers_all")
    assert r.code == 0, r.err  # a deprecation changes no table
    v2 = (v1_1.replace('version: "1.1"', 'version: "2.0"').replace("status: DEFAULT\n", "")
          .replace("  signup_day: {type: date, deprecated: true}\n", "")
          + "extra_fields: ignore\ncompat_mode: break\nshadow: {enabled: true}\n")
    (contracts / "customers@v2.0.yaml").write_text(v2)
    r = cli("contract", "check", "contracts/customers@v1.1", REF)
    assert r.code == 0 and "POLICY.REMOVED" in r.out, (r.out, r.err)
    assert cli("contract", "promote", REF, "--to", "VALIDATED").code == 0
    assert cli("shadow", "customers_all", "--contract", REF).code == 0
    assert cli("contract", "promote", REF, "--to", "CANARY").code == 0
    assert cli("contract", "promote", REF, "--to", "DUAL_WRITE").code == 0
    assert cli("run", "customers_all").code == 0
    columns = {n: [c["column_name"] for c in cli("query", f"SELECT column_name FROM (DESCRIBE {n})", "--format",
                                                      "json").json()] for n in ("customers_all", "customers_all__v2")}
    assert "signup_day" in columns["customers_all"] and "signup_day" not in columns["customers_all__v2"]
    assert cli("contract", "promote", REF, "--to", "DEFAULT", "--since", "2999-01-01").code == 0
    assert "signup_day" not in [c["column_name"] for c in cli(
        "query", "SELECT column_name FROM (DESCRIBE customers_all)", "--format", "json").json()]
    assert _scan(ws_path, "customers_all")[0] == _oracle(STREAM_1 + STREAM_2)


def test_a_new_field_with_a_default_reaches_old_rows_through_the_window(ws_path: Path, cli):
    """Format v2 has no initial-default: a field added in place reads null in old rows. A major
    version adding it goes through the window, whose build replays every event under the new
    contract, so the current rows built beside carry the default."""
    landing = _setup(ws_path, ALL_COLUMNS)
    contracts = ws_path / "catalog" / "contracts"
    (contracts / "customers@v1.0.yaml").write_text(V1_0)
    _land(landing, "0001.jsonl", STREAM_1)
    assert cli("run", "customers_all").code == 0
    v2 = (V1_0.replace('version: "1.0"', 'version: "2.0"').replace("status: DEFAULT\n", "status: DUAL_WRITE\n")
          .replace("  deleted: boolean\n", "  deleted: boolean\n  tier: {type: string, nullable: true, "
                   "default: {value: standard, kind: business}}\n"))
    (contracts / "customers@v2.0.yaml").write_text(v2)
    assert cli("run", "customers_all").code == 0
    rows = _scan(ws_path, "customers_all__v2", "SELECT DISTINCT tier FROM t")[0]
    assert rows == [("standard",)]


@pytest.mark.slow  # two CLI processes racing (~10 s); the single-process protocol is covered above
def test_concurrent_runs_during_dual_write_publish_each_batch_once_to_both(ws_path: Path, cli, cli_process):
    import concurrent.futures

    landing = _dual_write(ws_path, cli)
    events = [_event(f"k{i}", 1 + i % 3, "FR" if i % 2 else "DE", "pro", 10 * i) for i in range(60)]
    _land(landing, "0002.jsonl", events)
    with concurrent.futures.ThreadPoolExecutor(2) as pool:  # both build beside, then race for the same batches
        results = list(pool.map(lambda _: cli_process("run", "customers_all", "--max-batch", "10"), range(2)))
    assert all(r.code == 0 for r in results), [r.err for r in results]
    want = _oracle(STREAM_1 + events)
    assert _scan(ws_path, "customers_all")[0] == want and _scan(ws_path, "customers_all__v2")[0] == want
    ws = Workspace.open(ws_path)
    from lakepub.store.record import latest_record

    records = [latest_record(ws.catalog.load_table(("lakepub", n))) for n in ("customers_all", "customers_all__v2")]
    assert records[0].positions == records[1].positions == {"customers": {"p0": 67}}


@pytest.mark.integration
def test_dual_write_and_the_swap_on_a_postgresql_catalog(ws_path: Path, cli, pg_url: str):
    from tests.conftest import set_catalog

    set_catalog(ws_path, type="sql", uri=pg_url, warehouse=".lakepub/warehouse")
    landing = _dual_write(ws_path, cli)
    _land(landing, "0002.jsonl", STREAM_2)
    before = _pointers(ws_path, *TABLES)
    r = cli("run", "customers_all")
    assert r.code == 0, r.err
    after = _pointers(ws_path, *TABLES)
    assert after["customers_all"] != before["customers_all"] and after["customers_all__v2"] is not None
    assert _scan(ws_path, "customers_all__v2") == (_oracle(STREAM_1 + STREAM_2), "INTEGER")
    assert cli("contract", "promote", REF, "--to", "DEFAULT").code == 0
    assert _scan(ws_path, "customers_all") == (_oracle(STREAM_1 + STREAM_2), "INTEGER")
    assert _scan(ws_path, "customers_all__v1") == (_oracle(STREAM_1 + STREAM_2), "BIGINT")


def test_the_rollback_stops_the_dual_write_and_reopening_the_window_builds_it_up(ws_path: Path, cli):
    landing = _dual_write(ws_path, cli)
    assert cli("run", "customers_all").code == 0  # built beside
    assert cli("contract", "promote", REF, "--to", "VALIDATED").code == 0  # the rollback switch
    _land(landing, "0002.jsonl", STREAM_2)
    stopped = _pointers(ws_path, *TABLES)
    assert cli("run", "customers_all").code == 0
    moved = _pointers(ws_path, *TABLES)
    assert moved["customers_all__v2"] == stopped["customers_all__v2"] and moved["customers_all"] != stopped["customers_all"]
    assert cli("query", "SELECT 1 FROM customers_all__v2").code == 2  # no view outside the window
    for state in ("CANARY", "DUAL_WRITE"):
        r = cli("contract", "promote", REF, "--to", state)
        assert r.code == 0, r.err
    assert cli("run", "customers_all").code == 0  # builds the new version up from where it stopped
    assert _scan(ws_path, "customers_all__v2")[0] == _scan(ws_path, "customers_all")[0] == _oracle(STREAM_1 + STREAM_2)


def test_a_merge_on_read_dataset_is_dual_written(ws_path: Path, cli):
    dataset = ws_path / "catalog" / "datasets" / "customers_all.yaml"
    landing = _setup(ws_path, {**ALL_COLUMNS, "write_mode": "merge-on-read"})
    contracts = ws_path / "catalog" / "contracts"
    (contracts / "customers@v1.0.yaml").write_text(V1_0)
    (contracts / "customers@v2.0.yaml").write_text(V2 + "status: DUAL_WRITE\n")  # set by hand: the publish path only
    _land(landing, "0001.jsonl", STREAM_1)
    assert cli("run", "customers_all").code == 0  # v1.0 published, v2.0 built beside in the same run
    _land(landing, "0002.jsonl", STREAM_2)
    assert cli("run", "customers_all").code == 0
    assert "merge-on-read" in dataset.read_text()
    want = _oracle(STREAM_1 + STREAM_2)
    assert _scan(ws_path, "customers_all") == (want, "BIGINT") and _scan(ws_path, "customers_all__v2") == (want, "INTEGER")
