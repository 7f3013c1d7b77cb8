"""lakepub janitor: snapshot expiry, orphan removal, staging branches, crash leftovers, safety.

The state checks here do not use lakepub.maintenance: ``warehouse_state`` walks the metadata with
pyiceberg (current metadata file, metadata log, every snapshot's manifest list, manifests and live
data files) and compares it with the files on disk.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from conftest import CliResult, ledger_count, published_pointers, summary_rows, write_jsonl
from lakepub import reports
from lakepub.cli import main
from lakepub.config import CONFIG_FILE
from lakepub.errors import StaleStart
from lakepub.faults import POINTS
from lakepub.init import init_workspace
from lakepub.maintenance import (FileInfo, JanitorOptions, LocalFileStore, LocationMismatch, S3FileStore,
                                 check_listing, check_not_nested, commit_expiry, live_partition_labels, normalize,
                                 parse_duration, plan_expiry, run_janitor)
from lakepub.maintenance.cli import register_cli
from lakepub.maintenance.reachability import Reachability
from lakepub.store.layout import ledger_id, summary_id
from lakepub.workspace import Workspace

register_cli(main)  # idempotent; lakepub.cli wires it in for real

DATASET = "orders_daily"
MONTHS = ("2025-09", "2025-10", "2025-11", "2025-12")


# --- a deterministic event stream and its oracle ------------------------------------------


def batch_events(i: int) -> list[dict]:
    """Batch i: a new order, an update of the order from two batches ago (moving it to another
    month), and every fifth batch a delete: partitions get rewritten, files get superseded."""
    events = [{"order_id": f"o{i}", "version": 1, "day": f"{MONTHS[i % 4]}-{1 + i % 28:02d}",
               "cents": 100 + i, "deleted": False}]
    if i >= 2:
        events.append({"order_id": f"o{i - 2}", "version": 2, "day": f"{MONTHS[(i - 1) % 4]}-15",
                       "cents": 1000 + i, "deleted": False})
    if i % 5 == 4:
        events.append({"order_id": f"o{i - 4}", "version": 3, "day": None, "cents": None, "deleted": True})
    return events


OFFSETS = [0]
for _i in range(200):
    OFFSETS.append(OFFSETS[-1] + len(batch_events(_i)))


def expected_rows(n_batches: int) -> list[tuple]:
    latest: dict[str, dict] = {}
    for i in range(n_batches):
        for e in batch_events(i):
            if e["order_id"] not in latest or e["version"] > latest[e["order_id"]]["version"]:
                latest[e["order_id"]] = e
    days: dict[str, tuple[int, int]] = {}
    for e in latest.values():
        if not e["deleted"]:
            cents, orders = days.get(e["day"], (0, 0))
            days[e["day"]] = (cents + e["cents"], orders + 1)
    return [(day, cents, orders) for day, (cents, orders) in sorted(days.items())]


def publish(ws: Workspace, i: int):
    return ws.publish(DATASET, batch_events(i), start={"p0": OFFSETS[i]}, end={"p0": OFFSETS[i + 1]})


def committed_batches(root: Path) -> int:
    p0 = Workspace.open(root).committed_positions(DATASET).get("orders", {}).get("p0", 0)
    return OFFSETS.index(p0)


def batch_file(folder: Path, i: int) -> Path:
    return write_jsonl(folder / f"batch{i}.jsonl", batch_events(i))


def publish_args(folder: Path, i: int) -> tuple[str, ...]:
    return ("publish", DATASET, "--events", str(batch_file(folder, i)),
            "--start", json.dumps({"p0": OFFSETS[i]}), "--end", json.dumps({"p0": OFFSETS[i + 1]}))


# --- independent state checks ----------------------------------------------------------------


def _local(location: str) -> str:
    for prefix in ("file://", "file:"):
        if location.startswith(prefix):
            return location[len(prefix):]
    return location


def referenced_files(root: Path) -> set[str]:
    """Every file the catalog's tables reference, walked with pyiceberg (local paths)."""
    ws = Workspace.open(root)
    out: set[str] = set()
    for ident in ws.catalog.list_tables(ws.config.namespace):
        table = ws.catalog.load_table(ident)
        out.add(table.metadata_location)
        out.update(entry.metadata_file for entry in table.metadata.metadata_log)
        for snapshot in table.metadata.snapshots:
            out.add(snapshot.manifest_list)
            index = (snapshot.summary.additional_properties if snapshot.summary else {}).get("lakepub.key-index")
            out.update(f"{table.location()}/index/{name}" for name, _ in json.loads(index or "[]"))
            for manifest in snapshot.manifests(table.io):
                out.add(manifest.manifest_path)
                out.update(e.data_file.file_path for e in manifest.fetch_manifest_entry(table.io, discard_deleted=True))
        hint = f"{table.location()}/metadata/version-hint.text"
        if table.io.new_input(hint).exists():  # written after each commit (store/version_hint.py)
            out.add(hint)  # kept, and so is the metadata file it names
            with table.io.new_input(hint).open() as stream:
                out.add(f"{table.location()}/metadata/{stream.read().decode()}.metadata.json")
    return out


