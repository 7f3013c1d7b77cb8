"""DUAL_WRITE under review (rev-dual): what the window must not do to a retired dataset, a
promotion with nothing to swap, ... Real tables read back by DuckDB, through the CLI."""

from __future__ import annotations

from pathlib import Path

from tests.test_dual_write import REF, TABLES, _dual_write, _pointers


def test_the_swap_refuses_to_bring_a_retired_dataset_back(ws_path: Path, cli):
    """A dataset retired during the window: the swap would point its name at the new version's
    table, which carries no retirement, so the retired dataset silently came back (queryable,
    published by run) and 'restore' said it was not retired."""
    _dual_write(ws_path, cli)
    assert cli("run", "customers_all").code == 0  # the new version built beside, caught up
    assert cli("retire", "customers_all").code == 0
    before = _pointers(ws_path, *TABLES)
    r = cli("contract", "promote", REF, "--to", "DEFAULT")
    assert r.code == 3, (r.code, r.out, r.err)
    assert "customers_all is retired" in r.err and "lakepub restore customers_all" in r.err, r.err
    assert _pointers(ws_path, *TABLES) == before  # nothing swapped
    assert "status: DUAL_WRITE" in (ws_path / "catalog" / "contracts" / "customers@v2.0.yaml").read_text()
    assert cli("query", "SELECT count(*) FROM customers_all").code != 0  # still hidden
    # The way out it names works.
    assert cli("restore", "customers_all").code == 0
    assert cli("contract", "promote", REF, "--to", "DEFAULT").code == 0
    assert cli("retire", "customers_all").code == 0
    assert cli("query", "SELECT count(*) FROM customers_all").code != 0



def test_a_dataset_of_the_contract_never_published_is_named_not_an_internal_error(ws_path: Path, cli):
    """A dataset of another entity added on the old version during the window, not run yet: the
    DEFAULT promotion failed with 'internal error: NoSuchTableError' (exit 1)."""
    import yaml

    from tests.test_shadow import ALL_COLUMNS

    _dual_write(ws_path, cli)
    assert cli("run", "customers_all").code == 0
    other = {**ALL_COLUMNS, "name": "others_all", "entity": "others"}
    (ws_path / "catalog" / "datasets" / "others_all.yaml").write_text(yaml.safe_dump(other, sort_keys=False))
    before = _pointers(ws_path, *TABLES)
    r = cli("contract", "promote", REF, "--to", "DEFAULT")
    assert r.code == 3 and "lakepub.others__ledger does not exist" in r.err and "run 'lakepub run'" in r.err, r.err
    assert _pointers(ws_path, *TABLES) == before
    assert cli("run", "others_all").code == 0  # builds it and its new version beside
    assert cli("shadow", "others_all", "--contract", REF).code == 0
    assert cli("contract", "promote", REF, "--to", "DEFAULT").code == 0
    assert _pointers(ws_path, "others_all__v1", "others__v1__ledger")["others_all__v1"] is not None



def test_a_promotion_with_nothing_to_swap_does_not_claim_a_swap(ws_path: Path, cli):
    """The old version's dataset hard-deleted during the window (retired, janitor): DUAL_WRITE ->
    DEFAULT exited 0 saying 'the swap already landed' and 'the new version's tables are the
    published ones', while nothing was swapped (the __v2 tables left orphaned)."""
    _dual_write(ws_path, cli)
    assert cli("run", "customers_all").code == 0
    assert cli("retire", "customers_all", "--grace", "0s").code == 0
    assert cli("janitor", "--older-than", "0s").code == 0  # hard-deletes it and its ledger
    r = cli("contract", "promote", REF, "--to", "DEFAULT")
    assert r.code == 3 and "nothing to swap" in r.err, (r.code, r.out, r.err)
    assert "status: DUAL_WRITE" in (ws_path / "catalog" / "contracts" / "customers@v2.0.yaml").read_text()


