"""lakepub with its warehouse on S3 (moto's server mode): pyiceberg writes there, DuckDB reads it
back through httpfs and the secret lakepub.duck creates from the catalog's ``s3.*`` properties."""

from __future__ import annotations

import pytest

from conftest import SEED_EVENTS, summary_rows
from lakepub import reports
from lakepub.workspace import Workspace

pytestmark = pytest.mark.integration

DATASET = "orders_daily"


def test_publish_query_and_verify_on_s3(s3_endpoint, make_workspace, tmp_path):
    prefix = "wh"
    catalog = {
        "name": "lakepub",
        "type": "sql",
        "uri": f"sqlite:///{tmp_path / 'catalog.db'}",
        "warehouse": f"s3://{s3_endpoint.bucket}/{prefix}",
        **s3_endpoint.s3_properties(),
    }
    ws = Workspace.open(make_workspace(catalog))

    for offset, event in enumerate(SEED_EVENTS):
        ws.publish(DATASET, [event], start={"p0": offset}, end={"p0": offset + 1})

    # The tables live on S3.
    location = ws.published_tables()[DATASET]
    assert location.startswith(f"s3://{s3_endpoint.bucket}/{prefix}/"), location

    # DuckDB reads them through httpfs (fresh handle: nothing cached from the writer).
    assert summary_rows(ws) == [("2025-10-02", 150, 1)]
    assert ws.query(f"SELECT count(*) AS n, sum(cents) AS cents FROM {DATASET}").to_pylist() == [{"n": 1, "cents": 150}]
    view = ws.published_views()[DATASET]  # the sandboxed view read the s3:// data files as Parquet
    assert view.fallback is None and view.files and all(f.startswith(f"s3://{s3_endpoint.bucket}/{prefix}/") for f in view.files)

    # boto3 sees what pyiceberg wrote: data files and metadata of both tables.
    keys = s3_endpoint.keys(f"{prefix}/")
    data = [k for k in keys if k.endswith(".parquet")]
    metadata = [k for k in keys if k.endswith(".metadata.json")]
    manifests = [k for k in keys if k.endswith(".avro")]
    assert data and metadata and manifests, keys
    assert location.split(f"s3://{s3_endpoint.bucket}/", 1)[1] in metadata
    assert any("/orders_daily/" in k for k in data) and any("/orders_daily__ledger/" in k for k in data), data

    report = reports.verify(ws, DATASET, deep=True)
    assert report.ok, report.mismatches
    assert report.deep and report.partitions_checked >= 1


def test_query_sandbox_reads_the_s3_warehouse_and_nothing_else(s3_endpoint, make_workspace, tmp_path):
    """`lakepub query`'s sandbox allows ``s3://bucket/prefix/`` (httpfs honours allowed_directories)
    and keeps the secret: the views read, other keys of the bucket do not, nothing is written."""
    from lakepub.errors import QueryError

    prefix = "sandboxed"
    catalog = {
        "name": "lakepub", "type": "sql", "uri": f"sqlite:///{tmp_path / 'catalog.db'}",
        "warehouse": f"s3://{s3_endpoint.bucket}/{prefix}", **s3_endpoint.s3_properties(),
    }
    ws = Workspace.open(make_workspace(catalog))
    ws.publish(DATASET, SEED_EVENTS[:1], start={}, end={"p0": 1})
    s3_endpoint.client().put_object(Bucket=s3_endpoint.bucket, Key="outside/secret.csv", Body=b"x\n42\n")
    keys = s3_endpoint.keys("")

    assert ws.query(f"SELECT sum(cents) AS c FROM {DATASET}").to_pylist() == [{"c": 100}]
    with pytest.raises(QueryError, match="disabled by configuration"):
        ws.query(f"SELECT * FROM read_csv('s3://{s3_endpoint.bucket}/outside/secret.csv')")
    with pytest.raises(QueryError, match="only SELECT"):
        ws.query(f"COPY (SELECT 1 AS x) TO 's3://{s3_endpoint.bucket}/{prefix}/x.csv'")
    assert s3_endpoint.keys("") == keys
    assert reports.verify(ws, DATASET, deep=True).ok


def test_table_folder_on_s3_reads_through_its_version_hint(s3_endpoint, make_workspace, tmp_path):
    """The hint is written to S3 too (one object write): DuckDB reads the table folder itself."""
    from lakepub import duck

    prefix = "hinted"
    catalog = {
        "name": "lakepub", "type": "sql", "uri": f"sqlite:///{tmp_path / 'catalog.db'}",
        "warehouse": f"s3://{s3_endpoint.bucket}/{prefix}", **s3_endpoint.s3_properties(),
    }
    ws = Workspace.open(make_workspace(catalog))
    for offset, event in enumerate(SEED_EVENTS):
        ws.publish(DATASET, [event], start={"p0": offset}, end={"p0": offset + 1})
    location = ws.published_tables()[DATASET]
    folder = location.rsplit("/metadata/", 1)[0]
    body = s3_endpoint.client().get_object(Bucket=s3_endpoint.bucket,
                                           Key=f"{prefix}/lakepub/{DATASET}/metadata/version-hint.text")["Body"].read()
    assert body.decode() == location.rsplit("/", 1)[1].removesuffix(".metadata.json")
    con = duck.connect(ws.config.catalog)
    rows = con.execute(f"SELECT day::VARCHAR, cents, orders FROM iceberg_scan('{folder}') ORDER BY day").fetchall()
    assert rows == summary_rows(ws) == [("2025-10-02", 150, 1)]
