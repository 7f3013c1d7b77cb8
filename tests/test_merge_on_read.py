"""Merge-on-read current-state datasets (issue 12): publishes, readers, crash safety, compaction.

A customers entity (composite key: tenant, customer_id) with a copy-on-write and a merge-on-read
``current`` dataset of the same stream, published together; random batches of creates, updates,
moves between partitions, deletes and re-creates. After every publish both tables must equal the
oracle (latest live version per key) read through DuckDB (``Workspace.query``), pyiceberg
(``scan().to_arrow()``) and iceberg-rust via DataFusion; ``verify --deep`` must pass.
"""

from __future__ import annotations

import random
import subprocess
import sys
import threading
from pathlib import Path

import pyarrow as pa
import pytest
import yaml

from lakepub.init import init_workspace
from lakepub.workspace import Workspace

CONTRACT = """
name: customers
version: "1.0"
entity:
  key: [tenant, customer_id]
  version: version
  deleted: deleted
fields:
  tenant: string
  customer_id: long
  version: long
  country: {type: string, nullable: true}
  plan: string
  mrr_cents: long
  deleted: boolean
"""
COLUMNS = ["tenant", "customer_id", "country", "plan", "mrr_cents"]


def _dataset(name: str, mode: str | None, partition: str = "bucket(4, customer_id)") -> dict:
    d = {"name": name, "source": "customers", "contract": "contracts/customers@v1.0", "entity": "customers",
         "projection": {"kind": "current", "columns": COLUMNS}, "partition": partition}
    if mode:
        d["write_mode"] = mode
    return d


def _workspace(root: Path, *datasets: dict) -> Workspace:
    init_workspace(root)
    (root / "catalog" / "contracts" / "customers@v1.0.yaml").write_text(CONTRACT)
    for d in datasets:
        (root / "catalog" / "datasets" / f"{d['name']}.yaml").write_text(yaml.safe_dump(d, sort_keys=False))
    return Workspace.open(root)


class Stream:
    """Random full-state events over a small key space, and the oracle of the live rows."""

    def __init__(self, seed: int, keys: int = 40):
        self.rng = random.Random(seed)
        self.keys = [(t, c) for t in ("a", "b") for c in range(keys // 2)]
        self.version: dict[tuple, int] = {}
        self.live: dict[tuple, tuple] = {}
        self.position = 0

    def batch(self, n: int) -> list[dict]:
        out = []
        for _ in range(n):
            k = self.rng.choice(self.keys)
            v = self.version.get(k, 0) + 1
            self.version[k] = v
            if k in self.live and self.rng.random() < 0.2:
                out.append({"tenant": k[0], "customer_id": k[1], "version": v, "country": None, "plan": None,
                            "mrr_cents": None, "deleted": True})
                del self.live[k]
                continue
            row = (self.rng.choice(["FR", "DE", None]), self.rng.choice(["pro", "basic"]), self.rng.randrange(10_000))
            out.append({"tenant": k[0], "customer_id": k[1], "version": v, "country": row[0], "plan": row[1],
                        "mrr_cents": row[2], "deleted": False})
            self.live[k] = (*k, *row)
        return out

    def publish(self, ws: Workspace, dataset: str, events: list[dict]):
        start = self.position
        self.position += len(events)
        return ws.publish(dataset, events, start={"p0": start} if start else {}, end={"p0": self.position})

    def expected(self) -> list[tuple]:
        return sorted(self.live.values(), key=repr)


def _rows(table: pa.Table) -> list[tuple]:
    return sorted((tuple(r[c] for c in COLUMNS) for r in table.to_pylist()), key=repr)


def _datafusion_rows(ws: Workspace, name: str) -> list[tuple]:
    """The table read by iceberg-rust (pyiceberg-core) through DataFusion."""
    from datafusion import SessionContext

    table = ws.catalog.load_table((ws.config.namespace, name))
    ctx = SessionContext()
    ctx.register_table("t", table)
    return _rows(ctx.sql("SELECT * FROM t").to_arrow_table())


def _check(ws: Workspace, stream: Stream, *names: str, datafusion: bool = True) -> None:
    want = stream.expected()
    for name in names:
        assert _rows(ws.query(f'SELECT * FROM "{name}"')) == want, name
        table = ws.catalog.load_table((ws.config.namespace, name))
        assert _rows(table.scan().to_arrow()) == want, name
        if datafusion:
            assert _datafusion_rows(ws, name) == want, name
        report = ws.verify(name, deep=True)
        assert report.ok, (name, report.mismatches)


def _delete_files(ws: Workspace, name: str) -> int:
    table = ws.catalog.load_table((ws.config.namespace, name))
    return sum(len(t.delete_files) for t in table.scan().plan_files())


def test_both_write_modes_equal_the_oracle_through_every_reader(tmp_path: Path):
    ws = _workspace(tmp_path / "ws", _dataset("cow", None), _dataset("mor", "merge-on-read"),
                    _dataset("mor_flat", "merge-on-read", "none"))
    stream = Stream(1)
    for size in (30, 12, 25, 7, 40):
        stream.publish(ws, "mor", stream.batch(size))
        _check(ws, stream, "cow", "mor", "mor_flat")
    assert _delete_files(ws, "cow") == 0
    assert _delete_files(ws, "mor") > 0 and _delete_files(ws, "mor_flat") > 0
    # A new process (no kept state): the locations are read back from the files and their deletes.
    ws = Workspace.open(ws.config.root)
    stream.publish(ws, "mor", stream.batch(20))
    _check(ws, stream, "cow", "mor", "mor_flat")
