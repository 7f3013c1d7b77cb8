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
