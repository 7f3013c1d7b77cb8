"""Glue catalog on moto's server mode.

pyiceberg's Glue catalog itself works against the local endpoint (namespace, table on S3, append,
scan). Glue cannot move two tables in one commit, so lakepub publishes there with the ordered
commit (ledger first, then the published table, which names the ledger snapshot it is consistent
with): the seed example, a crash between the two commits, and reads through DuckDB on S3.
"""

from __future__ import annotations

import uuid

import pyarrow as pa
import pytest
from pyiceberg.catalog import load_catalog
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField, StringType

from conftest import SEED_EVENTS
from lakepub import reports
from lakepub.store.layout import ledger_id
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


def test_seed_example_published_on_glue_and_read_by_duckdb(glue_ws):
    ws, _ = glue_ws
    for i, event in enumerate(SEED_EVENTS):
        ws.publish(DATASET, [event], start={"p0": i}, end={"p0": i + 1})
    fresh = Workspace.open(ws.config.root)
    assert fresh.publisher(DATASET).ordered
    rows = fresh.query("SELECT day::VARCHAR AS day, cents, orders FROM orders_daily").to_pylist()
    assert rows == [{"day": "2025-10-02", "cents": 150, "orders": 1}]
    assert fresh.committed_positions(DATASET) == {"orders": {"p0": 4}}
    assert reports.verify(fresh, DATASET, deep=True).ok
    again = fresh.publish(DATASET, [SEED_EVENTS[3]], start={"p0": 3}, end={"p0": 4})
    assert again.status == "already-published"


def test_glue_crash_between_the_two_commits_then_retry(glue_ws, monkeypatch):
    """The ledger commit lands, the published-table commit does not: nothing is visible, and a
    retry builds on the published ledger snapshot instead of the orphan append."""
    import lakepub.store.commit as commit_module

    ws, _ = glue_ws
    ws.publish(DATASET, SEED_EVENTS[:2], start={}, end={"p0": 2})

    class Crash(Exception):
        pass

    def crash(name: str) -> None:
        if name == "before-pointer-swap":
            raise Crash()

    monkeypatch.setattr(commit_module, "fault_point", crash)
    with pytest.raises(Crash):
        Workspace.open(ws.config.root).publish(DATASET, SEED_EVENTS[2:], start={"p0": 2}, end={"p0": 4})
    monkeypatch.undo()
    fresh = Workspace.open(ws.config.root)
    assert fresh.committed_positions(DATASET) == {"orders": {"p0": 2}}
    ledger = fresh.catalog.load_table(ledger_id(fresh.config.namespace, DATASET))
    assert len(ledger.scan().to_arrow()) == 4  # the orphan append sits on the ledger's main
    fresh.publish(DATASET, SEED_EVENTS[2:], start={"p0": 2}, end={"p0": 4})
    ledger = fresh.catalog.load_table(ledger_id(fresh.config.namespace, DATASET))
    assert len(ledger.scan().to_arrow()) == 4  # rebuilt on the published snapshot: no double rows
    assert reports.verify(fresh, DATASET, deep=True).ok
    rows = fresh.query("SELECT cents, orders FROM orders_daily").to_pylist()
    assert rows == [{"cents": 150, "orders": 1}]
