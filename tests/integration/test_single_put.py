"""Key-index runs too large for pyarrow's single PUT go up in one PutObject (store/single_put.py).

* through the request-counting moto server: a 12 MiB run is one PUT, no multipart POST, and the
  bytes on the store are the file's; with an ``s3.*`` property the module does not map (a role
  to assume) the upload falls back to pyarrow's multipart, so it never goes up with other
  credentials than the warehouse's;
* a workspace whose every run goes through PutObject (threshold lowered to 1 byte) publishes
  rows equal to the oracle, read back by DuckDB, and a deep verify from a new process with the
  cache emptied (runs fetched from S3) passes.
"""

from __future__ import annotations

import shutil

import pyarrow as pa
import pytest

from lakepub.store import single_put
from lakepub.store.cache import FileCache
from lakepub.store.s3 import REMEMBERED, LakepubFileIO
from lakepub.workspace import Workspace
from tests.integration.test_object_store import (  # noqa: F401 - counting_s3 is a fixture
    DATASET, _published, _published_oracle, _runs, _workspace, counting_s3,
)

pytestmark = pytest.mark.integration


def _big_arrow(tmp_path, mib: int):
    rows = (mib << 20) // 8 + 1000
    path = tmp_path / "run.arrow"
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, pa.schema([("k1", pa.int64())])) as writer:
        writer.write_table(pa.table({"k1": pa.array(range(rows), pa.int64())}))
    return path


@pytest.mark.parametrize("extra, single", [({}, True), ({"s3.role-arn": "arn:aws:iam::123456789012:role/x"}, False)])
def test_a_large_run_is_one_put_unless_a_property_is_not_mapped(counting_s3, tmp_path, extra, single):
    s3, counter = counting_s3
    io = LakepubFileIO({**s3.s3_properties(), **extra})
    if extra:  # a role pyarrow would assume: keep the file system pyiceberg makes without it
        io._initialize_s3_fs = lambda netloc: LakepubFileIO(s3.s3_properties())._initialize_s3_fs(netloc)
    cache = FileCache(tmp_path / "cache")
    location = f"s3://{s3.bucket}/single-put-{single}/index/run.arrow"
    local = cache.path(location)
    local.parent.mkdir(parents=True)
    shutil.move(_big_arrow(tmp_path, 12), local)
    assert local.stat().st_size > 10 << 20  # above pyarrow's own single-PUT size
    counter._intervals = []
    assert cache.put(io, location, local) == local.stat().st_size
    methods = counter.stats()["by_method"]
    if single:
        assert methods == {"PUT": 1}, methods
    else:
        assert methods.get("POST") == 2 and methods["PUT"] >= 2, methods  # pyarrow's multipart upload
    body = s3.client().get_object(Bucket=s3.bucket, Key=location.split("/", 3)[3])["Body"].read()
    assert body == local.read_bytes()


def test_runs_uploaded_by_put_object_are_read_back_by_a_new_process(s3_endpoint, make_workspace, tmp_path,
                                                                   monkeypatch):
    monkeypatch.setattr(single_put, "SINGLE_PUT_FROM", 1)  # every run through PutObject
    calls = []
    real = single_put.put_file
    monkeypatch.setattr(single_put, "put_file", lambda *a: calls.append(a[1]) or real(*a))
    ws = _workspace(make_workspace, tmp_path, s3_endpoint, "singleput", events=3000)
    ws.run(DATASET, max_batch=700)
    runs = _runs(ws)
    assert runs and all(r.size for r in runs)
    assert [c for c in calls if c.endswith(".arrow")], calls
    ws.close()
    shutil.rmtree(ws.file_cache.folder)  # the runs must come from S3
    REMEMBERED.clear()
    fresh = Workspace.open(ws.config.root)
    assert fresh.verify(DATASET, deep=True).ok
    assert _published(fresh) == _published_oracle(fresh)
