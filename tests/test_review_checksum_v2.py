"""Review of the version 2 checksums (issue 12): a publish must not launder corrupted files.

A data file of a ``current`` table changed in place (same path and size, no new snapshot: bit rot,
a tool writing into the warehouse) is not seen by a publish's foreign-head check. A new process
loads the corrupted rows as the published state; before the fix it computed the partition's
version 2 sum from them and recorded the updated sum, so ``verify`` passed on the corrupted row
after the next publish (exit 0 with wrong data). The sum it computes from the loaded rows is the
partition's version 2 checksum, which the newest record holds: a mismatch is now refused (exit 3).
"""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lakepub.errors import ForeignChange
from lakepub.workspace import Workspace
from test_merge_on_read import Stream, _dataset, _workspace


def _corrupt_in_place(path: str, row: int, column: str, value: str) -> None:
    """Rewrite one value of a Parquet file, keeping its path and size (readers trust the size in
    the manifest): the footer goes at the end again, zero padding before it."""
    size = os.path.getsize(path)
    data = pq.read_table(path)
    values = data.column(column).to_pylist()
    values[row] = value
    index = data.schema.get_field_index(column)
    data = data.set_column(index, data.schema.field(index), pa.array(values, data.schema.field(index).type))
    pq.write_table(data, path, compression="zstd", store_schema=False)
    raw = open(path, "rb").read()
    footer = int.from_bytes(raw[-8:-4], "little") + 8
    assert len(raw) <= size
    with open(path, "wb") as f:
        f.write(raw[:-footer] + b"\0" * (size - len(raw)) + raw[-footer:])


@pytest.mark.parametrize("mode", [None, "merge-on-read"])
def test_a_publish_refuses_a_file_corrupted_in_place_instead_of_recording_its_rows(tmp_path: Path, mode):
    root = tmp_path / "ws"
    ws = _workspace(root, _dataset("t", mode, "none"))
    stream = Stream(3)
    for size in (30, 20):
        stream.publish(ws, "t", stream.batch(size))
    batch = stream.batch(5)
    touched = {(e["tenant"], e["customer_id"]) for e in batch}
    live = {(t, c, p) for (t, c, _, p, _) in stream.live.values()}
    table = ws.catalog.load_table((ws.config.namespace, "t"))
    head = table.metadata.current_snapshot_id
    path = None
    for task in table.scan().plan_files():  # a live row of an entity the next batch leaves alone
        file = task.file.file_path.removeprefix("file://")
        rows = pq.read_table(file, columns=["tenant", "customer_id", "plan"]).to_pylist()
        hits = [i for i, r in enumerate(rows) if (r["tenant"], r["customer_id"]) not in touched
                and (r["tenant"], r["customer_id"], r["plan"]) in live]
        if hits and not task.delete_files:
            path, row = file, hits[0]
            break
    assert path is not None
    _corrupt_in_place(path, row, "plan", "corrupted")

    ws = Workspace.open(root)  # a new process: its published state is read from the files
    assert ws.query("SELECT count(*) AS n FROM t WHERE plan = 'corrupted'").column("n").to_pylist() == [1]
    assert not ws.verify("t").ok
    with pytest.raises(ForeignChange, match="recorded checksum"):
        stream.publish(ws, "t", batch)
    assert ws.catalog.load_table((ws.config.namespace, "t")).metadata.current_snapshot_id == head
    assert not Workspace.open(root).verify("t").ok  # still reported, not laundered


def test_an_upstream_partition_emptied_under_version_2_is_no_derived_candidate(ws_path: Path, cli):
    """``derive/state.py`` took an upstream partition for live unless its recorded checksum was
    version 1's empty one; a ``current`` upstream records ``v2:0...0`` for a partition it
    empties, so the derived plan computed output partitions no input row maps to."""
    from test_derive import CUSTOMERS, CUSTOMERS_CONTRACT, _customer, _define, _ok, _plan, _publish_to, _rows

    (ws_path / "catalog" / "contracts" / "customers@v1.0.yaml").write_text(CUSTOMERS_CONTRACT)
    upstream = {**CUSTOMERS, "partition": "identity(country)"}
    derived = {"name": "per_country", "partition": "identity(country)",
               "projection": {"kind": "sql", "inputs": {"customers_current": "identity(country)"},
                              "query": "SELECT country, count(*) AS n FROM customers_current GROUP BY 1"}}
    _define(ws_path, upstream, derived)
    _publish_to(cli, ws_path, "customers_current", "customers", [_customer("c1", "FR"), _customer("c2", "DE")], 0)
    _publish_to(cli, ws_path, "customers_current", "customers", [_customer("c1", "DE", version=2)], 2)  # FR emptied
    pending = {p for w in _plan(cli)["per_country"]["windows"] for p in w["pending"]}
    assert pending == {"DE"}
    _ok(cli("reconcile"))
    assert _rows(cli, "SELECT * FROM per_country") == [{"country": "DE", "n": 2}]
