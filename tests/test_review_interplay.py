"""Adversarial review of the features merged separately in this session, together (rev-x): each
test pins a defect found where two of them meet, through the CLI on real Iceberg tables."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.test_any_dataset import STREAM_2, _land
from tests.test_dual_write import REF, _dual_write


def test_the_swap_to_default_keeps_the_data_version_of_the_swapped_in_tables(ws_path: Path, cli):
    """The new version's tables recorded the data version of the contract file as it was while
    they were written (``status: DUAL_WRITE`` is part of its canonical form, so of its sha256).
    The swap rewrites the status to DEFAULT: ``lakepub plan`` then said the just swapped-in
    ``customers_all`` was 'breaking' and told the user to rebuild it offline, and the next batch
    moved its data version (``lakepub wait --data-version`` consumers) with nothing changed. The
    version they record is now the one the file says after the swap."""
    landing = _dual_write(ws_path, cli)
    assert cli("run", "customers_all").code == 0
    _land(landing, "0002.jsonl", STREAM_2)
    assert cli("run", "customers_all").code == 0
    r = cli("contract", "promote", REF, "--to", "DEFAULT")
    assert r.code == 0, r.err

    def plan() -> dict:
        r = cli("plan", "--format", "json")
        assert r.code == 0, r.err
        return {d["dataset"]: d for d in r.json()["datasets"]}["customers_all"]

    swapped = plan()
    assert swapped["change"] == "untouched", swapped["reasons"]
    _land(landing, "0003.jsonl", [{"customer_id": "c9", "version": 1, "country": "FR", "plan": "pro",
                                   "mrr_cents": 5, "signup_day": "2025-01-15", "deleted": False}])
    assert cli("run", "customers_all").code == 0
    after = plan()
    assert after["change"] == "untouched"
    assert after == swapped  # the same data version before and after the next batch


def test_a_corrupted_table_of_the_new_version_is_refused_with_advice_that_works(ws_path: Path, cli):
    """A data file of the new version's ``customers_all__v2`` changed in place is refused at the
    next dual-write batch (version 2 checksums, exit 3) with nothing moved. The refusal told the
    user to run ``lakepub verify customers_all__v2`` / ``lakepub rebuild customers_all__v2``:
    unknown datasets (those commands name configured datasets only). Its advice is now to drop
    the new version's tables, which the next run builds again from the landing; that works."""
    import pyarrow.parquet as pq
    from pyiceberg.transforms import BucketTransform
    from pyiceberg.types import StringType

    from lakepub.workspace import Workspace
    from tests.test_any_dataset import STREAM_1, _event
    from tests.test_dual_write import TABLES, _oracle, _pointers, _scan
    from tests.test_review_checksum_v2 import _corrupt_in_place

    landing = _dual_write(ws_path, cli)
    assert cli("run", "customers_all").code == 0
    _land(landing, "0002.jsonl", STREAM_2)
    assert cli("run", "customers_all").code == 0
    table = Workspace.open(ws_path).catalog.load_table(("lakepub", "customers_all__v2"))
    for task in table.scan().plan_files():
        path = task.file.file_path.removeprefix("file://")
        rows = pq.read_table(path).column("customer_id").to_pylist()
        if "c4" in rows:
            _corrupt_in_place(path, rows.index("c4"), "plan", "corrupted")
            break
    bucket = BucketTransform(8).transform(StringType())
    same = next(f"x{i}" for i in range(1000) if bucket(f"x{i}") == bucket("c4"))  # the batch rewrites c4's partition
    events = STREAM_1 + STREAM_2 + [_event(same, 1, "DE", "basic", 2)]
    _land(landing, "0003.jsonl", events[-1:])
    before = _pointers(ws_path, *TABLES)
    r = cli("run", "customers_all")
    assert r.code == 3 and "recorded checksum" in r.err, (r.code, r.err)
    assert _pointers(ws_path, *TABLES) == before
    assert "lakepub verify customers_all__v2" not in r.err and "lakepub rebuild customers_all__v2" not in r.err, r.err
    assert "drop" in r.err and "customers__v2__ledger" in r.err, r.err
    catalog = Workspace.open(ws_path).catalog  # the advice
    for name in ("customers_all__v2", "customers__v2__ledger"):
        catalog.drop_table(("lakepub", name))
    r = cli("run", "customers_all")
    assert r.code == 0, r.err
    assert _scan(ws_path, "customers_all__v2")[0] == _scan(ws_path, "customers_all")[0] == _oracle(events)