def disk_files(root: Path) -> dict[str, float]:
    warehouse = _local(Workspace.open(root).config.catalog["warehouse"])
    paths = [os.path.join(d, n) for d, _, names in os.walk(warehouse) for n in names]
    return {path: os.stat(path).st_mtime for path in paths}


def warehouse_state(root: Path) -> tuple[set[str], set[str]]:
    """(files on disk nothing references, referenced files missing from disk)."""
    referenced = {_local(p) for p in referenced_files(root)}
    on_disk = set(disk_files(root))
    return on_disk - referenced, referenced - on_disk


def assert_clean_and_correct(root: Path, n_batches: int) -> None:
    unreferenced, missing = warehouse_state(root)
    assert unreferenced == set(), sorted(unreferenced)
    assert missing == set(), sorted(missing)
    fresh = Workspace.open(root)
    report = reports.verify(fresh, DATASET, deep=True)
    assert report.ok, report.mismatches
    assert summary_rows(fresh) == expected_rows(n_batches)
    assert ledger_count(fresh) == OFFSETS[n_batches]  # versions only ever go up: every event is a ledger row


def janitor(ws_path: Path, *args: str) -> CliResult:
    result = CliRunner().invoke(main, ["-w", str(ws_path), "janitor", *args], catch_exceptions=False)
    return CliResult(result.exit_code, result.stdout, result.stderr)


# --- crash leftovers -------------------------------------------------------------------------


@pytest.mark.parametrize("point", POINTS)
def test_fault_leftovers_are_removed_and_data_is_intact(ws, ws_path, cli_process, tmp_path, point):
    for i in range(3):
        publish(ws, i)
    crashed = cli_process(*publish_args(tmp_path, 3), env={"LAKEPUB_FAULT": point})
    assert crashed.code == -9, crashed.err
    unreferenced, _ = warehouse_state(ws_path)
    if point != "after-commit":
        assert unreferenced, "the crash should have left files behind"

    result = janitor(ws_path, "--older-than", "0s")
    assert result.code == 0, result.err
    landed = 4 if point == "after-commit" else 3
    assert committed_batches(ws_path) == landed
    assert_clean_and_correct(ws_path, landed)
    assert janitor(ws_path, "--older-than", "0s", "--format", "json").json()["totals"]["files_found"] == 0

    # The workspace keeps working: the batch is (re)published or recognised, then the next one.
    fresh = Workspace.open(ws_path)
    assert publish(fresh, 3).status == ("already-published" if point == "after-commit" else "published")
    publish(fresh, 4)
    assert_clean_and_correct(ws_path, 5)


KILL_CHILD = r"""
import json, sys
from lakepub.workspace import Workspace
ws = Workspace.open(sys.argv[1])
ws.publisher("orders_daily")
print("ready", flush=True)
for path, start, end in json.loads(sys.argv[2]):
    ws.publish("orders_daily", path, start=start, end=end)
print("done", flush=True)
"""


