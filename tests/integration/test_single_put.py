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
    DATASET, _published, _published_oracle, _rerun_as_new_process, _runs, _workspace, counting_s3,
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


def _pyarrow_options(properties):
    """The options pyiceberg's S3 file system is made with from ``properties`` (its pickled form)."""
    fs = LakepubFileIO(properties)._make_s3_fs("bucket")
    return fs.__reduce__()[1][0]


@pytest.mark.parametrize("endpoint", ["127.0.0.1:9", "s3.example.com", "https://s3.example.com",
                                      "http://127.0.0.1:9"])
def test_the_client_uses_the_scheme_pyarrow_uses(endpoint):
    # pyarrow's endpoint_override without a scheme is HTTPS (its ``scheme`` defaults to https):
    # a run must not go up in clear text beside files that went up over TLS.
    props = {"s3.endpoint": endpoint, "s3.region": "us-east-1", "s3.access-key-id": "a",
             "s3.secret-access-key": "b"}
    scheme = _pyarrow_options(props)["scheme"]
    if "://" in endpoint:
        scheme = endpoint.split("://")[0]
    assert single_put._client(props).meta.endpoint_url.split("://")[0] == scheme


@pytest.mark.parametrize("value", ["1", "yes", "True", "true", "0", "no", "false"])
def test_virtual_addressing_is_read_as_pyiceberg_reads_it(value):
    props = {"s3.endpoint": "http://127.0.0.1:9", "s3.region": "us-east-1", "s3.access-key-id": "a",
             "s3.secret-access-key": "b", "s3.force-virtual-addressing": value}
    virtual = _pyarrow_options(props)["force_virtual_addressing"]
    style = (single_put._client(props).meta.config.s3 or {}).get("addressing_style", "auto")
    assert (style == "path") is (not virtual), (value, virtual, style)


def test_a_failed_put_is_an_os_error_like_pyarrows(s3_endpoint, tmp_path):
    # Without background uploads (a REST catalog) the upload runs in the caller, whose
    # ``except OSError`` (publish/lookup.py ``runs_after``: the new snapshot gets no index) must
    # see a failed PutObject as it saw a failed pyarrow upload, not as an internal error.
    io = LakepubFileIO(s3_endpoint.s3_properties())
    assert not io.background
    cache = FileCache(tmp_path / "cache")
    location = "s3://no-such-bucket-lakepub/index/run.arrow"
    local = cache.path(location)
    local.parent.mkdir(parents=True)
    shutil.move(_big_arrow(tmp_path, 9), local)
    with pytest.raises(OSError):
        cache.put(io, location, local)


@pytest.mark.parametrize("variable", ["AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"])
def test_an_endpoint_in_the_environment_is_not_used_as_pyarrow_does_not_use_it(monkeypatch, variable):
    # pyarrow 26 ignores AWS_ENDPOINT_URL(_S3) and a profile's endpoint_url (measured: an upload
    # without s3.endpoint went to <bucket>.s3.<region>.amazonaws.com with either set); boto3
    # honours them, so without this a run would go up to another store than the warehouse's.
    monkeypatch.setenv(variable, "http://127.0.0.1:9")
    props = {"s3.region": "eu-west-1", "s3.access-key-id": "a", "s3.secret-access-key": "b"}
    assert not _pyarrow_options(props)["endpoint_override"]
    endpoint = single_put._client(props).meta.endpoint_url
    assert "127.0.0.1" not in endpoint and "amazonaws.com" in endpoint, endpoint


def test_a_put_object_failing_in_its_upload_thread_publishes_nothing(s3_endpoint, make_workspace, tmp_path,
                                                                    monkeypatch):
    # boto3's own exception, raised after part of the body was read, inside the background
    # upload: recorded before the barrier, the batch refused (retry), nothing published; a new
    # process publishes everything.
    from botocore.exceptions import EndpointConnectionError

    from lakepub.errors import RetryableError
    from lakepub.store import uploads

    ws = _workspace(make_workspace, tmp_path, s3_endpoint, "singleputfail", events=900)
    seen: list[int] = []
    ws.run(DATASET, max_batch=300, stop=lambda: bool(seen.append(1)) or len(seen) > 1)  # one batch
    before = _published(ws)
    monkeypatch.setattr(uploads, "_FAILED", [])
    monkeypatch.setattr(single_put, "SINGLE_PUT_FROM", 1)
    tried = []

    class Failing:
        def put_object(self, Body, **kwargs):
            Body.read(100)
            tried.append(kwargs["Key"])
            raise EndpointConnectionError(endpoint_url="https://s3.example.com")

    monkeypatch.setattr(single_put, "_client", lambda properties: Failing())
    with pytest.raises(RetryableError, match="earlier upload") as refused:
        ws.run(DATASET, max_batch=300)
    assert refused.value.exit_code == 4 and tried
    assert _published(ws) == before
    _rerun_as_new_process(monkeypatch, ws)


def test_a_bare_endpoint_is_https_for_the_janitor_and_duckdb_too():
    """pyarrow writes the warehouse over HTTPS to a ``host:port`` endpoint; the janitor's boto3
    client and DuckDB's secret must reach the same endpoint the same way (not plain HTTP)."""
    import duckdb

    from lakepub.duck import configure_s3
    from lakepub.maintenance.filestore import S3FileStore

    props = {"s3.endpoint": "store.example:9000", "s3.access-key-id": "k", "s3.secret-access-key": "s",
             "s3.region": "us-east-1"}
    assert S3FileStore.from_properties(props).client.meta.endpoint_url == "https://store.example:9000"
    con = duckdb.connect()
    seen: list[str] = []
    con_execute = con.execute

    class Spy:
        def execute(self, sql, *args):
            seen.append(sql)
            return con_execute(sql, *args) if not sql.startswith("CREATE OR REPLACE SECRET") else None

    configure_s3(Spy(), props)
    secret = next(s for s in seen if s.startswith("CREATE OR REPLACE SECRET"))
    assert "ENDPOINT 'store.example:9000'" in secret and "USE_SSL true" in secret


