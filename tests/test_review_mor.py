"""Adversarial review of merge-on-read (issue 12): cases the feature's own tests do not drive."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.test_merge_on_read import Stream, _check, _dataset, _delete_files, _workspace
from lakepub.workspace import Workspace


@pytest.mark.parametrize("partition", ["identity(country)", "bucket(3, tenant)", "identity(plan)"])
def test_merge_on_read_on_other_partitionings_equals_the_oracle(tmp_path: Path, partition: str):
    ws = _workspace(tmp_path / "ws", _dataset("cow", None, partition), _dataset("mor", "merge-on-read", partition))
    stream = Stream(11)
    for size in (30, 12, 25, 7, 40):
        stream.publish(ws, "mor", stream.batch(size))
        _check(ws, stream, "cow", "mor", datafusion=False)
    assert _delete_files(ws, "mor") > 0
    _check(Workspace.open(ws.config.root), stream, "cow", "mor")


@pytest.mark.parametrize("partition", ["identity(country)", "none"])
def test_partial_folds_ledger_compaction_and_the_janitor_between_publishes(tmp_path: Path, partition: str):
    from lakepub.maintenance.compact import compact_ledger
    from lakepub.maintenance.fold import fold_deletes
    from lakepub.maintenance.janitor import JanitorOptions, run_janitor

    root = tmp_path / "ws"
    ws = _workspace(root, _dataset("cow", None, partition), _dataset("mor", "merge-on-read", partition))
    stream = Stream(12)
    for i, size in enumerate((40, 10, 10, 5, 20, 3, 15, 8)):
        stream.publish(ws, "mor", stream.batch(size))
        if i % 3 == 1:
            fold_deletes(Workspace.open(root), "mor", threshold=0.3)
        if i % 3 == 2:
            compact_ledger(Workspace.open(root), "mor")
            run_janitor(Workspace.open(root), options=JanitorOptions(older_than_s=0, retain_last=1))
        _check(ws, stream, "cow", "mor", datafusion=False)
    _check(Workspace.open(root), stream, "cow", "mor")
