"""The janitor deletes the table folders an offline rebuild left behind (maintenance/superseded.py).

Through the CLI on real Iceberg tables: after ``lakepub rebuild`` of a base dataset and after a
derived rebuild by ``lakepub reconcile`` (twice: ``X/`` then ``X__rebuild_<hex>/`` is superseded),
``janitor --older-than 0s`` deletes the old folder and nothing else; DuckDB reads the published
table equal to before and ``verify --deep`` passes. A folder younger than the grace, an
in-progress rebuild's folder, folders whose names do not match, and everything in a dry run, are
kept.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from lakepub import reports
from lakepub.maintenance.superseded import MARKER
from test_derive import (FIRST, MONTHLY, MRR, YEARLY, _Crash, _define, _oracle, _plan, _publish,  # noqa: F401
                         _rows, _ok, shop)
from test_janitor import DATASET, moto_endpoint, publish  # noqa: F401


def _location(ws_path: Path, table: str) -> Path:
    from lakepub.store.layout import summary_id
    from lakepub.workspace import Workspace

    with Workspace.open(ws_path) as ws:
        return Path(ws.catalog.load_table(summary_id(ws.config.namespace, table)).location().removeprefix("file://"))


def _tree(folder: Path) -> dict[str, int]:
    """Every file under the namespace folder with its size: what must not change."""
    return {str(p.relative_to(folder)): p.stat().st_size for p in folder.rglob("*") if p.is_file()}


def _age(folder: Path, seconds: float = 3600) -> None:
    for p in folder.rglob("*"):
        os.utime(p, (p.stat().st_mtime - seconds,) * 2)


def _janitor(cli, *args: str) -> dict:
    return _ok(cli("janitor", "--format", "json", *args)).json()


def _swept(report: dict) -> dict[str, str]:
    return {Path(f["folder"].removeprefix("file://")).name: f["status"] for f in report["superseded_folders"]}


def test_a_base_rebuild_leaves_its_old_folder_to_the_janitor(shop: Path, cli):
    _ok(cli("reconcile"))
    old = _location(shop, "customers_mrr")
    namespace = old.parent
    _define(shop, {**MRR, "projection": {**MRR["projection"], "group_by": ["country"]}})
    _ok(cli("rebuild", "customers_mrr"))
    new = _location(shop, "customers_mrr")
    assert new.parent == namespace and new.name.startswith("customers_mrr__rebuild_") and old.exists()
    # Folders that merely look alike are never touched, however old.
    decoys = ["customers_mrr_old", "customers_mrr__rebuild_NOTHEX000000", "customers_mrr__rebuild_0123",
              "somebody_elses"]
    for name in decoys:
        (namespace / name / "data").mkdir(parents=True)
        (namespace / name / "data" / "x.parquet").write_bytes(b"junk")
        _age(namespace / name)
    published = _rows(cli, "SELECT * FROM customers_mrr ORDER BY 1 NULLS LAST")

    empty = namespace / "customers_current__rebuild_aaaaaaaaaaaa"  # emptied (a crashed sweep's): no reader
    (empty / "data").mkdir(parents=True)
    # Within the grace: kept, and reported as kept.
    assert _swept(_janitor(cli, "--older-than", "1h")) == {"customers_mrr": "young", empty.name: "deleted"}
    assert not empty.exists()
    _age(old, 2 * 3600)
    before = _tree(namespace)
    # Old files, but a reader may have started on the old version just before the swap: the first
    # run only marks the folder (a dry run not even that), a run one grace later deletes it.
    assert _swept(_janitor(cli, "--older-than", "1h", "--dry-run")) == {"customers_mrr": "would mark"}
    assert _tree(namespace) == before
    assert _swept(_janitor(cli, "--older-than", "1h")) == {"customers_mrr": "marked"}
    assert _tree(namespace) == {**before, f"customers_mrr/{MARKER}": 0}
    assert _swept(_janitor(cli, "--older-than", "1h")) == {"customers_mrr": "marked"}
    _age(old, 2 * 3600)
    before = _tree(namespace)
    # A dry run lists it and deletes nothing at all.
    report = _janitor(cli, "--older-than", "1h", "--dry-run")
    assert _swept(report) == {"customers_mrr": "would delete"}
    assert report["superseded_folders"][0]["files"] == sum(1 for p in old.rglob("*") if p.is_file()) > 1
    assert _tree(namespace) == before
    text = _ok(cli("janitor", "--older-than", "1h", "--dry-run")).out
    assert f"would delete superseded folder file://{old} (customers_mrr)" in text

    report = _janitor(cli, "--older-than", "1h")
    assert _swept(report) == {"customers_mrr": "deleted"}
    assert report["superseded_folders"][0]["files_removed"] == report["superseded_folders"][0]["files"] > 0
    assert not old.exists()
    assert {k: v for k, v in before.items() if not k.startswith("customers_mrr/")} == \
        {k: v for k, v in _tree(namespace).items() if k in before}  # nothing else lost
    assert all((namespace / name / "data" / "x.parquet").exists() for name in decoys)
    assert _rows(cli, "SELECT * FROM customers_mrr ORDER BY 1 NULLS LAST") == published
    for dataset in ("customers_mrr", "customers_current"):
        _ok(cli("verify", dataset, "--deep"))
    assert _swept(_janitor(cli, "--older-than", "0s")) == {}  # nothing left to find


def _check(cli) -> None:
    """verify --deep of the base dataset (derived ones have no verify); the derived ones are
    complete and current by their recorded checksums."""
    _ok(cli("verify", "orders_daily", "--deep"))
    plan = _plan(cli)
    assert all(plan[d]["pending_partitions"] == 0 and plan[d]["change"] == "untouched"
               for d in ("orders_monthly", "orders_yearly")), plan


def test_a_derived_rebuild_in_progress_is_kept_and_the_finished_ones_are_swept(ws_path: Path, cli):
    from lakepub.derive.reconcile import reconcile
    from lakepub.derive.state import Batching
    from lakepub.workspace import Workspace

    _publish(cli, ws_path, FIRST)
    _define(ws_path, MONTHLY, YEARLY)
    _ok(cli("reconcile"))
    first = _location(ws_path, "orders_monthly")
    namespace = first.parent
    changed = {**MONTHLY, "projection": {**MONTHLY["projection"], "query": MONTHLY["projection"]["query"].replace(
        "sum(orders) AS orders", "sum(orders) AS orders, max(day) AS last_day")}}
    _define(ws_path, changed)
    into = namespace / _plan(cli)["orders_monthly"]["rebuild"]

    def crash(result) -> None:
        raise _Crash()

    with Workspace.open(ws_path) as ws, pytest.raises(_Crash):
        reconcile(ws, ["orders_monthly"], batching=Batching(partitions=1), on_window=crash)
    assert into.exists()
    _age(namespace)
    before = _tree(namespace)
    # The rebuild in progress is a catalog table: its folder is kept; the published one is in use.
    assert _swept(_janitor(cli, "--older-than", "0s", "--retain-last", "1")) == {}
    assert into.exists() and first.exists()
    assert {k for k in _tree(namespace) if k.startswith(into.name + "/")} == \
        {k for k in before if k.startswith(into.name + "/")}

    with Workspace.open(ws_path) as ws:
        reconcile(ws)
    assert _location(ws_path, "orders_monthly") == into
    report = _janitor(cli, "--older-than", "0s", "--retain-last", "1")
    assert _swept(report) == {"orders_monthly": "deleted"} and not first.exists()
    assert _rows(cli, "SELECT * FROM orders_monthly ORDER BY 1") == _oracle(cli, changed)
    _check(cli)

    # A second rebuild supersedes the first rebuild's folder in turn.
    again = {**changed, "projection": {**changed["projection"], "query": changed["projection"]["query"].replace(
        "max(day) AS last_day", "max(day) AS last_day, min(day) AS first_day")}}
    _define(ws_path, again)
    _ok(cli("reconcile"))
    second = _location(ws_path, "orders_monthly")
    assert second != into and second.parent == namespace and into.exists()
    assert _swept(_janitor(cli, "--older-than", "0s", "--dry-run")) == {into.name: "would delete"}
    assert into.exists()
    assert _swept(_janitor(cli, "--older-than", "0s")) == {into.name: "deleted"} and not into.exists()
    assert _rows(cli, "SELECT * FROM orders_monthly ORDER BY 1") == _oracle(cli, again)
    assert _rows(cli, "SELECT * FROM orders_yearly ORDER BY 1") == _oracle(cli, YEARLY)
    _check(cli)


def test_s3_store_lists_child_folders_and_touches():
    import boto3
    from moto import mock_aws

    from lakepub.maintenance import S3FileStore

    with mock_aws():
        client = boto3.client("s3", region_name="us-east-1")
        client.create_bucket(Bucket="bkt")
        for key in ("wh/ns.db/t/data/1.parquet", "wh/ns.db/t__rebuild_0123456789ab/m.json",
                    "wh/ns.db/u/a/b.parquet", "wh/ns.db/loose.txt", "wh/other/x"):
            client.put_object(Bucket="bkt", Key=key, Body=b"x")
        store = S3FileStore(client, page_size=1)
        assert store.folders("s3a://bkt/wh/ns.db/") == ["t", "t__rebuild_0123456789ab", "u"]
        assert store.folders("s3://bkt/wh/none") == []
        store.touch("s3://bkt/wh/ns.db/u/mark")
        assert {f.path: f.size for f in store.list("s3://bkt/wh/ns.db/u")} == {
            "s3://bkt/wh/ns.db/u/a/b.parquet": 1, "s3://bkt/wh/ns.db/u/mark": 0}


def test_superseded_folders_on_an_s3_warehouse(moto_endpoint, tmp_path):
    import boto3
    import yaml
    from click.testing import CliRunner

    from lakepub.cli import main
    from lakepub.config import CONFIG_FILE
    from lakepub.init import init_workspace
    from lakepub.store.layout import summary_id
    from lakepub.workspace import Workspace

    props = {"s3.endpoint": moto_endpoint, "s3.access-key-id": "k", "s3.secret-access-key": "s",
             "s3.region": "us-east-1"}
    client = boto3.client("s3", endpoint_url=moto_endpoint, region_name="us-east-1",
                          aws_access_key_id="k", aws_secret_access_key="s")
    client.create_bucket(Bucket="sweep")
    root = tmp_path / "s3ws"
    init_workspace(root)
    config = yaml.safe_load((root / CONFIG_FILE).read_text())
    config["catalog"] = {"name": "lakepub", "type": "sql", "uri": f"sqlite:///{tmp_path / 'c.db'}",
                         "warehouse": "s3://sweep/wh", **props}
    (root / CONFIG_FILE).write_text(yaml.safe_dump(config))
    ws = Workspace.open(root)
    publish(ws, 0)
    location = ws.catalog.load_table(summary_id(ws.config.namespace, DATASET)).location()
    namespace = location.split("s3://sweep/", 1)[1].rsplit("/", 1)[0]
    left = f"{namespace}/{DATASET}__rebuild_0123456789ab"  # what a swapped-away rebuild leaves
    for key in (f"{left}/data/x.parquet", f"{left}/metadata/00000-x.metadata.json",
                f"{namespace}/{DATASET}_other/data/x.parquet"):
        client.put_object(Bucket="sweep", Key=key, Body=b"junk")

    def keys() -> set[str]:
        pages = client.get_paginator("list_objects_v2").paginate(Bucket="sweep", Prefix="wh/")
        return {o["Key"] for page in pages for o in page.get("Contents", [])}

    def janitor(*args: str) -> dict:
        result = CliRunner().invoke(main, ["-w", str(root), "janitor", "--format", "json", *args],
                                    catch_exceptions=False)
        assert result.exit_code == 0, result.stderr
        return _swept(json.loads(result.stdout))

    before = keys()
    assert janitor("--older-than", "1h") == {f"{DATASET}__rebuild_0123456789ab": "young"} and keys() == before
    assert janitor("--older-than", "0s") == {f"{DATASET}__rebuild_0123456789ab": "deleted"}
    assert keys() == {k for k in before if not k.startswith(left + "/")}
    assert f"{namespace}/{DATASET}_other/data/x.parquet" in keys()
    assert reports.verify(Workspace.open(root), DATASET, deep=True).ok