def _secret_for(props: dict, monkeypatch, env: dict) -> str:
    """The secret configure_s3 creates for ``props`` under ``env``, as DuckDB stores it."""
    import duckdb

    from lakepub.duck import configure_s3, extension_path

    for name in ("AWS_REGION", "AWS_DEFAULT_REGION"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    con = duckdb.connect(config={"autoinstall_known_extensions": "false", "autoload_known_extensions": "false"})
    con.execute(f"LOAD '{extension_path('httpfs')}'")
    configure_s3(con, props)
    return con.execute("SELECT secret_string FROM duckdb_secrets() WHERE name = 'lakepub_s3'").fetchone()[0]


def test_duckdb_signs_with_the_region_the_writers_use(monkeypatch):
    """A bucket outside us-east-1 configured only through AWS_REGION / AWS_DEFAULT_REGION (as boto3
    reads it), or through ``client.region``: DuckDB must sign reads for that region too, not
    us-east-1; the catalog's ``s3.region`` wins over the environment."""
    keys = {"s3.endpoint": "http://127.0.0.1:9", "s3.access-key-id": "a", "s3.secret-access-key": "b"}
    assert "region=eu-west-1" in _secret_for(keys, monkeypatch, {"AWS_REGION": "eu-west-1"})
    assert "region=ap-south-1" in _secret_for(keys, monkeypatch, {"AWS_DEFAULT_REGION": "ap-south-1"})
    assert "region=eu-north-1" in _secret_for({**keys, "client.region": "eu-north-1"}, monkeypatch, {})
    assert "region=us-west-2" in _secret_for({**keys, "s3.region": "us-west-2"}, monkeypatch,
                                             {"AWS_REGION": "eu-west-1"})
    assert "region=us-east-1" in _secret_for(keys, monkeypatch, {})


def test_duckdb_gets_the_session_token_of_temporary_credentials(monkeypatch):
    """STS credentials are key, secret and session token: without the token every DuckDB read of the
    warehouse is refused while the writers (pyarrow, boto3) succeed."""
    import duckdb

    from lakepub.duck import configure_s3

    seen: list[str] = []

    class Spy:
        def execute(self, sql, *args):
            seen.append(sql)

    configure_s3(Spy(), {"s3.access-key-id": "a", "s3.secret-access-key": "b", "s3.session-token": "t0k'en",
                         "s3.region": "eu-west-1"})
    assert "SESSION_TOKEN 't0k''en'" in seen[-1]
    # and DuckDB accepts the statement
    _secret_for({"s3.access-key-id": "a", "s3.secret-access-key": "b", "s3.session-token": "t"}, monkeypatch, {})


def test_boto3_sends_checksums_only_where_required_on_a_custom_endpoint(monkeypatch):
    """boto3's default CRC32 trailers are refused by S3-compatible stores released before 2025: on a
    custom endpoint the janitor's and single PUT's client sends checksums only where S3 requires one,
    unless the environment chooses; on AWS, boto3's default stands."""
    from lakepub.maintenance.filestore import S3FileStore

    for name in ("AWS_REQUEST_CHECKSUM_CALCULATION", "AWS_RESPONSE_CHECKSUM_VALIDATION"):
        monkeypatch.delenv(name, raising=False)
    keys = {"s3.access-key-id": "a", "s3.secret-access-key": "b", "s3.region": "eu-west-1"}
    custom = S3FileStore.from_properties({**keys, "s3.endpoint": "http://minio.local:9000"}).client.meta.config
    assert (custom.request_checksum_calculation, custom.response_checksum_validation) == ("when_required",) * 2
    aws = S3FileStore.from_properties({**keys, "s3.endpoint": "https://s3.eu-west-1.amazonaws.com"}).client.meta.config
    assert aws.request_checksum_calculation == "when_supported"
    assert S3FileStore.from_properties(keys).client.meta.config.request_checksum_calculation == "when_supported"
    monkeypatch.setenv("AWS_REQUEST_CHECKSUM_CALCULATION", "when_supported")
    chosen = S3FileStore.from_properties({**keys, "s3.endpoint": "http://minio.local:9000"}).client.meta.config
    assert chosen.request_checksum_calculation == "when_supported"


def test_every_boto3_client_is_made_under_one_lock(monkeypatch):
    """boto3's default session is not thread-safe: the janitor's client (made on the main thread)
    and a single PUT's (made on an upload thread) must not be created at the same time; both are
    made by ``S3FileStore.from_properties`` under its lock."""
    import threading

    import boto3

    from lakepub.maintenance import filestore
    from lakepub.store import single_put

    made, real = [], boto3.client

    def client(*args, **kwargs):
        made.append(filestore._BOTO3_LOCK.locked())
        return real(*args, **kwargs)

    monkeypatch.setattr(boto3, "client", client)
    monkeypatch.setattr(single_put, "_CLIENTS", {})
    props = {"s3.endpoint": "http://127.0.0.1:9", "s3.region": "us-east-1", "s3.access-key-id": "a",
             "s3.secret-access-key": "b"}
    threads = [threading.Thread(target=single_put._client, args=({**props, "s3.region": f"r{i}"},)) for i in range(4)]
    for t in threads:
        t.start()
    filestore.S3FileStore.from_properties(props)
    for t in threads:
        t.join()
    assert made == [True] * 5
