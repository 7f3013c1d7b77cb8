"""lakepub on S3 (moto's server mode): round trips per publish (store/s3.py) and the key index
through the local disk cache (store/cache.py).

* a publish through a request-counting server: no multipart upload for small files, nothing it
  wrote read back, a bounded number of requests in sequence;
* a publish with the index equals one without it (DuckDB read of the published table and of the
  ledger), also from a new process with the cache emptied or corrupted;
* the cache never serves a partial or corrupted file: a corrupted copy is refetched, a download
  killed (SIGKILL) midway leaves no file under the final name.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pyarrow as pa
import pytest

from lakepub import duck
from lakepub.generate import generate_stream
from lakepub.store.cache import FileCache, arrow_file
from lakepub.store.key_index import runs_of
from lakepub.store.layout import ledger_id
from lakepub.store.s3 import REMEMBERED, LakepubFileIO
from lakepub.workspace import Workspace

pytestmark = pytest.mark.integration

DATASET = "orders_daily"
REPO = Path(__file__).resolve().parents[2]


def _catalog(tmp_path: Path, name: str, url: str, bucket: str, props: dict) -> dict:
    return {"name": "lakepub", "type": "sql", "uri": f"sqlite:///{tmp_path / (name + '.db')}",
            "warehouse": f"s3://{bucket}/{name}", **props}


def _workspace(make_workspace, tmp_path, s3, name: str, *, key_index: bool = True, events: int = 2000) -> Workspace:
    root = make_workspace(_catalog(tmp_path, name, s3.url, s3.bucket, s3.s3_properties()), name=name)
    if not key_index:
        config = root / "lakepub.yaml"
        config.write_text(config.read_text().replace("key_index: true", "key_index: false"))
    landing = root / "landing" / "orders"
    if landing.exists():
        landing.rmdir()
    generate_stream(landing, events=events, partitions=2, days=400, seed=5, spread=True)
    return Workspace.open(root)


def _published(ws: Workspace) -> list[tuple]:
    fresh = Workspace.open(ws.config.root)
    return [tuple(r.values()) for r in fresh.query(
        f"SELECT day::VARCHAR, cents, orders FROM {DATASET} ORDER BY day").to_pylist()]


def _ledger(ws: Workspace) -> list[tuple]:
    fresh = Workspace.open(ws.config.root)
    ledger = fresh.catalog.load_table(ledger_id(fresh.config.namespace, DATASET))
    con = duck.connect(fresh.config.catalog)
    return con.execute(f"""SELECT order_id, version, day::VARCHAR, cents, deleted, k1, k2
                           FROM iceberg_scan('{ledger.metadata_location}') ORDER BY ALL""").fetchall()


def _runs(ws: Workspace):
    ledger = Workspace.open(ws.config.root).catalog.load_table(ledger_id(ws.config.namespace, DATASET))
    return runs_of(ledger.current_snapshot())


def test_publish_with_index_equals_without_on_s3(s3_endpoint, make_workspace, tmp_path):
    with_index = _workspace(make_workspace, tmp_path, s3_endpoint, "indexed")
    without = _workspace(make_workspace, tmp_path, s3_endpoint, "scanned", key_index=False)
    for ws in (with_index, without):
        result = ws.run(DATASET, max_batch=400)
        assert len(result.batches) == 5 and result.events == 2000

    assert _published(with_index) == _published(without) and _published(with_index)
    assert _ledger(with_index) == _ledger(without) and len(_ledger(with_index)) > 1200
    assert _runs(without) is None  # the scanned ledger has no index
    runs = _runs(with_index)
    assert runs and all(r.size is not None for r in runs) and sum(r.rows for r in runs) == len(_ledger(with_index))
    # the runs are on S3 (uploaded before the commit) with the sizes recorded, and in the cache
    keys = {k.rsplit("/", 1)[1]: k for k in s3_endpoint.keys("indexed/lakepub/orders_daily__ledger/index/")}
    client = s3_endpoint.client()
    for run in runs:
        head = client.head_object(Bucket=s3_endpoint.bucket, Key=keys[run.name])
        assert head["ContentLength"] == run.size
    cache = with_index.file_cache
    cached = [cache.path(f"s3://{s3_endpoint.bucket}/{keys[r.name]}") for r in runs]
    assert all(p.stat().st_size == r.size and arrow_file(p) for p, r in zip(cached, runs))

    # A new process: the cache emptied, then one run corrupted on disk: both publish the same.
    with_index.close()
    without.close()
    import shutil

    shutil.rmtree(cache.folder)
    for name in ("indexed", "scanned"):
        _append_landing(tmp_path / name, seed=11)
    assert _cli_run(tmp_path / "indexed")  # a new process with the cache emptied
    Workspace.open(tmp_path / "scanned").run(DATASET)  # the twin needs no new process
    assert _published(with_index) == _published(without)
    assert _ledger(with_index) == _ledger(without)
    runs = _runs(with_index)
    victim = cache.path(f"s3://{s3_endpoint.bucket}/indexed/lakepub/orders_daily__ledger/index/{runs[0].name}")
    assert victim.is_file()  # fetched by the cold process
    victim.write_bytes(b"ARROW1" + b"\0" * (runs[0].size - 6))  # right size, wrong end
    for name in ("indexed", "scanned"):
        _append_landing(tmp_path / name, seed=12)
    out = _cli_run(tmp_path / "indexed")
    assert "key index unreadable" not in out  # refetched, not fallen back
    Workspace.open(tmp_path / "scanned").run(DATASET)
    assert _published(with_index) == _published(without)
    assert _ledger(with_index) == _ledger(without)
    assert arrow_file(victim) and victim.stat().st_size == runs[0].size


def _append_landing(root: Path, seed: int) -> None:
    """Later segments in each landing partition: a new stream's orders (ids prefixed) and a
    correction of every 7th order published so far (next version, one cent more)."""
    landing = root / "landing" / "orders"
    extra = root.parent / f"extra-{root.name}-{seed}"
    generate_stream(extra, events=600, partitions=2, days=400, seed=seed, spread=True)
    for part in sorted(extra.iterdir()):
        latest: dict[str, dict] = {}
        for segment in sorted((landing / part.name).glob("*.jsonl")):
            for line in segment.read_text().splitlines():
                event = json.loads(line)
                if event["version"] >= latest.get(event["order_id"], {"version": -1})["version"]:
                    latest[event["order_id"]] = event
        fixes = [{**e, "version": e["version"] + 1, "cents": e["cents"] + 1}
                 for i, (_, e) in enumerate(sorted(latest.items()))
                 if i % 7 == 0 and not e["deleted"] and e["cents"] is not None]
        text = "".join(segment.read_text().replace('"order_id": "o', f'"order_id": "s{seed}o')
                       for segment in sorted(part.glob("*.jsonl")))
        (landing / part.name / f"9{seed:03d}0.jsonl").write_text(
            text + "".join(json.dumps(f) + "\n" for f in fixes))


def _cli_run(root: Path) -> str:
    proc = subprocess.run([sys.executable, "-m", "lakepub.cli", "run", DATASET], cwd=root, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout + proc.stderr


# --- round trips ----------------------------------------------------------------------------


@pytest.fixture
def counting_s3(s3_endpoint):
    """A moto server behind the benchmark's request counter, 20 ms per request (so that requests
    in sequence are told apart from requests that merely ran on a busy CPU one after another)."""
    sys.path.insert(0, str(REPO / "scripts" / "bench"))
    try:
        from s3_latency_server import LatencyCounter
    finally:
        sys.path.pop(0)
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
    from werkzeug.serving import make_server

    counter = LatencyCounter(DomainDispatcherApplication(create_backend_app), 0.02)
    server = make_server("127.0.0.1", 0, counter, threaded=True, request_handler=MotoRequestHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    host, port = server.server_address[:2]
    endpoint = dataclasses.replace(s3_endpoint, url=f"http://{host}:{port}", bucket="counted")
    endpoint.client().create_bucket(Bucket=endpoint.bucket)
    yield endpoint, counter
    server.shutdown()
    thread.join()


def test_a_warm_publish_writes_small_files_in_one_put_and_reads_nothing_back(counting_s3, make_workspace, tmp_path):
    s3, counter = counting_s3
    ws = _workspace(make_workspace, tmp_path, s3, "counted", events=3000)
    batches = iter(_batches(ws))
    first = next(batches)
    ws.publish(DATASET, first[0], start=first[1], end=first[2])  # creates the tables: not counted
    for events, start, end in batches:
        counter._intervals = []
        result = ws.publish(DATASET, events, start=start, end=end)
        stats = counter.stats()
        log = [(k, p) for _, _, k, p in counter._intervals]
        assert result.status == "published"
        assert stats["by_method"].get("POST", 0) == 0, log  # no multipart upload: one PUT per file
        assert not [p for k, p in log if k in ("GET", "HEAD") and "metadata" in p], log  # nothing read back
        assert not [p for k, p in log if k == "GET" and "/data/" in p], log  # no ledger scan (key index)
        puts = stats["by_method"]["PUT"]
        # data files of the rewritten partitions + ledger file + index run + 4 manifests/lists + 2 metadata + 2 hints
        assert puts <= len(result.partitions) + 1 + 2 + 4 + 2 + 2 + 1, log
        assert stats["in_sequence"] <= 18, (stats, log)  # 70 before store/s3.py; 10-14 measured
    assert _published(ws) == _published_oracle(ws)


def test_a_new_process_reads_the_published_files_from_the_disk_cache(counting_s3, make_workspace, tmp_path):
    """Data files a process wrote are kept in the disk cache: the next process (memory emptied)
    reads the published partitions it rewrites from disk, not S3; a truncated copy is refetched."""
    s3, counter = counting_s3
    ws = _workspace(make_workspace, tmp_path, s3, "disk", events=3000)
    batches = _batches(ws)
    ws.publish(DATASET, batches[0][0], start=batches[0][1], end=batches[0][2])
    ws.close()
    data = ws.file_cache.folder / "s3" / s3.bucket / "disk" / "lakepub" / DATASET / "data"
    corrupted: set[str] = set()
    for events, start, end in batches[1:]:
        REMEMBERED.clear()  # as in a new process
        fresh = Workspace.open(ws.config.root)
        counter._intervals = []
        assert fresh.publish(DATASET, events, start=start, end=end).status == "published"
        log = [(k, p) for _, _, k, p in counter._intervals]
        fetched = {p.split("?")[0].rsplit("/", 2)[-2:][0] + "/" + p.split("?")[0].rsplit("/", 1)[1]
                   for k, p in log if k == "GET" and "/data/" in p}
        assert fetched == corrupted, log  # only the truncated copy is fetched again (every partition is rewritten)
        assert not [p for k, p in log if k == "GET" and "/data/" not in p], log  # metadata and index: from disk
        assert not [p for k, p in log if "/index/" in p and k != "PUT"], log  # the index runs: from disk too
        fresh.close()
        table = Workspace.open(ws.config.root).catalog.load_table((ws.config.namespace, DATASET))
        live = sorted(task.file.file_path for task in table.scan().plan_files())
        victim = ws.file_cache.path(live[0])
        assert victim.is_file() and str(victim).startswith(str(data))
        victim.write_bytes(victim.read_bytes()[:-10])  # truncated: the next process must refetch it
        corrupted = {f"{victim.parent.name}/{victim.name}"}
    assert _published(ws) == _published_oracle(ws)
    assert Workspace.open(ws.config.root).verify(DATASET, deep=True).ok


def _batches(ws: Workspace):
    from lakepub.landing import LandingSource

    spec = ws.dataset(DATASET)
    src = LandingSource(ws.config.landing_dir(spec.source), spec.contract)
    return [(t, s, e) for t, s, e in src.batches({}, 1000)]


def _published_oracle(ws: Workspace) -> list[tuple]:
    from lakepub.generate import oracle_summary, read_stream

    summary = oracle_summary(read_stream(ws.config.landing_dir("orders")))
    return [(d.isoformat(), cents, orders) for d, (cents, orders) in sorted(summary.items())]


# --- the cache --------------------------------------------------------------------------------


def _rerun_as_new_process(monkeypatch, ws: Workspace) -> Workspace:
    """After a refused run: undo the test's patches, forget what this process remembers (failed
    uploads, remembered files) as a new process would, run again and check the published table
    against the oracle. Returns the new workspace."""
    from lakepub.store import uploads

    monkeypatch.undo()
    monkeypatch.setattr(uploads, "_FAILED", [])  # a new process
    REMEMBERED.clear()
    fresh = Workspace.open(ws.config.root)
    fresh.run(DATASET)
    assert _published(fresh) == _published_oracle(fresh)
    return fresh


def _arrow_bytes(rows: int) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, pa.schema([("k1", pa.int64())])) as writer:
        writer.write_table(pa.table({"k1": pa.array(range(rows), pa.int64())}))
    return sink.getvalue().to_pybytes()


def test_cache_refetches_a_corrupted_or_truncated_copy(s3_endpoint, tmp_path):
    io = LakepubFileIO(s3_endpoint.s3_properties())
    location = f"s3://{s3_endpoint.bucket}/cache-test/index/run.arrow"
    data = _arrow_bytes(50_000)
    with io.new_output(location).create() as out:
        out.write(data)
    cache = FileCache(tmp_path / "cache")
    path = cache.fetch(io, location, len(data), arrow_file)
    assert path.read_bytes() == data

    for corrupt in (data[: len(data) // 2],                       # truncated
                    data + b"x",                                  # grown
                    b"XXXXXX" + data[6:],                         # right size, wrong magic
                    data[:-6] + b"\0" * 6):                       # right size, wrong end
        path.write_bytes(corrupt)
        assert cache.fetch(io, location, len(data), arrow_file) == path
        assert path.read_bytes() == data

    # a wrong size on the store (not what the snapshot recorded): an error, nothing cached
    path.unlink()
    with pytest.raises(OSError, match="recorded"):
        cache.fetch(io, location, len(data) + 1, arrow_file)
    assert not path.exists() and not list(path.parent.glob(".part-*"))
    # a file gone from the store: FileNotFoundError (the lookup falls back to scanning)
    with pytest.raises(FileNotFoundError):
        cache.fetch(io, location + ".gone", None, arrow_file)


def test_small_files_kept_on_disk_are_checked_by_their_crc(tmp_path):
    cache = FileCache(tmp_path / "cache")
    location = "s3://bucket/t/metadata/00001-abc.metadata.json"
    data = json.dumps({"format-version": 2, "x": list(range(100))}).encode()
    cache.store(location, data)
    assert cache.read(location) == data
    path = cache.path(location)
    raw = path.read_bytes()
    for damaged in (raw[:-1], raw[:10], raw[:20] + bytes([raw[20] ^ 1]) + raw[21:], data):
        path.write_bytes(damaged)
        assert cache.read(location) is None and not path.exists()  # dropped: fetched again by the reader
        cache.store(location, data)
    assert cache.read(location) == data


def test_cache_keeps_its_size_limit_least_recently_used_first(s3_endpoint, tmp_path):
    io = LakepubFileIO(s3_endpoint.s3_properties())
    data = _arrow_bytes(20_000)
    cache = FileCache(tmp_path / "cache", limit=int(len(data) * 2.5))
    locations = [f"s3://{s3_endpoint.bucket}/lru/run{i}.arrow" for i in range(4)]
    for loc in locations:
        with io.new_output(loc).create() as out:
            out.write(data)
    paths = []
    for i, loc in enumerate(locations):
        paths.append(cache.fetch(io, loc, len(data), arrow_file))
        os.utime(paths[-1], (1_000 + i, 1_000 + i))  # distinct use times
        if i == 2:
            cache.fetch(io, locations[0], len(data), arrow_file)  # used again: now the newest
            os.utime(paths[0], (1_010, 1_010))
    assert [p.exists() for p in paths] == [True, False, False, True]


_KILLED_DOWNLOAD = r"""
import sys, time
from lakepub.store import cache as c
from lakepub.store.s3 import LakepubFileIO
c.CHUNK = 4096
io = LakepubFileIO(dict(zip(sys.argv[3::2], sys.argv[4::2])))
real = io.new_input
class Slow:
    def __init__(self, f): self.f = f
    def __enter__(self): return self
    def __exit__(self, *a): self.f.close()
    def read(self, n):
        time.sleep(0.05)
        return self.f.read(n)
