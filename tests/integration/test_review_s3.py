"""Adversarial review of object storage (issue 16) and merge-on-read on it (issue 12)."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
import yaml

from lakepub.workspace import Workspace
from tests.test_merge_on_read import CONTRACT, Stream, _dataset, _delete_files, _rows

pytestmark = pytest.mark.integration


def _glue_mor_workspace(s3_endpoint, make_workspace) -> Workspace:
    from tests.integration.test_glue import _glue_properties

    suffix = uuid.uuid4().hex[:8]
    root = make_workspace({"name": "lakepub", **_glue_properties(s3_endpoint, f"glue-mor-{suffix}")},
                          namespace=f"lakepub_{suffix}")
    (root / "catalog" / "contracts" / "customers@v1.0.yaml").write_text(CONTRACT)
    for d in (_dataset("mor", "merge-on-read"),):
        (root / "catalog" / "datasets" / f"{d['name']}.yaml").write_text(yaml.safe_dump(d, sort_keys=False))
    ws = Workspace.open(root)
    assert type(ws.catalog).__name__ == "GlueCatalog"
    return ws


def _equal_to_oracle(ws: Workspace, stream: Stream, *names: str) -> None:
    for name in names:
        table = ws.catalog.load_table((ws.config.namespace, name))
        assert _rows(table.scan().to_arrow()) == stream.expected(), name


def test_merge_on_read_deletes_are_folded_on_a_catalog_without_the_atomic_commit(s3_endpoint, make_workspace):
    """Glue publishes merge-on-read with the ordered commit; ``lakepub compact --deletes-only``
    must fold there too (it commits one table: the atomic multi-table commit is not needed)."""
    from lakepub.maintenance.fold import fold_deletes

    ws = _glue_mor_workspace(s3_endpoint, make_workspace)
    stream = Stream(21)
    for size in (30, 10, 10):
        stream.publish(ws, "mor", stream.batch(size))
    _equal_to_oracle(ws, stream, "mor")
    assert _delete_files(ws, "mor") > 0
    result = fold_deletes(Workspace.open(ws.config.root), "mor", threshold=0.0)
    assert result.snapshot_id is not None and result.data_files_rewritten > 0
    ws = Workspace.open(ws.config.root)
    assert _delete_files(ws, "mor") == 0
    _equal_to_oracle(ws, stream, "mor")
    stream.publish(ws, "mor", stream.batch(10))
    _equal_to_oracle(ws, stream, "mor")
    assert ws.verify("mor", deep=True).ok


def test_a_cached_parquet_file_evicted_before_it_is_mapped_is_read_from_the_store(s3_endpoint, tmp_path,
                                                                                   monkeypatch):
    """The cache folder is shared by every process of the workspace (and by the reader threads of
    one): another one's eviction can delete a copy between ``fetch`` returning its path and the
    reader mapping it. The read must then go to the store, not fail with FileNotFoundError (which
    means "the remote file is gone")."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from lakepub.store.cache import CACHE_FOLDER, FileCache
    from lakepub.store.s3 import LakepubFileIO

    io = LakepubFileIO({**s3_endpoint.s3_properties(), CACHE_FOLDER: str(tmp_path / "cache")})
    location = f"s3://{s3_endpoint.bucket}/evicted/{uuid.uuid4().hex}.parquet"
    rows = pa.table({"k": list(range(1000))})
    with io.new_output(location).create() as out:
        pq.write_table(rows, out)
    real = FileCache.fetch

    def fetch_then_evicted(self, *args, **kwargs) -> Path:
        path = real(self, *args, **kwargs)
        path.unlink()  # another process's eviction, right after the checks passed
        return path

    monkeypatch.setattr(FileCache, "fetch", fetch_then_evicted)
    with io.new_input(location).open() as stream:
        assert pq.read_table(stream).equals(rows)