def test_a_dataset_file_the_rewrite_cannot_change_leaves_every_file_on_the_old_version(ws_path: Path, cli):
    """Two datasets of one entity, one file in YAML flow style (valid, loaded by the config, but
    not the 'contract:' line the rewrite matches): the promotion exited 0 having rewritten one file
    only; datasets of one entity must name one contract, so the workspace no longer loaded (every
    command exit 2) and 'promote again' could not run to finish."""
    import yaml

    from tests.test_any_dataset import MRR, STREAM_1, _land, _setup
    from tests.test_lifecycle import V1_0
    from tests.test_shadow import ALL_COLUMNS
    from tests.test_dual_write import V2

    landing = _setup(ws_path, ALL_COLUMNS, MRR)
    datasets = ws_path / "catalog" / "datasets"
    (datasets / "customers_mrr.yaml").write_text(yaml.safe_dump(MRR, sort_keys=False, default_flow_style=True))
    contracts = ws_path / "catalog" / "contracts"
    (contracts / "customers@v1.0.yaml").write_text(V1_0)
    _land(landing, "0001.jsonl", STREAM_1)
    assert cli("run", "customers_mrr").code == 0
    (contracts / "customers@v2.0.yaml").write_text(V2)
    assert cli("contract", "promote", REF, "--to", "VALIDATED").code == 0
    for name in ("customers_all", "customers_mrr"):
        assert cli("shadow", name, "--contract", REF).code == 0
    assert cli("contract", "promote", REF, "--to", "CANARY").code == 0
    assert cli("contract", "promote", REF, "--to", "DUAL_WRITE").code == 0
    assert cli("run", "customers_all").code == 0
    files = {p: p.read_text() for p in sorted(datasets.glob("*.yaml"))}
    r = cli("contract", "promote", REF, "--to", "DEFAULT")
    assert r.code == 3 and "customers_mrr.yaml" in r.err and "promote again" in r.err, (r.code, r.out, r.err)
    assert {p: p.read_text() for p in sorted(datasets.glob("*.yaml"))} == files  # none half-rewritten
    assert not list(datasets.glob(".*.promote"))
    # The swap landed: runs are refused (not publishing v1.0 rows into v2.0's tables) and say so.
    r = cli("run", "customers_all")
    assert r.code == 3 and "swapped to a newer major version" in r.err, (r.code, r.err)
    # Written plainly, promoting again finishes.
    (datasets / "customers_mrr.yaml").write_text(yaml.safe_dump(MRR, sort_keys=False))
    r = cli("contract", "promote", REF, "--to", "DEFAULT")
    assert r.code == 0, r.err
    assert all(f"contract: {REF}" in p.read_text() for p in datasets.glob("customers_*.yaml"))
    assert cli("run", "customers_all").code == 0
    assert cli("verify", "customers_mrr", "--deep").code == 0


def test_rejects_of_a_new_version_alone_lenient_become_the_entitys_at_the_swap(ws_path: Path, cli):
    """v1.0 strict (no rejects table), v2.0 lenient: the window's rejects went to
    customers__v2__rejects, which the swap left behind: 'lakepub rejects' no longer showed them
    and a later window's 'free names' found the name taken."""
    _rejects_renamed(ws_path, cli)


def test_rejects_of_a_new_version_alone_are_renamed_on_a_postgresql_catalog(ws_path: Path, cli, pg_url: str):
    from tests.conftest import set_catalog

    set_catalog(ws_path, type="sql", uri=pg_url, warehouse=".lakepub/warehouse")
    _rejects_renamed(ws_path, cli)