@pytest.mark.parametrize("mode", [None, "merge-on-read"])
def test_the_text_null_as_an_identity_partition_value_is_refused(tmp_path: Path, mode):
    """An identity partition of a string column holding the text ``null`` has the label of the
    null partition (Iceberg's human string of both is ``null``): their checksums were recorded
    under one label, so ``verify`` failed on correct data, or passed while checking only one of
    the two partitions (the other's rows unverified: exit 0 whatever they hold), and the version 2
    sums of the next publish were checked against the other partition's. Such a value is now
    refused (exit 3) before anything is written."""
    from lakepub.errors import BlockedError
    from lakepub.workspace import Workspace
    from tests.test_merge_on_read import _dataset, _workspace

    root = tmp_path / "ws"
    ws = _workspace(root, _dataset("t", mode, "identity(country)"))

    def event(c: int, country):
        return {"tenant": "a", "customer_id": c, "version": 1, "country": country, "plan": "pro", "mrr_cents": c,
                "deleted": False}

    ws.publish("t", [event(1, None), event(2, "FR")], start={}, end={"p0": 2})
    table = ws.catalog.load_table((ws.config.namespace, "t"))
    head = table.metadata.current_snapshot_id
    with pytest.raises(BlockedError, match="'null'") as refused:
        Workspace.open(root).publish("t", [event(3, "null")], start={"p0": 2}, end={"p0": 3})
    assert refused.value.exit_code == 3
    assert ws.catalog.load_table((ws.config.namespace, "t")).metadata.current_snapshot_id == head
    assert Workspace.open(root).verify("t", deep=True).ok


def test_the_refusal_of_a_file_changed_in_place_gives_only_advice_that_repairs(tmp_path: Path):
    """The refusal of a ``current`` table whose file was changed in place (version 2 checksums)
    suggested ``lakepub rebuild t``: with the definition unchanged it prints 'nothing to rebuild'
    (exit 0) and the table stays corrupt. The other advice, rolling the table back to a snapshot
    that verifies and publishing again, repairs it (the publish builds on the ledger snapshot the
    kept record names): it is what the refusal says now."""
    from click.testing import CliRunner

    from lakepub.cli import main
    from lakepub.errors import ForeignChange
    from lakepub.workspace import Workspace
    from tests.test_merge_on_read import Stream, _dataset, _workspace
    from tests.test_review_checksum_v2 import _corrupt_in_place

    root = tmp_path / "ws"
    ws = _workspace(root, _dataset("t", None, "none"))
    stream = Stream(3)
    first, second = stream.batch(30), stream.batch(20)
    ws.publish("t", first, start={}, end={"p0": 30})
    ws.publish("t", second, start={"p0": 30}, end={"p0": 50})
    table = ws.catalog.load_table((ws.config.namespace, "t"))
    path = next(iter(table.scan().plan_files())).file.file_path.removeprefix("file://")
    _corrupt_in_place(path, 0, "plan", "corrupted")
    with pytest.raises(ForeignChange) as refused:
        Workspace.open(root).publish("t", stream.batch(3), start={"p0": 50}, end={"p0": 53})
    rebuilt = CliRunner().invoke(main, ["-w", str(root), "rebuild", "t"], catch_exceptions=False)
    if "lakepub rebuild t" in str(refused.value):  # advice given: it must repair the table
        assert Workspace.open(root).verify("t").ok, (str(refused.value), rebuilt.stdout)
    assert "roll the table back" in str(refused.value)
    table = Workspace.open(root).catalog.load_table((ws.config.namespace, "t"))  # the advice that repairs
    table.manage_snapshots().rollback_to_snapshot([s.snapshot_id for s in table.snapshots()][-2]).commit()
    Workspace.open(root).publish("t", second, start={"p0": 30}, end={"p0": 50})
    fresh = Workspace.open(root)
    assert fresh.verify("t", deep=True).ok
    stream.live.clear()
    stream.apply(first + second)
    rows = fresh.query("SELECT tenant, customer_id, country, plan, mrr_cents FROM t").to_pylist()
    assert sorted((tuple(r.values()) for r in rows), key=repr) == stream.expected()


def test_verify_holds_on_intact_data_while_a_float_to_double_version_waits_for_its_data(ws_path: Path, cli):
    """A compatible version promoting float to double is applied with its first batch; until then
    the table holds floats and checksums recorded over them (0.1f renders ``0.1``). ``verify``
    cast the rows read to the new version's types (0.1f -> ``0.10000000149011612``) and reported a
    mismatch (exit 1) on intact data; it now renders the values the table holds."""
    from tests.test_evolution import NUMBERS, _dataset

    (ws_path / "catalog" / "contracts" / "meters@v1.0.yaml").write_text(NUMBERS)
    table = {"name": "meters_now", "source": "meters", "entity": "meters", "projection": {"kind": "current"},
             "partition": "identity(site)"}
    _dataset(ws_path, table, "contracts/meters@v1.0")
    landing = ws_path / "landing" / "meters" / "p0"
    landing.mkdir(parents=True)
    _land(landing, "0001.jsonl", [{"meter_id": "m1", "version": 1, "site": "a", "reading": 0.1, "price": "12.30"}])
    assert cli("run", "meters_now").code == 0
    (ws_path / "catalog" / "contracts" / "meters@v1.1.yaml").write_text(
        NUMBERS.replace('version: "1.0"', 'version: "1.1"').replace("type: float", "type: double"))
    _dataset(ws_path, table, "contracts/meters@v1.1")
    for deep in ((), ("--deep",)):
        r = cli("verify", "meters_now", *deep)
        assert r.code == 0, (r.out, r.err)
    _land(landing, "0002.jsonl", [{"meter_id": "m2", "version": 1, "site": "b", "reading": 0.1, "price": "1.00"}])
    assert cli("run", "meters_now").code == 0  # evolves: every partition rewritten as doubles
    assert cli("verify", "meters_now", "--deep").code == 0
