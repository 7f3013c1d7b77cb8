"""The deleted-fraction rule of merge-on-read publishes (issue 12 (c): bounded read cost).

A publish that would leave more than a dataset's ``fold_threshold`` of a partition's stored rows
deleted rewrites that partition whole in the same commit (``merge_on_read.bounded``). Driven
through ``Workspace.publish`` and the CLI; after every publish the merge-on-read table and a
copy-on-write table of the same entity (published in the same commit) are read back by DuckDB,
pyiceberg and DataFusion and compared with the oracle (the latest live version per key), and
``verify --deep`` passes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from lakepub.workspace import Workspace
from tests.test_merge_on_read import Stream, _check, _dataset, _delete_files, _workspace


def _event(stream: Stream, customer: int, deleted: bool = False, mrr: int = 1) -> dict:
    k = ("a", customer)
    v = stream.version.get(k, 0) + 1
    return {"tenant": "a", "customer_id": customer, "version": v, "country": None if deleted else "FR",
            "plan": None if deleted else "pro", "mrr_cents": None if deleted else mrr, "deleted": deleted}


def _publish(ws: Workspace, stream: Stream, events: list[dict]) -> None:
    stream.apply(events)
    stream.publish(ws, "mor", events)


def _files(ws: Workspace, name: str) -> tuple[int, int]:
    """(data files, delete files) of the table's current snapshot."""
    table = ws.catalog.load_table((ws.config.namespace, name))
    return len(list(table.scan().plan_files())), _delete_files(ws, name)


def test_a_partition_is_rewritten_whole_exactly_past_the_threshold(tmp_path: Path):
    ws = _workspace(tmp_path / "ws", _dataset("mor", "merge-on-read", "none", fold_threshold=0.2),
                    _dataset("ref", None, "none"))
    stream = Stream(0)
    seen = []
    steps = [  # built one after the other: each event's version follows the published ones
        lambda: [_event(stream, c) for c in range(10)],                        # 10 stored, 0 deleted
        lambda: [_event(stream, 0, deleted=True), _event(stream, 1, deleted=True)],  # 2/10, the threshold: kept
        lambda: [_event(stream, 2, deleted=True)],                             # 3/10 > 0.2: rewritten whole
        lambda: [_event(stream, 3, mrr=5)],                                    # 1 of 8 stored deleted: kept
        lambda: [_event(stream, 4, mrr=5)],                                    # 2/9 > 0.2: rewritten whole
        lambda: [_event(stream, 20)],                                          # a new entity: nothing deleted
    ]
    for step in steps:
        _publish(ws, stream, step())
        seen.append(_files(ws, "mor"))
        _check(ws, stream, "mor", "ref")
    assert seen == [(1, 0), (1, 1), (1, 0), (2, 1), (1, 0), (2, 0)], seen
    _check(Workspace.open(ws.config.root), stream, "mor", "ref")  # and read back by a new process


def test_the_default_threshold_and_one_that_turns_the_rule_off(tmp_path: Path):
    """``fold_threshold`` unset is ``FOLD_THRESHOLD`` (0.2); 1 leaves only the delete-file count rule."""
    from lakepub.publish import merge_on_read

    assert merge_on_read.FOLD_THRESHOLD == 0.2
    ws = _workspace(tmp_path / "ws", _dataset("mor", "merge-on-read", "none", fold_threshold=None),
                    _dataset("off", "merge-on-read", "none", fold_threshold=1.0), _dataset("ref", None, "none"))
    stream = Stream(0)
    _publish(ws, stream, [_event(stream, c) for c in range(10)])
    _publish(ws, stream, [_event(stream, 0, mrr=7), _event(stream, 1, mrr=7)])  # 2/12 deleted
    assert _files(ws, "mor") == (2, 1) and _files(ws, "off") == (2, 1)
    _publish(ws, stream, [_event(stream, 2, mrr=7)])  # 3/13 > 0.2
    assert _files(ws, "mor") == (1, 0) and _files(ws, "off") == (3, 2)
    _check(ws, stream, "mor", "off", "ref")


def test_random_streams_in_both_write_modes_equal_the_oracle_at_every_threshold(tmp_path: Path):
    ws = _workspace(tmp_path / "ws", _dataset("ref", None), _dataset("mor", "merge-on-read", fold_threshold=0.3),
                    _dataset("mor_flat", "merge-on-read", "none", fold_threshold=0.1),
                    _dataset("mor_default", "merge-on-read", fold_threshold=None))
    stream = Stream(21, keys=80)
    for size in (60, 6, 9, 4, 12, 5, 30, 3):
        stream.publish(ws, "mor", stream.batch(size))
        _check(ws, stream, "ref", "mor", "mor_flat", "mor_default", datafusion=False)
        for name, threshold in (("mor", 0.3), ("mor_flat", 0.1)):
            assert _deleted_share(ws, name) <= threshold, name
    _check(Workspace.open(ws.config.root), stream, "ref", "mor", "mor_flat", "mor_default")


