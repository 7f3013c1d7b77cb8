"""Glue catalog on moto's server mode.

pyiceberg's Glue catalog itself works against the local endpoint (namespace, table on S3, append,
scan). lakepub's atomic ledger+summary publish needs a SQL catalog, so publishing on a Glue
workspace must fail with one clear ConfigError line and leave no table data behind.
"""

from __future__ import annotations

import uuid

import pyarrow as pa
import pytest
from pyiceberg.catalog import load_catalog
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField, StringType

from conftest import SEED_EVENTS
from lakepub.errors import ConfigError
from lakepub.store.layout import ledger_id, summary_id
from lakepub.workspace import Workspace

pytestmark = pytest.mark.integration

DATASET = "orders_daily"


def _glue_properties(s3_endpoint, prefix: str) -> dict[str, str]:
    return {
        "type": "glue",
        "glue.endpoint": s3_endpoint.url,
        "glue.region": s3_endpoint.region,
        "glue.access-key-id": s3_endpoint.access_key_id,
        "glue.secret-access-key": s3_endpoint.secret_access_key,
        "warehouse": f"s3://{s3_endpoint.bucket}/{prefix}",
        **s3_endpoint.s3_properties(),
    }


def test_pyiceberg_glue_catalog_works_on_the_local_endpoint(s3_endpoint):
    prefix = f"glue-probe-{uuid.uuid4().hex[:8]}"
    catalog = load_catalog("probe", **_glue_properties(s3_endpoint, prefix))
    namespace = f"probe_{uuid.uuid4().hex[:8]}"
    catalog.create_namespace(namespace)
    assert (namespace,) in catalog.list_namespaces()

    schema = Schema(NestedField(1, "id", LongType(), required=False), NestedField(2, "name", StringType(), required=False))
    table = catalog.create_table((namespace, "t"), schema=schema,
                                 location=f"s3://{s3_endpoint.bucket}/{prefix}/{namespace}/t")
    rows = pa.table({"id": pa.array([1, 2, 3], pa.int64()), "name": ["a", "b", "c"]})
    table.append(rows)
    table.append(rows.slice(0, 1))

    reloaded = catalog.load_table((namespace, "t"))
    assert len(reloaded.history()) == 2
    assert sorted(reloaded.scan().to_arrow().column("id").to_pylist()) == [1, 1, 2, 3]
    assert reloaded.metadata_location.startswith(f"s3://{s3_endpoint.bucket}/{prefix}/")
    keys = s3_endpoint.keys(f"{prefix}/")
    assert any(k.endswith(".parquet") for k in keys) and any(k.endswith(".metadata.json") for k in keys), keys


@pytest.fixture
def glue_ws(s3_endpoint, make_workspace) -> tuple[Workspace, str]:
    suffix = uuid.uuid4().hex[:8]
    prefix = f"glue-{suffix}"
    # The moto server (and so its Glue databases) is shared by the session: one namespace per test.
    ws = Workspace.open(make_workspace({"name": "lakepub", **_glue_properties(s3_endpoint, prefix)},
                                       namespace=f"lakepub_{suffix}"))
    assert type(ws.catalog).__name__ == "GlueCatalog"
    return ws, prefix


def _refused_publish(ws: Workspace) -> ConfigError:
    with pytest.raises(ConfigError) as refused:
        ws.publish(DATASET, SEED_EVENTS, start={"p0": 0}, end={"p0": 4})
    return refused.value


def test_publish_on_a_glue_workspace_is_refused_with_a_config_error(glue_ws):
    ws, _ = glue_ws
    error = _refused_publish(ws)
    message = error.one_line()
    assert str(error) == message, "the error must be one line"
    assert "SQL catalog" in message and "GlueCatalog" in message, message
    assert error.exit_code == 2

    # Nothing was committed: no snapshot on either table and no committed position.
    ns = ws.config.namespace
    for ident in (summary_id(ns, DATASET), ledger_id(ns, DATASET)):
        if ws.catalog.table_exists(ident):
            assert ws.catalog.load_table(ident).current_snapshot() is None, ident
    assert ws.published_tables() == {}
    assert ws.committed_positions(DATASET) == {}


def test_refused_glue_publish_writes_no_table_data(glue_ws, s3_endpoint):
    ws, prefix = glue_ws
    _refused_publish(ws)
    keys = s3_endpoint.keys(f"{prefix}/")
    written = [k for k in keys if k.endswith((".parquet", ".avro"))]
    assert not written, written