def _rejects_renamed(ws_path: Path, cli) -> None:
    from lakepub.contract import dual_write
    from lakepub.contract.model import load_contract
    from lakepub.workspace import Workspace
    from tests.test_any_dataset import STREAM_1, _event, _land, _setup
    from tests.test_dual_write import V2
    from tests.test_lifecycle import V1_0
    from tests.test_shadow import ALL_COLUMNS

    lenient = "validation: {mode: lenient}\nconstraints:\n  range: [{col: mrr_cents, rule: \"[0, 100000]\"}]\n"
    landing = _setup(ws_path, ALL_COLUMNS)
    contracts = ws_path / "catalog" / "contracts"
    (contracts / "customers@v1.0.yaml").write_text(V1_0)
    _land(landing, "0001.jsonl", STREAM_1)
    assert cli("run", "customers_all").code == 0
    (contracts / "customers@v2.0.yaml").write_text(V2.replace("compat_mode: break\n", "compat_mode: break\n" + lenient)
                                                   + "status: DUAL_WRITE\n")  # set by hand: the publish path only
    _land(landing, "0002.jsonl", [_event("c9", 1, "FR", "pro", -5), _event("c10", 1, "DE", "pro", 9)])
    assert cli("run", "customers_all").code == 0
    assert _pointers(ws_path, "customers__rejects")["customers__rejects"] is None
    ws = Workspace.open(ws_path)
    dual_write.swap(ws.config, load_contract(contracts / "customers@v2.0.yaml"))
    assert _pointers(ws_path, "customers__v2__rejects")["customers__v2__rejects"] is None
    r = cli("rejects", "customers_all", "--format", "json")
    assert r.code == 0 and len(r.json()) == 1, (r.out, r.err)
    # Publishing goes on under v2.0 alone, its rejects appended to the same table.
    (contracts / "customers@v2.0.yaml").write_text((contracts / "customers@v2.0.yaml").read_text()
                                                   .replace("status: DUAL_WRITE\n", "status: DEFAULT\n"))
    _land(landing, "0003.jsonl", [_event("c11", 1, "FR", "pro", -7)])
    assert cli("run", "customers_all").code == 0
    r = cli("rejects", "customers_all", "--format", "json")
    assert r.code == 0 and len(r.json()) == 2, (r.out, r.err)



def test_a_contract_file_named_freely_is_dual_written(ws_path: Path, cli):
    """Contract files are found by content (any *.yaml), and 'contract promote FILE' takes any
    name; the dual write looked for '<name>@v*.yaml' only: with v2.0 in customers-next.yaml,
    DUAL_WRITE was accepted, 'lakepub run' exited 0 publishing v1.0 alone, and --to DEFAULT said
    'run lakepub run' forever. The swap's refusal of stale dataset files and the kept __v1 view
    looked the same way."""
    from lakepub.contract import dual_write
    from lakepub.contract.model import load_contract
    from lakepub.store.commit import exchange_tables
    from lakepub.workspace import Workspace
    from tests.test_any_dataset import STREAM_1, STREAM_2, _land, _setup
    from tests.test_dual_write import V2, _oracle, _scan
    from tests.test_lifecycle import V1_0
    from tests.test_shadow import ALL_COLUMNS

    landing = _setup(ws_path, ALL_COLUMNS)
    contracts = ws_path / "catalog" / "contracts"
    (contracts / "customers@v1.0.yaml").write_text(V1_0)
    _land(landing, "0001.jsonl", STREAM_1)
    assert cli("run", "customers_all").code == 0
    new = contracts / "customers-next.yaml"
    new.write_text(V2)
    assert cli("contract", "promote", str(new), "--to", "VALIDATED").code == 0
    assert cli("shadow", "customers_all", "--contract", str(new)).code == 0
    assert cli("contract", "promote", str(new), "--to", "CANARY").code == 0
    assert cli("contract", "promote", str(new), "--to", "DUAL_WRITE").code == 0
    _land(landing, "0002.jsonl", STREAM_2)
    assert cli("run", "customers_all").code == 0
    assert _scan(ws_path, "customers_all__v2") == (_oracle(STREAM_1 + STREAM_2), "INTEGER")
    # The swap lands and the files are not rewritten yet: a new process reading them is refused.
    ws = Workspace.open(ws_path)
    pairs, lagging, _ = dual_write._pairs(ws.config, load_contract(new), ws.catalog)  # noqa: SLF001
    assert not lagging
    exchange_tables(ws.catalog, pairs)
    _land(landing, "0003.jsonl", [{**STREAM_1[0], "version": 99}])
    r = cli("run", "customers_all")
    assert r.code == 3 and "swapped to a newer major version" in r.err, (r.code, r.err)
    r = cli("contract", "promote", str(new), "--to", "DEFAULT")  # finishes the promotion
    assert r.code == 0, r.err
    assert cli("run", "customers_all").code == 0
    q = cli("query", "SELECT count(*) AS n FROM customers_all__v1", "--format", "json")  # the kept version
    assert q.code == 0 and q.json() == [{"n": len(_oracle(STREAM_1 + STREAM_2))}], (q.out, q.err)



