"""A publish in a new process on S3 (moto's server mode), issue 16: what it costs beyond a warm one.

* pyarrow's S3 output stream buffers each small file in a 10 MiB part buffer; a new process must
  fault in fresh memory for every buffer alive at once (a warm one reuses its own). Streams are
  opened for the upload only, at most as many as Arrow's IO threads (``store/s3._Tee``): a
  new process's publish rewriting ~30 partitions holds at most that many buffers, measured by
  Arrow's memory pool in a real new process; its published table read by DuckDB equals the
  oracle;
* the disk cache never serves a damaged copy of a metadata file (metadata JSON, manifest list,
  manifest): a new process finds them truncated or corrupted, fetches them again and publishes
  the same table.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from lakepub.generate import generate_stream
from lakepub.workspace import Workspace

pytestmark = pytest.mark.integration

DATASET = "orders_daily"
REPO = Path(__file__).resolve().parents[2]
PART_MIB = 10  # pyarrow's S3 part buffer (store/single_put.py: measured on pyarrow 26)

# A new process publishing the batch files given, in order: Arrow's pool peak after the first.
_NEW_PROCESS = """
import json, sys
import pyarrow as pa
from lakepub.workspace import Workspace
root, batches = sys.argv[1], json.loads(sys.argv[2])
ws = Workspace.open(root)
peaks = []
for path, start, end in batches:
    assert ws.publish("orders_daily", path, start=start, end=end).status == "published"
    peaks.append(pa.default_memory_pool().max_memory())
print(json.dumps({"peak": peaks[0], "io_threads": pa.io_thread_count()}))
"""


def _workspace(make_workspace, tmp_path: Path, s3, name: str, days: int) -> Workspace:
    root = make_workspace({"name": "lakepub", "type": "sql", "uri": f"sqlite:///{tmp_path / (name + '.db')}",
                           "warehouse": f"s3://{s3.bucket}/{name}", **s3.s3_properties()}, name=name)
    landing = root / "landing" / "orders"
    if landing.exists():
        landing.rmdir()
    generate_stream(landing, events=3000, partitions=2, days=days, seed=11, spread=True)
    return Workspace.open(root)


def _batch_files(ws: Workspace, folder: Path) -> list[tuple[str, dict, dict]]:
    from lakepub.landing import LandingSource

    spec = ws.dataset(DATASET)
    src = LandingSource(ws.config.landing_dir(spec.source), spec.contract)
    folder.mkdir()
    out = []
    for i, (table, start, end) in enumerate(src.batches({}, 1000)):
        path = folder / f"b{i}.parquet"
        pq.write_table(table, path)
        out.append((str(path), start, end))
    return out


def _new_process(ws: Workspace, batches) -> dict:
    out = subprocess.run([sys.executable, "-c", _NEW_PROCESS, str(ws.config.root), json.dumps(batches)],
                         capture_output=True, text=True, timeout=600, cwd=ws.config.root,
                         env={**__import__("os").environ, "PYTHONPATH": str(REPO)})
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def _published(root: Path) -> list[tuple]:
    return [tuple(r.values()) for r in Workspace.open(root).query(
        f"SELECT day::VARCHAR, cents, orders FROM {DATASET} ORDER BY day").to_pylist()]


def _oracle(ws: Workspace) -> list[tuple]:
    from lakepub.generate import oracle_summary, read_stream

    summary = oracle_summary(read_stream(ws.config.landing_dir("orders")))
    return [(d.isoformat(), cents, orders) for d, (cents, orders) in sorted(summary.items())]


def test_a_new_process_holds_at_most_one_part_buffer_per_io_thread(s3_endpoint, make_workspace, tmp_path):
    ws = _workspace(make_workspace, tmp_path, s3_endpoint, "buffers", days=1000)  # ~33 month partitions
    batches = _batch_files(ws, tmp_path / "batches")
    ws.publish(DATASET, batches[0][0], start=batches[0][1], end=batches[0][2])  # creates the tables
    ws.close()
    files = len(Workspace.open(ws.config.root).catalog.load_table((ws.config.namespace, DATASET)).inspect.files())
    assert files >= 30  # the next publish rewrites them all: 30+ PUTs of small files
    got = _new_process(ws, batches[1:])
    # Each stream open at once holds PART_MIB; opened at encoding time, every file being encoded or
    # queued held one (216 MiB measured at 36 partitions): now one per IO thread, plus what the
    # publish's own Arrow work peaks at (~25 MiB here).
    assert got["peak"] <= (got["io_threads"] * PART_MIB + 40) << 20, (got, files)
    assert _published(ws.config.root) == _oracle(ws)


def test_a_new_process_refetches_damaged_metadata_copies(s3_endpoint, make_workspace, tmp_path):
    """Every cached metadata file the next publish reads (the current metadata JSON of each table,
    its manifest list and manifests) damaged on disk: detected by its CRC frame and fetched
    again, never parsed; the published table equals the oracle."""
    ws = _workspace(make_workspace, tmp_path, s3_endpoint, "damaged", days=300)
    batches = _batch_files(ws, tmp_path / "batches")
    ws.publish(DATASET, batches[0][0], start=batches[0][1], end=batches[0][2])
    ws.close()
    catalog = Workspace.open(ws.config.root).catalog
    tables = [catalog.load_table(t) for t in catalog.list_tables(ws.config.namespace)]
    needed = {t.metadata_location for t in tables} | {t.current_snapshot().manifest_list for t in tables
                                                      if t.current_snapshot() is not None}
    cached = [p for p in ws.file_cache.folder.rglob("*") if p.is_file() and p.name.endswith((".metadata.json", ".avro"))]
    assert needed <= {_location(ws, p) for p in cached}  # what the next publish reads first is all on disk
    for i, path in enumerate(cached):  # every copy damaged: truncated, or one byte flipped
        raw = path.read_bytes()
        path.write_bytes(raw[: len(raw) // 2] if i % 2 else raw[:40] + bytes([raw[40] ^ 0xFF]) + raw[41:])
    _new_process(ws, batches[1:])
    assert _published(ws.config.root) == _oracle(ws)
    for location in needed:  # read by the new process: dropped and fetched again, whole
        assert ws.file_cache.read(location) is not None, location


def _location(ws: Workspace, path: Path) -> str:
    scheme, bucket, *key = path.relative_to(ws.file_cache.folder).parts
    return f"{scheme}://{bucket}/{'/'.join(key)}"