def start_publisher(ws_path: Path, folder: Path, batches: range) -> subprocess.Popen:
    plan = [(str(batch_file(folder, i)), {"p0": OFFSETS[i]}, {"p0": OFFSETS[i + 1]}) for i in batches]
    proc = subprocess.Popen([sys.executable, "-c", KILL_CHILD, str(ws_path), json.dumps(plan)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stderr is not None
    assert proc.stdout.readline().strip() == "ready", proc.stderr.read()
    return proc


def test_sigkill_at_random_moments(ws, ws_path, tmp_path):
    rng = random.Random(20251130)
    publish(ws, 0)
    for _ in range(3):
        done = committed_batches(ws_path)
        proc = start_publisher(ws_path, tmp_path, range(done, done + 5))
        time.sleep(rng.uniform(0.0, 0.4))  # a publish takes ~0.1 s: most kills land mid-publish
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        proc.stdout.close()  # type: ignore[union-attr]
        proc.stderr.close()  # type: ignore[union-attr]
        result = janitor(ws_path, "--older-than", "0s", "--retain-last", "2")
        assert result.code == 0, result.err
        assert_clean_and_correct(ws_path, committed_batches(ws_path))


def test_default_grace_keeps_files_of_a_publish_in_flight(ws, ws_path, cli_process, tmp_path):
    for i in range(2):
        publish(ws, i)
    assert cli_process(*publish_args(tmp_path, 2), env={"LAKEPUB_FAULT": "after-data-write"}).code == -9
    in_flight, _ = warehouse_state(ws_path)
    assert in_flight

    result = janitor(ws_path, "--format", "json")  # default --older-than 3d
    assert result.code == 0, result.err
    report = result.json()
    assert report["totals"]["files_removed"] == 0 and report["totals"]["young_files"] == len(in_flight)
    assert warehouse_state(ws_path)[0] == in_flight

    # Time moves on (``now`` is an argument): past the grace, the leftovers go.
    later = run_janitor(Workspace.open(ws_path), now=time.time() + 3 * 86400 + 60)
    assert later.totals()["files_removed"] == len(in_flight)
    assert_clean_and_correct(ws_path, 2)


def test_concurrent_publisher_and_janitor(ws, ws_path, tmp_path):
    for i in range(4):
        publish(ws, i)
    for path in disk_files(ws_path):  # age what exists so far past the grace below
        os.utime(path, (time.time() - 3600, time.time() - 3600))
    proc = start_publisher(ws_path, tmp_path, range(4, 12))
    # Snapshots expire at once; only files older than the grace (none of the publisher's) may go.
    options = JanitorOptions(older_than_s=0, retain_last=2, grace_s=60)
    runs = removed = 0
    while proc.poll() is None or runs == 0:
        report = run_janitor(Workspace.open(ws_path), options=options)
        runs, removed = runs + 1, removed + report.totals()["files_removed"]
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0 and "done" in out, err
    assert runs >= 1 and removed > 0
    run_janitor(Workspace.open(ws_path), options=JanitorOptions(older_than_s=0, retain_last=2))
    assert_clean_and_correct(ws_path, 12)


class PublishWhileListing(LocalFileStore):
    """Lists, then lets a publish commit before the janitor loads the metadata."""

    def __init__(self, root: Path, batch: int):
        self.root, self.batch, self.done = root, batch, False

    def list(self, prefix):
        files = list(super().list(prefix))
        if not self.done:
            self.done = True
            publish(Workspace.open(self.root), self.batch)
        return iter(files)


def test_a_commit_landing_during_the_run_loses_nothing(ws, ws_path):
    """Even with no grace at all: files written after the listing are never considered, and
    the metadata is re-loaded before deleting."""
    for i in range(4):
        publish(ws, i)
    store = PublishWhileListing(ws_path, 4)
    report = run_janitor(Workspace.open(ws_path), [DATASET], JanitorOptions(older_than_s=0, retain_last=2),
                         stores={"file": store})
    assert store.done and report.totals()["files_removed"] > 0
    assert_clean_and_correct(ws_path, 5)


# --- expiry ----------------------------------------------------------------------------------


def test_expiry_after_many_publishes(ws, ws_path):
    for i in range(10):
        publish(ws, i)
    for _ in range(3):  # refused batches (stale start) land in the shared audit table
        with pytest.raises(StaleStart):
            ws.publish(DATASET, [{**batch_events(0)[0], "cents": 1}], start={"p0": 0}, end={"p0": 1})
    table = ws.catalog.load_table(summary_id(ws.config.namespace, DATASET))
    before_snapshots = len(table.metadata.snapshots)
    before_parquet = sum(1 for p in disk_files(ws_path) if p.endswith(".parquet"))

    result = janitor(ws_path, "--retain-last", "2", "--older-than", "0s", "--format", "json")
    assert result.code == 0, result.err
    report = {t["table"]: t for t in result.json()["tables"]}
    summary, ledger = report["lakepub.orders_daily"], report["lakepub.orders_daily__ledger"]
    assert summary["snapshots_expired"] > 0 and ledger["snapshots_expired"] == 10 - 2
    assert report["lakepub.lakepub_audit"]["snapshots_expired"] == 3 - 2
    assert summary["files_removed"] > 0 and summary["bytes_removed"] > 0 and summary["expired_files"] > 0

    table = ws.catalog.load_table(summary_id(ws.config.namespace, DATASET))
    assert len(table.metadata.snapshots) == before_snapshots - summary["snapshots_expired"]
    assert sum(1 for p in disk_files(ws_path) if p.endswith(".parquet")) < before_parquet
    assert_clean_and_correct(ws_path, 10)
    days = Workspace.open(ws_path).query(f"SELECT count(*) AS n FROM {DATASET}").column(0)[0].as_py()
    assert days == len(expected_rows(10))
    assert reports.log(Workspace.open(ws_path), DATASET)  # the kept history is still readable
    # A retry of an expired batch cannot be recognised any more; the refusal says why.
    with pytest.raises(StaleStart, match="were expired by the janitor"):
        publish(Workspace.open(ws_path), 0)
    publish(Workspace.open(ws_path), 10)  # and the table takes new publishes
    assert_clean_and_correct(ws_path, 11)


def month_event(order: str, day: str, cents: int) -> dict:
    return {"order_id": order, "version": 1, "day": day, "cents": cents, "deleted": False}


def test_checksum_records_of_live_partitions_stay_reachable(ws, ws_path):
    """A partition rewritten only by the first publish keeps that publish's snapshot (its only
    checksum record) alive, while the snapshots in between may go."""
    ws.publish(DATASET, [month_event("jan", "2025-01-10", 5)], start={"p0": 0}, end={"p0": 1})
    for i in range(1, 7):
        ws.publish(DATASET, [month_event(f"x{i}", "2025-06-01", i)], start={"p0": i}, end={"p0": i + 1})
    table = ws.catalog.load_table(summary_id(ws.config.namespace, DATASET))
    first = min(table.metadata.snapshots, key=lambda s: s.timestamp_ms)
    labels = live_partition_labels(table, Reachability(table.io))
    assert labels == {"2025-01", "2025-06"}
    now_ms = int(time.time() * 1000) + 1000

    kept = plan_expiry(table.metadata, now_ms=now_ms, older_than_ms=0, retain_last=1, live_labels=labels)
    assert first.snapshot_id in kept.protected and first.snapshot_id not in kept.expire
    assert kept.expire  # the snapshots between the first and the newest ones are not needed
    naive = plan_expiry(table.metadata, now_ms=now_ms, older_than_ms=0, retain_last=1)
    assert first.snapshot_id in naive.expire

    assert janitor(ws_path, "--retain-last", "1", "--older-than", "0s").code == 0
    assert reports.verify(Workspace.open(ws_path), DATASET).ok

    # Why: dropping the first publish's snapshot loses the only checksum of 2025-01.
    table = ws.catalog.load_table(table.name())
    commit_expiry(table, plan_expiry(table.metadata, now_ms=now_ms, older_than_ms=0, retain_last=1))
    broken = reports.verify(Workspace.open(ws_path), DATASET)
    assert not broken.ok and "2025-01" in broken.mismatches[0]


def test_staging_branches_past_the_window_are_removed(ws, ws_path):
    for i in range(3):
        publish(ws, i)
    table = ws.catalog.load_table(summary_id(ws.config.namespace, DATASET))
    snaps = sorted(table.metadata.snapshots, key=lambda s: s.timestamp_ms)
    old, new = snaps[0], snaps[-1]
    assert new.timestamp_ms > old.timestamp_ms
    (table.manage_snapshots().create_branch(old.snapshot_id, "lakepub-staging-old")
     .create_branch(new.snapshot_id, "lakepub-staging-new").create_branch(old.snapshot_id, "audit-2025").commit())
    now = new.timestamp_ms / 1000 + 3600
    options = JanitorOptions(older_than_s=3600 + (new.timestamp_ms - old.timestamp_ms) / 2000, retain_last=1)

    dry_options = JanitorOptions(older_than_s=options.older_than_s, retain_last=1, dry_run=True)
    dry = run_janitor(Workspace.open(ws_path), [DATASET], dry_options, now=now)
    assert dry.tables[0].staging_branches_removed == ["lakepub-staging-old"]
    assert "lakepub-staging-old" in ws.catalog.load_table(table.name()).metadata.refs

    report = run_janitor(Workspace.open(ws_path), [DATASET], options, now=now)
    assert report.tables[0].staging_branches_removed == ["lakepub-staging-old"]
    assert report.tables[0].staging_branches_kept == ["lakepub-staging-new"]
    refs = ws.catalog.load_table(table.name()).metadata.refs
    assert set(refs) == {"main", "lakepub-staging-new", "audit-2025"}
    assert reports.verify(Workspace.open(ws_path), DATASET).ok


# --- dry run, output, errors -------------------------------------------------------------------


def test_dry_run_deletes_nothing(ws, ws_path, cli_process, tmp_path):
    for i in range(4):
        publish(ws, i)
    assert cli_process(*publish_args(tmp_path, 4), env={"LAKEPUB_FAULT": "before-pointer-swap"}).code == -9
    files, pointers = disk_files(ws_path), published_pointers(ws)

    result = janitor(ws_path, "--dry-run", "--older-than", "0s", "--retain-last", "1", "--format", "json")
    assert result.code == 0, result.err
    report = result.json()
    assert report["dry_run"] is True
    totals = report["totals"]
    assert totals["snapshots_expired"] > 0 and totals["files_found"] > 0 and totals["files_removed"] == 0
    assert disk_files(ws_path) == files and published_pointers(ws) == pointers

    text = janitor(ws_path, "--dry-run", "--older-than", "0s", "--retain-last", "1")
    assert text.code == 0 and "dry run: would expire" in text.out and "nothing was changed" in text.out
    assert disk_files(ws_path) == files

    real = janitor(ws_path, "--older-than", "0s", "--retain-last", "1", "--format", "json").json()
    assert real["totals"]["files_removed"] == totals["files_found"]
    assert real["totals"]["snapshots_expired"] == totals["snapshots_expired"]


@pytest.mark.parametrize("bad", ["3x", "5", "-1d", "1.5h", ""])
def test_bad_duration_is_one_line_exit_2(ws_path, bad):
    result = janitor(ws_path, "--older-than", bad)
    assert result.code == 2
    assert result.err.count("\n") == 1 and result.err.startswith("error: invalid duration")


def test_progress_is_reported_per_manifest_scan(ws, ws_path):
    for i in range(3):
        publish(ws, i)
    calls: list[tuple[str, int, int]] = []
    run_janitor(Workspace.open(ws_path), [DATASET], JanitorOptions(dry_run=True), progress=lambda *a: calls.append(a))
    labels = {label for label, _, _ in calls}
    assert labels == {"scanning lakepub.orders_daily", "scanning lakepub.orders_daily__ledger"}
    assert all(0 < done <= total for _, done, total in calls) and any(done == total for _, done, total in calls)


def test_parse_duration():
    assert [parse_duration(t) for t in ("0s", "90m", "12h", "3d")] == [0, 5400, 43200, 259200]


def test_unknown_dataset_exits_2(ws_path):
    result = janitor(ws_path, "nope")
    assert result.code == 2 and "unknown dataset" in result.err


# --- locations and stores --------------------------------------------------------------------


def test_location_normal_forms():
    assert normalize("file:/a/b") == normalize("file:///a/b") == normalize("/a/b") == "file:///a/b"
    assert normalize("s3a://bk/t/x") == normalize("s3n://bk/t/x") == normalize("s3://bk/t/x")
    assert normalize("s3://bk/t/x") != normalize("s3://other/t/x")
    assert normalize("file://localhost/a/b") == "file:///a/b"
    assert normalize("s3://bk/t/odd?name#1") == "s3://bk/t/odd?name#1"  # part of the key, not a query


def test_location_mismatch_refuses():
    listing = [FileInfo("s3://bucket-a/wh/t/metadata/00001.metadata.json", 1, 0.0),
               FileInfo("s3://bucket-a/wh/t/data/x.parquet", 1, 0.0)]
    ok_refs = {"s3a://bucket-a/wh/t/data/x.parquet"}
    check_listing("t", "s3://bucket-a/wh/t", "s3://bucket-a/wh/t/metadata/00001.metadata.json", listing, ok_refs)
    with pytest.raises(LocationMismatch, match="scheme or authority differ"):
        check_listing("t", "s3://bucket-a/wh/t", "s3://bucket-a/wh/t/metadata/00001.metadata.json", listing,
                      {"s3://bucket-b/wh/t/data/x.parquet"})
    with pytest.raises(LocationMismatch, match="not under the table location"):
        check_listing("t", "s3://bucket-a/wh/other", "s3://bucket-a/wh/other/m.json", listing, set())


def test_a_table_inside_another_tables_location_is_refused():
    others = {"ns.a": "s3://bk/wh/a", "ns.b": "s3://bk/wh/a/b", "ns.c": "s3://bk/wh/ab"}
    check_not_nested("ns.c", "s3://bk/wh/ab", others)
    check_not_nested("ns.b", "s3a://bk/wh/a/b/", others)
    with pytest.raises(LocationMismatch, match="ns.b lives at"):
        check_not_nested("ns.a", "s3://bk/wh/a", others)
    with pytest.raises(LocationMismatch):
        check_not_nested("ns.x", "s3://bk/wh/a/", others)


class ElsewhereStore(LocalFileStore):
    """Lists the right files but spells them with another authority."""

    def list(self, prefix):
        for info in super().list(prefix):
            yield FileInfo(info.path.replace("file://", "file://otherhost", 1), info.size, info.mtime)


def test_listing_that_does_not_match_the_metadata_deletes_nothing(ws, ws_path):
    publish(ws, 0)
    table = ws.catalog.load_table(summary_id(ws.config.namespace, DATASET))
    Path(table.location().removeprefix("file://"), "data", "orphan.parquet").write_bytes(b"junk")
    os.utime(Path(table.location().removeprefix("file://"), "data", "orphan.parquet"), (1, 1))
    files = disk_files(ws_path)
    with pytest.raises(LocationMismatch):
        run_janitor(Workspace.open(ws_path), options=JanitorOptions(older_than_s=0), stores={"file": ElsewhereStore()})
    assert disk_files(ws_path) == files


class CountingClient:
    def __init__(self, client):
        self.client, self.deletes = client, []

    def __getattr__(self, name):
        return getattr(self.client, name)

    def delete_objects(self, **kwargs):
        self.deletes.append(len(kwargs["Delete"]["Objects"]))
        return self.client.delete_objects(**kwargs)


def test_s3_store_pages_and_batches():
    import boto3
    from moto import mock_aws

    with mock_aws():
        client = boto3.client("s3", region_name="us-east-1")
        client.create_bucket(Bucket="bkt")
        for n in range(7):
            client.put_object(Bucket="bkt", Key=f"wh/t/data/{n}.parquet", Body=b"x" * n)
        client.put_object(Bucket="bkt", Key="wh/t2/data/other.parquet", Body=b"y")  # a sibling table's prefix
        counting = CountingClient(client)
        store = S3FileStore(counting, page_size=2, delete_batch=3)
        listed = sorted(store.list("s3a://bkt/wh/t"), key=lambda f: f.path)
        assert [f.path for f in listed] == [f"s3://bkt/wh/t/data/{n}.parquet" for n in range(7)]
        assert [f.size for f in listed] == list(range(7)) and all(f.mtime > 0 for f in listed)
        assert store.delete([f.path for f in listed]) == []
        assert counting.deletes == [3, 3, 1]
        assert list(store.list("s3://bkt/wh/t")) == [] and len(list(store.list("s3://bkt/wh/t2"))) == 1


@pytest.fixture(scope="module")
def moto_endpoint():
    import logging

    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        yield f"http://{host}:{port}"
    finally:
        server.stop()


def test_janitor_on_an_s3_warehouse(moto_endpoint, tmp_path):
    import boto3

    props = {"s3.endpoint": moto_endpoint, "s3.access-key-id": "k", "s3.secret-access-key": "s",
             "s3.region": "us-east-1"}
    client = boto3.client("s3", endpoint_url=moto_endpoint, region_name="us-east-1",
                          aws_access_key_id="k", aws_secret_access_key="s")
    client.create_bucket(Bucket="lake")
    root = tmp_path / "s3ws"
    init_workspace(root)
    config = yaml.safe_load((root / CONFIG_FILE).read_text())
    config["catalog"] = {"name": "lakepub", "type": "sql", "uri": f"sqlite:///{tmp_path / 'c.db'}",
                         "warehouse": "s3://lake/wh", **props}
    (root / CONFIG_FILE).write_text(yaml.safe_dump(config))
    ws = Workspace.open(root)
    for i in range(5):
        publish(ws, i)
    table = ws.catalog.load_table(summary_id(ws.config.namespace, DATASET))
    orphan_key = table.location().split("s3://lake/", 1)[1] + "/data/orphan.parquet"
    client.put_object(Bucket="lake", Key=orphan_key, Body=b"junk")

    result = CliRunner().invoke(main, ["-w", str(root), "janitor", "--older-than", "0s", "--retain-last", "2",
                                       "--format", "json"], catch_exceptions=False)
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["totals"]["files_removed"] > 1
    pages = client.get_paginator("list_objects_v2").paginate(Bucket="lake", Prefix="wh/")
    keys = {f"s3://lake/{o['Key']}" for page in pages for o in page.get("Contents", [])}
    assert f"s3://lake/{orphan_key}" not in keys
    assert keys == referenced_files(root)  # nothing unreferenced left, nothing referenced missing
    fresh = Workspace.open(root)
    assert reports.verify(fresh, DATASET, deep=True).ok
    assert summary_rows(fresh) == expected_rows(5)


def test_ledger_snapshot_recorded_by_the_published_table_is_kept(ws, ws_path):
    """The ledger's main may run ahead of what is published (an unpublished append under the
    ordered commit); the ledger snapshot the published snapshot records must survive expiry."""
    for i in range(3):
        publish(ws, i)
    summary = ws.catalog.load_table(summary_id(ws.config.namespace, DATASET))
    recorded = int(summary.current_snapshot().summary.additional_properties["lakepub.ledger-snapshot"])
    ledger = ws.catalog.load_table(ledger_id(ws.config.namespace, DATASET))
    ledger.append(ledger.schema().as_arrow().empty_table())  # main moves past the published state
    ledger = ws.catalog.load_table(ledger.name())
    assert ledger.metadata.current_snapshot_id != recorded and len(ledger.metadata.snapshots) == 4
    naive = plan_expiry(ledger.metadata, now_ms=int(time.time() * 1000) + 1000, older_than_ms=0, retain_last=1)
    assert recorded in naive.expire  # what retain-last alone would do

    report = run_janitor(Workspace.open(ws_path), [DATASET], JanitorOptions(older_than_s=0, retain_last=1))
    ledger = ws.catalog.load_table(ledger.name())
    assert ledger.snapshot_by_id(recorded) is not None
    assert report.tables[1].snapshots_expired == 2 and len(ledger.metadata.snapshots) == 2  # head + published
    assert reports.verify(Workspace.open(ws_path), DATASET, deep=True).ok


def test_janitor_frees_the_ledger_files_compaction_replaced(ws, ws_path):
    from lakepub.maintenance.compact import compact_ledger

    for i in range(6):
        publish(ws, i)
    compact_ledger(ws, DATASET)
    ledger_dir = Path(_local(ws.catalog.load_table(ledger_id(ws.config.namespace, DATASET)).location()), "data")
    options = JanitorOptions(older_than_s=0, retain_last=1)

    run_janitor(Workspace.open(ws_path), [DATASET], options)
    # Compaction committed a published snapshot naming the compacted ledger: the 6 old files go.
    assert len(list(ledger_dir.iterdir())) == 1
    publish(Workspace.open(ws_path), 6)
    run_janitor(Workspace.open(ws_path), [DATASET], options)
    assert len(list(ledger_dir.iterdir())) == 1 + 1  # the compacted file and the new append
    assert warehouse_state(ws_path) == (set(), set())
    fresh = Workspace.open(ws_path)
    assert reports.verify(fresh, DATASET, deep=True).ok and summary_rows(fresh) == expected_rows(7)