def test_verify_sees_a_file_deleted_from_the_store_despite_the_disk_cache(s3_endpoint, make_workspace, tmp_path):
    """The disk cache keeps copies of published files; ``verify`` answers for the table on the
    store, which DuckDB reads: a data file deleted there must be reported, cache or not."""
    from tests.integration.test_object_store import DATASET, _workspace

    from lakepub.store.s3 import REMEMBERED

    ws = _workspace(make_workspace, tmp_path, s3_endpoint, "gone", events=600)
    ws.run(DATASET)
    table = ws.catalog.load_table((ws.config.namespace, DATASET))
    victim = next(iter(table.scan().plan_files())).file.file_path
    assert ws.file_cache.path(victim).exists()  # written through the cache
    s3_endpoint.client().delete_object(Bucket=s3_endpoint.bucket, Key=victim.split(f"{s3_endpoint.bucket}/", 1)[1])
    REMEMBERED.clear()
    try:
        report = Workspace.open(ws.config.root).verify(DATASET, deep=True)
        ok = report.ok
    except Exception as exc:  # noqa: BLE001 - a refusal naming the file is fine too
        ok, report = False, exc
    assert not ok, "verify --deep passed on a table whose data file is gone from the store"


def test_a_reader_joining_a_failed_prefetch_fetches_the_file_itself(s3_endpoint, monkeypatch):
    """store/s3.py: "a prefetch that fails is retried (and reported) by the reader". A reader
    that asks for a manifest while its prefetch is in flight waits for that download; when the
    prefetch fails (a transient error) the reader must fetch it itself, not fail the publish."""
    import threading

    from lakepub.store import s3

    io = s3.LakepubFileIO(s3_endpoint.s3_properties())
    location = f"s3://{s3_endpoint.bucket}/prefetch/{uuid.uuid4().hex}-m0.avro"
    with io.new_output(location).create() as out:
        out.write(b"manifest bytes")
    s3.REMEMBERED.clear()
    started, release = threading.Event(), threading.Event()
    real = s3._S3File._download
    calls = []

    def flaky(self):
        calls.append(threading.current_thread().name)
        if len(calls) == 1:  # the prefetch: slow, then a transient failure
            started.set()
            release.wait(10)
            raise OSError("connection reset by peer")
        return real(self)

    monkeypatch.setattr(s3._S3File, "_download", flaky)
    prefetch = threading.Thread(target=s3._quietly, args=(io.new_input(location),), name="prefetch")
    prefetch.start()
    assert started.wait(10)
    threading.Timer(0.3, release.set).start()  # fails while the reader waits on it
    with io.new_input(location).open() as stream:
        assert stream.read() == b"manifest bytes"
    prefetch.join(10)


def index_rows(start: int, n: int = 20_000):
    """``n`` key-index rows (``INDEX_SCHEMA``) of consecutive k1 from ``start``, cents = k1."""
    import numpy as np
    import pyarrow as pa

    from lakepub.store.key_index import INDEX_SCHEMA

    k1 = np.arange(start, start + n, dtype=np.int64)
    return pa.table({"k1": k1, "k2": (k1 % 7).astype(np.int32), "version": np.ones(n, np.int64),
                     "day": pa.array(np.zeros(n, np.int32)).cast(pa.date32()), "cents": k1,
                     "deleted": np.zeros(n, bool), "compacted": np.zeros(n, bool)}).cast(INDEX_SCHEMA)


def test_key_index_runs_beyond_the_cache_limit_are_still_looked_up(s3_endpoint, tmp_path):
    """A lookup fetches every run of the ledger snapshot into the cache, then maps them. When the
    runs together exceed the cache limit, fetching the later ones must not evict the earlier ones
    before they are mapped (else every lookup falls back to scanning the ledger, and every new
    ledger snapshot is written without an index: a silent, permanent loss of the index)."""
    import numpy as np

    from lakepub.store.cache import CachedKeyIndex, FileCache
    from lakepub.store.s3 import LakepubFileIO

    io = LakepubFileIO(s3_endpoint.s3_properties())
    n = 20_000
    rows = index_rows

    ledger = f"s3://{s3_endpoint.bucket}/limit/{uuid.uuid4().hex}/ledger"
    writer = CachedKeyIndex(FileCache(tmp_path / "w", limit=1 << 40), ledger).bind(io)
    runs = writer.append([], rows(0))
    runs = writer.append(runs, rows(10 * n))  # 20k rows on top of 20k: kept as two runs
    assert len(runs) == 2 and all(r.size for r in runs)
    reader = CachedKeyIndex(FileCache(tmp_path / "r", limit=int(max(r.size for r in runs) * 1.5)), ledger).bind(io)
    k1 = np.array([5, 10 * n + 5], dtype=np.int64)
    found, at = reader.lookup(runs, k1, (k1 % 7).astype(np.int32))
    assert sorted(found.column("cents").to_pylist()) == [5, 10 * n + 5]
