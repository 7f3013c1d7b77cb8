"""Issue 14: the rebuild's property commit, pyiceberg's commit (before) vs lakepub's (after), interleaved.

Before the fix ``rebuild.carry_properties`` committed with ``Table.transaction()`` (pyiceberg's
SQL-catalog commit: reload, validate, write metadata, compare-and-set); after it, with
``store/commit.commit_atomically`` from the audited table (write metadata, compare-and-set, version
hint). One SQLite catalog, one table with SNAPSHOTS appended snapshots (its metadata grows with
them), then ROUNDS alternating property commits of each kind; medians of wall and CPU seconds
(``time.process_time``). Run: ``PYTHONPATH=. python scripts/bench/carry_commit_ab.py [--snapshots 200] [--rounds 15]``.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import pyarrow as pa
from pyiceberg.catalog.sql import SqlCatalog

from lakepub.store.commit import TableChange, commit_atomically
from lakepub.store.write import transaction


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--snapshots", type=int, default=200)
    p.add_argument("--rounds", type=int, default=15)
    a = p.parse_args()
    root = tempfile.mkdtemp(prefix="carry_ab_")
    cat = SqlCatalog("b", uri=f"sqlite:///{root}/cat.db", warehouse=f"file://{root}/wh")
    cat.create_namespace("n")
    rows = pa.table({"k": pa.array([1], pa.int64())})
    table = cat.create_table("n.t", rows.schema)
    for _ in range(a.snapshots):
        table.append(rows)
    times = {"pyiceberg": [], "lakepub": []}
    for i in range(a.rounds):
        for kind in ("pyiceberg", "lakepub") if i % 2 == 0 else ("lakepub", "pyiceberg"):
            table = cat.load_table("n.t")  # the audited table, loaded before the timing (as in finish)
            w, c = time.perf_counter(), time.process_time()
            if kind == "pyiceberg":
                with table.transaction() as tx:
                    tx.set_properties({"comment": f"{kind} {i}"})
            else:
                tx = transaction(table)
                tx.set_properties({"comment": f"{kind} {i}"})
                commit_atomically(cat, [TableChange(table, tx)])
            times[kind].append((time.perf_counter() - w, time.process_time() - c))
    for kind, got in times.items():
        print(f"{kind:9s} wall {statistics.median(t[0] for t in got) * 1000:.1f} ms  "
              f"CPU {statistics.median(t[1] for t in got) * 1000:.1f} ms  (median of {len(got)})")


if __name__ == "__main__":
    main()