def test_a_stale_checkout_never_publishes_the_old_version_into_the_swapped_in_tables(ws_path: Path, cli):
    """Another machine's checkout of the workspace folder from before the window (dataset file on
    v1.0, no v2.0 contract file): its run exited 0, evolved the swapped-in customers_all back from
    INTEGER to BIGINT in place and published a value v2.0 refuses (3e9)."""
    from tests.test_any_dataset import STREAM_1, STREAM_2, _event, _land
    from tests.test_dual_write import _oracle, _scan

    landing = _dual_write(ws_path, cli)
    assert cli("run", "customers_all").code == 0
    assert cli("contract", "promote", REF, "--to", "DEFAULT").code == 0
    before = _pointers(ws_path, *TABLES[:2])
    dataset = ws_path / "catalog" / "datasets" / "customers_all.yaml"
    dataset.write_text(dataset.read_text().replace("customers@v2.0", "customers@v1.0"))
    (ws_path / "catalog" / "contracts" / "customers@v2.0.yaml").unlink()
    _land(landing, "0002.jsonl", STREAM_2 + [_event("c77", 1, "FR", "pro", 3_000_000_000)])
    r = cli("run", "customers_all")
    assert r.code == 3 and "last published under contracts/customers@v2.0" in r.err, (r.code, r.out, r.err)
    assert _pointers(ws_path, *TABLES[:2]) == before
    assert _scan(ws_path, "customers_all") == (_oracle(STREAM_1), "INTEGER")



def test_a_stale_checkout_does_not_rebuild_the_swapped_in_table_under_the_old_version(ws_path: Path, cli):
    """The same stale checkout with a changed partition: 'lakepub rebuild' exited 0 and rewrote the
    published (v2.0) customers_all with v1.0's types (BIGINT), under readers migrated to v2.0."""
    import yaml

    from tests.test_any_dataset import STREAM_1
    from tests.test_dual_write import _oracle, _scan

    _dual_write(ws_path, cli)
    assert cli("run", "customers_all").code == 0
    assert cli("contract", "promote", REF, "--to", "DEFAULT").code == 0
    before = _pointers(ws_path, "customers_all")
    dataset = ws_path / "catalog" / "datasets" / "customers_all.yaml"
    doc = yaml.safe_load(dataset.read_text())
    dataset.write_text(yaml.safe_dump({**doc, "contract": "contracts/customers@v1.0",
                                       "partition": "bucket(4, customer_id)"}, sort_keys=False))
    (ws_path / "catalog" / "contracts" / "customers@v2.0.yaml").unlink()
    r = cli("rebuild", "customers_all")
    assert r.code == 3 and "last published under contracts/customers@v2.0" in r.err, (r.code, r.out, r.err)
    assert _pointers(ws_path, "customers_all") == before
    assert _scan(ws_path, "customers_all") == (_oracle(STREAM_1), "INTEGER")



def test_an_explicit_batch_of_records_from_a_generator_reaches_both_versions(ws_path: Path, cli):
    """Workspace.publish takes records (any iterable of dicts); a generator was read once for the
    published version, then read again, empty, for the new one: the new version's tables moved
    to the batch's end with none of its events (exit 0), and the swap would publish that."""
    from lakepub.workspace import Workspace
    from tests.test_any_dataset import STREAM_1, _event
    from tests.test_dual_write import _oracle, _scan

    _dual_write(ws_path, cli)
    assert cli("run", "customers_all").code == 0  # the new version built beside, up to p0=7
    events = [_event("c20", 1, "FR", "pro", 11), _event("c21", 1, "DE", "basic", 12)]
    ws = Workspace.open(ws_path)
    ws.publish("customers_all", (e for e in events), start={"p0": 7}, end={"p0": 9})
    expected = _oracle(STREAM_1 + events)
    assert _scan(ws_path, "customers_all")[0] == expected
    assert _scan(ws_path, "customers_all__v2") == (expected, "INTEGER")