io.new_input = lambda loc: type("I", (), {"open": lambda self, seekable=True: Slow(real(loc).open(seekable))})()
c.FileCache(sys.argv[1]).fetch(io, sys.argv[2], None, c.arrow_file)
"""


def test_a_download_killed_midway_leaves_no_file_to_serve(s3_endpoint, tmp_path):
    io = LakepubFileIO(s3_endpoint.s3_properties())
    location = f"s3://{s3_endpoint.bucket}/killed/index/run.arrow"
    data = _arrow_bytes(100_000)  # ~800 KB: ~200 slow chunks
    with io.new_output(location).create() as out:
        out.write(data)
    cache = FileCache(tmp_path / "cache")
    final = cache.path(location)
    props = [x for kv in s3_endpoint.s3_properties().items() for x in kv]
    proc = subprocess.Popen([sys.executable, "-c", _KILLED_DOWNLOAD, str(cache.folder), location, *props])
    deadline = time.monotonic() + 60
    while not list(final.parent.glob(".part-*")) and time.monotonic() < deadline:
        time.sleep(0.02)
    partial = list(final.parent.glob(".part-*"))
    assert partial and proc.poll() is None
    # Killed once some bytes reached the disk (polled, not a fixed sleep: under load the first
    # buffered writes of the slow download may land well after 0.2 s), while it still runs.
    while partial[0].stat().st_size == 0 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert partial[0].stat().st_size > 0 and proc.poll() is None
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not final.exists()  # only the temporary file, which nothing reads
    assert 0 < partial[0].stat().st_size < len(data)
    assert cache.fetch(io, location, len(data), arrow_file).read_bytes() == data
    os.utime(partial[0], (0, 0))  # an old temporary file: the next eviction removes it
    cache.evict()
    assert not partial[0].exists() and final.exists()


def test_remembered_metadata_is_only_what_was_written_completely(s3_endpoint):
    io = LakepubFileIO(s3_endpoint.s3_properties())
    location = f"s3://{s3_endpoint.bucket}/remembered/metadata/00001-abc.metadata.json"
    with pytest.raises(RuntimeError):
        with io.new_output(location).create() as out:
            out.write(b'{"partial": ')
            raise RuntimeError("killed while writing")
    assert REMEMBERED.get(location) is None
    with io.new_output(location).create() as out:
        out.write(json.dumps({"whole": True}).encode())
    assert REMEMBERED.get(location) == b'{"whole": true}'
    with io.new_input(location).open() as f:
        assert f.read() == b'{"whole": true}'


def test_compaction_on_s3_writes_an_index_the_next_publish_uses(s3_endpoint, make_workspace, tmp_path):
    """`lakepub compact` on S3 names a complete index (uploaded, with its size): publishes after it
    look keys up in it and equal a ledger scanned without an index."""
    with_index = _workspace(make_workspace, tmp_path, s3_endpoint, "compacted")
    without = _workspace(make_workspace, tmp_path, s3_endpoint, "compacted_scan", key_index=False)
    for ws in (with_index, without):
        ws.run(DATASET, max_batch=700)
        ws.compact(DATASET)
    runs = _runs(with_index)
    assert runs is not None and len(runs) == 1 and runs[0].size
    for name in ("compacted", "compacted_scan"):
        _append_landing(tmp_path / name, seed=13)
    for ws in (with_index, without):
        ws.run(DATASET)
    runs = _runs(with_index)
    assert runs is not None and len(runs) >= 1 and all(r.size for r in runs)
    assert _published(with_index) == _published(without) == _published_oracle(with_index)
    assert with_index.verify(DATASET, deep=True).ok


def test_verify_deep_checks_the_index_on_s3(s3_endpoint, make_workspace, tmp_path):
    """verify --deep compares the S3 index runs (through the cache) with the ledger: a run
    replaced on S3 by one with a row changed is reported, even with the cache emptied."""
    ws = _workspace(make_workspace, tmp_path, s3_endpoint, "verified", events=1200)
    ws.run(DATASET, max_batch=600)
    assert ws.verify(DATASET, deep=True).ok
    run = _runs(ws)[-1]
    key = f"verified/lakepub/orders_daily__ledger/index/{run.name}"
    table = pa.ipc.open_file(pa.BufferReader(
        s3_endpoint.client().get_object(Bucket=s3_endpoint.bucket, Key=key)["Body"].read())).read_all()
    version = table.column("version").to_pylist()
    version[0] += 1  # a seen version the ledger does not have
    table = table.set_column(table.schema.get_field_index("version"), "version", pa.array(version, pa.int64()))
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)
    forged = sink.getvalue().to_pybytes()
    assert len(forged) == run.size  # same size: only the content check can tell
    s3_endpoint.client().put_object(Bucket=s3_endpoint.bucket, Key=key, Body=forged)
    import shutil

    shutil.rmtree(ws.file_cache.folder)
    report = Workspace.open(ws.config.root).verify(DATASET, deep=True)
    assert not report.ok and any("key index" in m for m in report.mismatches), report.mismatches


def test_an_unwritable_cache_folder_only_costs_downloads(s3_endpoint, make_workspace, tmp_path):
    """A cache folder that cannot be created (a file is in its way): publishes and reads still
    work, from S3; the index falls back to the DuckDB join with a warning."""
    ws = _workspace(make_workspace, tmp_path, s3_endpoint, "nocache", events=1200)
    blocker = ws.config.cache_dir
    blocker.parent.mkdir(parents=True, exist_ok=True)
    blocker.write_text("not a folder")
    with pytest.warns(UserWarning, match="key index unreadable"):
        ws.run(DATASET, max_batch=600)
    REMEMBERED.clear()
    assert _published(ws) == _published_oracle(ws)
    assert Workspace.open(ws.config.root).verify(DATASET, deep=True).ok


def test_a_metadata_file_is_written_only_once_the_manifests_it_may_name_are_up(s3_endpoint, monkeypatch):
    """Manifests and manifest lists upload in the background (store/s3.py): the close of a
    metadata file, which a catalog may point at as soon as it returns, waits for them; once one
    failed, no metadata file is written by the process any more (it might name the missing file)."""
    from lakepub.store import s3, uploads

    io = LakepubFileIO({**s3_endpoint.s3_properties(), s3.BACKGROUND_UPLOADS: "true"})
    base = f"s3://{s3_endpoint.bucket}/barrier/metadata"
    real_upload = s3._Tee._upload

    def slow_upload(self, data):
        if self._location.endswith(".avro"):
            time.sleep(0.5)  # longer than anything else here: without the wait, the check below fails
        real_upload(self, data)

    monkeypatch.setattr(s3._Tee, "_upload", slow_upload)
    manifest = f"{base}/snap-1-0-abc.avro"
    with io.new_output(manifest).create() as out:
        out.write(b"Obj\x01 a manifest list")
    assert s3_endpoint.client().list_objects_v2(Bucket=s3_endpoint.bucket, Prefix="barrier/").get("KeyCount") == 0
    with io.new_input(manifest).open() as f:  # this process reads it back from memory meanwhile
        assert f.read() == b"Obj\x01 a manifest list"
    with io.new_output(f"{base}/00001-abc.metadata.json").create() as out:
        out.write(b"{}")
    keys = {o["Key"] for o in s3_endpoint.client().list_objects_v2(Bucket=s3_endpoint.bucket,
                                                                    Prefix="barrier/")["Contents"]}
    assert keys == {"barrier/metadata/snap-1-0-abc.avro", "barrier/metadata/00001-abc.metadata.json"}

    monkeypatch.setattr(uploads, "_FAILED", [])  # this process's record of failed uploads, for this test only
    with io.new_output("s3://no-such-bucket-lakepub/x/metadata/m-1.avro").create() as out:
        out.write(b"Obj\x01 lost")  # closes without error: the upload fails in the background
    with pytest.raises(OSError, match="earlier upload of this process failed"):
        with io.new_output(f"{base}/00002-abc.metadata.json").create() as out:
            out.write(b"{}")
    with pytest.raises(OSError, match="earlier upload"):  # and every later one
        s3.uploads_done()


def test_a_rest_catalog_gets_no_background_uploads(s3_endpoint, monkeypatch):
    """A REST catalog's server writes the metadata file: the client's commit (pyiceberg's
    ``RestCatalog.commit_table``, lakepub's ordered commit, the audit table's append) names the
    manifest list in a request without closing any metadata file here, so nothing would wait for
    a background upload: the catalog would point at a manifest list not (yet, or ever) in S3.
    Its FileIO must upload every manifest and manifest list before the close returns."""
    from lakepub.store import s3

    warehouse = f"s3://{s3_endpoint.bucket}/rest-wh"
    rest = s3.configure({"type": "rest", "uri": "http://127.0.0.1:1/catalog", "warehouse": warehouse,
                         **s3_endpoint.s3_properties()})
    inferred = s3.configure({"uri": "https://catalog.example.com", "warehouse": warehouse})
    sql = s3.configure({"type": "sql", "uri": "sqlite:///x.db", "warehouse": warehouse})
    assert rest[s3.PY_IO_IMPL] == s3.IO_IMPL and s3.BACKGROUND_UPLOADS not in rest
    assert s3.BACKGROUND_UPLOADS not in inferred
    assert s3.BACKGROUND_UPLOADS not in s3.configure({"type": "sql", "py-catalog-impl": "my.Catalog",
                                                      "warehouse": warehouse})
    assert sql.get(s3.BACKGROUND_UPLOADS) == "true"

    real_upload = s3._Tee._upload

    def slow_upload(self, data):
        if self._location.endswith(".avro"):
            time.sleep(0.3)
        real_upload(self, data)

    monkeypatch.setattr(s3._Tee, "_upload", slow_upload)
    io = LakepubFileIO(rest)
    for name in ("snap-7-0-abc.avro", "abc-m0.avro"):
        with io.new_output(f"{warehouse}/t/metadata/{name}").create() as out:
            out.write(b"Obj\x01 " + name.encode())
        # what the REST server (another process) reads as soon as the commit request names it
        body = s3_endpoint.client().get_object(Bucket=s3_endpoint.bucket, Key=f"rest-wh/t/metadata/{name}")["Body"]
        assert body.read() == b"Obj\x01 " + name.encode()


@pytest.mark.parametrize("mode", ["atomic", "ordered"])
def test_a_failed_background_upload_is_a_retry_with_nothing_published(s3_endpoint, make_workspace, tmp_path,
                                                                       monkeypatch, mode):
    """A manifest whose background upload fails: the publish that would name it is refused as
    retryable (exit 4: nothing was published), not an internal error (exit 1) nor, under the
    ordered commit, an unknown outcome (exit 5); so is the next one in the same process; a new
    process publishes everything, read back by DuckDB."""
    from lakepub.errors import RetryableError
    from lakepub.store import s3, uploads

    ws = _workspace(make_workspace, tmp_path, s3_endpoint, f"upfail{mode}", events=900)
    if mode == "ordered":
        config = ws.config.root / "lakepub.yaml"
        config.write_text(config.read_text() + "commit: ordered\n")
        ws = Workspace.open(ws.config.root)
    seen: list[int] = []
    ws.run(DATASET, max_batch=300, stop=lambda: bool(seen.append(1)) or len(seen) > 1)  # one batch
    before = _published(ws)
    monkeypatch.setattr(uploads, "_FAILED", [])  # this process's record of failed uploads, for this test only
    real_upload = s3._Tee._upload

    client = s3_endpoint.client()

    def failing(self, data):
        real_upload(self, data)
        if self._background and self._location.endswith(".avro"):  # as if it never got there
            client.delete_object(Bucket=s3_endpoint.bucket, Key=self._location.split("/", 3)[3])
            raise OSError("injected: connection reset during PutObject")

    monkeypatch.setattr(s3._Tee, "_upload", failing)
    for _ in range(2):
        with pytest.raises(RetryableError, match="earlier upload") as refused:
            ws.run(DATASET, max_batch=300)
        assert refused.value.exit_code == 4
        assert _published(ws) == before
    monkeypatch.setattr(s3._Tee, "_upload", real_upload)
    monkeypatch.setattr(uploads, "_FAILED", [])  # a new process
    REMEMBERED.clear()
    fresh = Workspace.open(ws.config.root)
    fresh.run(DATASET)
    assert _published(fresh) == _published_oracle(fresh)
    assert Workspace.open(ws.config.root).verify(DATASET, deep=True).ok


def test_a_lookup_checks_cached_runs_itself_and_fetches_only_the_others(s3_endpoint, tmp_path, monkeypatch):
    """``CachedKeyIndex.ensure`` checks a cached run on the calling thread (size and Arrow magic,
    as ``fetch``) and sends only the runs missing or damaged to the fetch pool: a new process
    with a warm cache starts no fetch thread, and a damaged copy is still refetched, never mapped."""
    import numpy as np

    from lakepub.store import cache as cache_module
    from lakepub.store.cache import CachedKeyIndex
    from tests.integration.test_review_s3 import index_rows as rows

    io = LakepubFileIO(s3_endpoint.s3_properties())
    n = 20_000

    ledger = f"s3://{s3_endpoint.bucket}/ensure/ledger"
    folder = tmp_path / "cache"
    writer = CachedKeyIndex(FileCache(folder), ledger).bind(io)
    runs = writer.append(writer.append([], rows(0)), rows(10 * n))
    assert len(runs) == 2
    fetched: list[str] = []
    submit = cache_module._POOL.submit

    def counting(fn, *args, **kwargs):
        if fn == FileCache.fetch or getattr(fn, "__func__", None) is FileCache.fetch:
            fetched.append(args[1])
        return submit(fn, *args, **kwargs)
    monkeypatch.setattr(cache_module._POOL, "submit", counting)
    k1 = np.array([5, 10 * n + 5], dtype=np.int64)

    def looked_up() -> list[int]:
        reader = CachedKeyIndex(FileCache(folder), ledger).bind(io)  # as a new process: the cache on disk only
        found, _ = reader.lookup(runs, k1, (k1 % 7).astype(np.int32))
        return sorted(found.column("cents").to_pylist())

    assert looked_up() == [5, 10 * n + 5] and fetched == []  # all cached: no fetch task at all
    damaged = writer.folder / runs[1].name
    good = damaged.read_bytes()
    damaged.write_bytes(good[:-6] + b"\0" * 6)  # right size, wrong end magic
    assert looked_up() == [5, 10 * n + 5]
    assert fetched == [writer.location(runs[1])] and damaged.read_bytes() == good  # refetched, then mapped
    (writer.folder / runs[0].name).unlink()
    fetched.clear()
    assert looked_up() == [5, 10 * n + 5] and fetched == [writer.location(runs[0])]