def _deleted_share(ws: Workspace, name: str) -> float:
    """The largest deleted share of any partition's stored rows, read from the table's files."""
    table = ws.catalog.load_table((ws.config.namespace, name))
    stored: dict = {}
    deleted: dict = {}
    from lakepub.publish.published_state import value_of

    for task in table.scan().plan_files():
        value = value_of(task.file)
        stored[value] = stored.get(value, 0) + task.file.record_count
        for d in task.delete_files:
            deleted.setdefault(value, set()).add(d.file_path)
    shares = []
    for value, paths in deleted.items():
        n = sum(f.record_count for f in _delete_entries(table, paths))
        shares.append(n / stored[value])
    return max(shares, default=0.0)


def _delete_entries(table, paths: set[str]):
    from pyiceberg.manifest import ManifestContent

    for manifest in table.current_snapshot().manifests(table.io):
        if manifest.content == ManifestContent.DELETES:
            for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True):
                if entry.data_file.file_path in paths:
                    yield entry.data_file


def _cli(root: Path, *args: str, fault: str | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, **({"LAKEPUB_FAULT": fault} if fault else {})}
    return subprocess.run([sys.executable, "-m", "lakepub.cli", "-w", str(root), *args], capture_output=True,
                          text=True, timeout=120, env=env)


def _publish_args(folder: Path, stream: Stream, events: list[dict]) -> list[str]:
    """``lakepub publish mor`` of ``events`` as the stream's next batch (written to folder/b.jsonl)."""
    (folder / "b.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    return ["publish", "mor", "--events", str(folder / "b.jsonl"), "--start", json.dumps({"p0": stream.position}),
            "--end", json.dumps({"p0": stream.position + len(events)})]


def _published_after_all(root: Path, args: list[str], stream: Stream, events: list[dict]) -> Workspace:
    """Run ``args`` (the publish of ``events``) to the end, apply them to the oracle, reopen."""
    done = _cli(root, *args)
    assert done.returncode == 0, done.stderr
    stream.apply(events)
    stream.position += len(events)
    return Workspace.open(root)


@pytest.mark.parametrize("point", ["after-data-write", "before-pointer-swap"])
def test_a_crash_in_a_whole_rewrite_leaves_the_table_as_it_was(tmp_path: Path, point: str):
    from lakepub.maintenance.janitor import JanitorOptions, run_janitor

    root = tmp_path / "ws"
    ws = _workspace(root, _dataset("mor", "merge-on-read", "none", fold_threshold=0.2), _dataset("ref", None, "none"))
    stream = Stream(0)
    _publish(ws, stream, [_event(stream, c) for c in range(10)])
    _publish(ws, stream, [_event(stream, 0, mrr=3)])
    pointer = ws.catalog.load_table(("lakepub", "mor")).metadata_location
    before = _files(ws, "mor")
    assert before == (2, 1)
    stored = set((root / ".lakepub").rglob("*.parquet"))
    events = [_event(stream, c, mrr=4) for c in (1, 2, 3)]  # 4/14 deleted: this publish rewrites whole
    args = _publish_args(tmp_path, stream, events)
    crashed = _cli(root, *args, fault=point)
    assert crashed.returncode == -9, crashed.stderr
    ws = Workspace.open(root)
    assert ws.catalog.load_table(("lakepub", "mor")).metadata_location == pointer
    assert _files(ws, "mor") == before
    _check(ws, stream, "mor", "ref", datafusion=False)  # the oracle has not seen ``events``
    run_janitor(ws, options=JanitorOptions(older_than_s=0, retain_last=5))
    assert not (set((root / ".lakepub").rglob("*.parquet")) - stored), "the janitor kept the crashed files"
    ws = _published_after_all(root, args, stream, events)
    assert _files(ws, "mor") == (1, 0)
    _check(ws, stream, "mor", "ref")


@pytest.mark.parametrize("value, kind, message", [
    (1.5, "current", "between 0 and 1"), (-0.1, "current", "between 0 and 1"), ("x", "current", "fold_threshold"),
    (0.2, "aggregate", "only for kind: current"),
])
def test_a_wrong_fold_threshold_is_refused_naming_file_and_key(tmp_path: Path, value, kind, message):
    root = tmp_path / "ws"
    _workspace(root, _dataset("ref", None))
    d = _dataset("bad", "merge-on-read")
    if kind == "aggregate":
        d = {**d, "projection": {"kind": "aggregate", "group_by": ["plan"], "measures": {"n": "count()"}}}
        d.pop("write_mode")
        d.pop("partition")
    d["fold_threshold"] = value
    (root / "catalog" / "datasets" / "bad.yaml").write_text(yaml.safe_dump(d))
    result = _cli(root, "status", "ref")
    assert result.returncode == 2, result.stderr
    assert "bad.yaml" in result.stderr and message in result.stderr and "Traceback" not in result.stderr
