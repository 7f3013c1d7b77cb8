"""Derived datasets (issue 14): reconcile vs DuckDB writing the same Parquet, workers, a no-op run.

One workspace with a current-state base dataset ``facts`` (ROWS live entities over 365 days,
``month(day)``), published once from an Arrow table, and a derived daily rollup ``facts_daily``
(365 ``day(day)`` partitions). Measured, in one process, ratios in one run:

1. ``reconcile`` of the whole rollup (``--batch-partitions 31``: 12 windows, each a DuckDB query
   over the published snapshot, one Parquet file per day, one atomic commit) vs DuckDB running
   the same SQL over the same published files and writing the Parquet itself
   (``COPY ... TO dir (FORMAT parquet, PARTITION_BY (day))``);
2. the same reconcile with ``workers=2`` vs ``workers=1`` (the rollup table dropped in between);
3. a routine ``reconcile`` that finds nothing to do, with DATASETS derived datasets defined
   (each a monthly count over ``facts``), in process (Python API) and as a new process.

    PYTHONPATH=. python scripts/bench/derive.py [--quick] [--rows N] [--datasets N] [--batch N] [--json PATH]

``--quick`` (CI): 10,000 rows and 5 derived datasets (same 365-partition rollup).
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import yaml

import common as c

CONTRACT = """
name: facts
version: "1.0"
entity: {key: [id], version: version, deleted: deleted}
fields: {id: long, version: long, day: date, amount: long, deleted: boolean}
"""
FACTS = {"name": "facts", "source": "facts", "contract": "contracts/facts@v1.0",
         "projection": {"kind": "current", "columns": ["id", "day", "amount"]}, "partition": "month(day)"}
QUERY = "SELECT day, sum(amount) AS amount, count(*) AS n FROM facts GROUP BY day"
DAILY = {"name": "facts_daily", "projection": {"kind": "sql", "inputs": {"facts": "day(day)"}, "query": QUERY},
         "partition": "day(day)"}


def main() -> None:
    p = c.parser(__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, help="live entities of facts (default 1,000,000; --quick 10,000)")
    p.add_argument("--datasets", type=int, help="derived datasets of the no-op run (default 100; --quick 5)")
    p.add_argument("--batch", type=int, default=31, help="partitions per window")
    args = p.parse_args()
    args.rows = args.rows or (10_000 if args.quick else 1_000_000)
    args.datasets = args.datasets if args.datasets is not None else (5 if args.quick else 100)
    r = c.Report("derive", "derived rollup: reconcile vs DuckDB COPY, workers, a no-op reconcile", args.quick,
                 params={"rows": args.rows, "datasets": args.datasets, "batch_partitions": args.batch,
                         "rollup_partitions": 365})
    from lakepub.derive.reconcile import reconcile
    from lakepub.derive.state import Batching
    from lakepub.init import init_workspace
    from lakepub.store.layout import summary_id
    from lakepub.workspace import Workspace

    with c.scratch(args, "derive") as tmp:
        root = Path(tmp) / "ws"
        init_workspace(root)
        (root / "catalog" / "contracts" / "facts@v1.0.yaml").write_text(CONTRACT)
        datasets = root / "catalog" / "datasets"
        (datasets / "facts.yaml").write_text(yaml.safe_dump(FACTS))
        (datasets / "facts_daily.yaml").write_text(yaml.safe_dump(DAILY))
        n = args.rows
        ids = pa.array(range(n), pa.int64())
        days = pa.array([19723 + i % 365 for i in range(n)], pa.int32()).cast(pa.date32())
        events = pa.table({"id": ids, "version": pa.array([1] * n, pa.int64()), "day": days,
                           "amount": pa.array([i % 1000 for i in range(n)], pa.int64()),
                           "deleted": pa.array([False] * n)})
        t = time.perf_counter()
        with Workspace.open(root) as ws:
            ws.publish("facts", events, start={"p0": 0}, end={"p0": n})
        c.log(f"published {n} rows into facts: {time.perf_counter() - t:.1f} s")
        figures = {}
        for workers in (1, 2):
            with Workspace.open(root) as ws:
                try:
                    ws.catalog.drop_table(summary_id(ws.config.namespace, "facts_daily"))
                except Exception:  # noqa: BLE001 - first round: no table yet
                    pass
                t = time.perf_counter()
                done = reconcile(ws, ["facts_daily"], batching=Batching(partitions=args.batch), workers=workers)
                figures[f"reconcile_workers_{workers}_s"] = time.perf_counter() - t
                assert sum(len(r.partitions) for r in done) == 365
                figures[f"commit_attempts_workers_{workers}"] = sum(r.attempts for r in done)
                figures[f"window_seconds_workers_{workers}"] = sum(r.seconds for r in done)
        with Workspace.open(root) as ws:
            con = ws.connect()
            out = Path(tmp) / "copy"
            t = time.perf_counter()
            con.execute(f"COPY ({QUERY}) TO '{out}' (FORMAT parquet, PARTITION_BY (day))")
            figures["duckdb_copy_s"] = time.perf_counter() - t
            con.close()
        for i in range(args.datasets):
            (datasets / f"d{i:03d}.yaml").write_text(yaml.safe_dump({
                "name": f"d{i:03d}", "partition": "month(month)",
                "projection": {"kind": "sql", "inputs": {"facts": "month(day)"},
                               "query": f"SELECT CAST(date_trunc('month', day) AS DATE) AS month, count(*) + {i} AS n "
                                        "FROM facts GROUP BY 1"}}))
        with Workspace.open(root) as ws:
            reconcile(ws)
        with Workspace.open(root) as ws:
            t = time.perf_counter()
            assert reconcile(ws) == []
            figures["noop_in_process_s"] = time.perf_counter() - t
        t = time.perf_counter()
        subprocess.run([sys.executable, "-m", "lakepub.cli", "-w", str(root), "reconcile"], check=True,
                       capture_output=True)
        figures["noop_process_s"] = time.perf_counter() - t
    f = figures
    r.section(f"reconcile of the 365-partition daily rollup over {args.rows:,} rows (windows of {args.batch})")
    r.figure("reconcile_workers_1_s", f["reconcile_workers_1_s"], "reconcile, 1 worker", "s",
             f"{f['commit_attempts_workers_1']} commit attempts, windows {f['window_seconds_workers_1']:.2f} s")
    r.figure("reconcile_workers_2_s", f["reconcile_workers_2_s"], "reconcile, 2 workers", "s",
             f"{f['commit_attempts_workers_2']} commit attempts, windows {f['window_seconds_workers_2']:.2f} s")
    for key in ("commit_attempts_workers_1", "window_seconds_workers_1", "commit_attempts_workers_2",
                "window_seconds_workers_2"):
        r.figures[key] = f[key]
    r.figure("duckdb_copy_s", f["duckdb_copy_s"], "DuckDB COPY ... PARTITION_BY (day), same SQL", "s")
    r.ratio("reconcile_vs_copy", f["reconcile_workers_1_s"], f["duckdb_copy_s"], "reconcile / DuckDB COPY")
    r.ratio("workers_2_speedup", f["reconcile_workers_1_s"], f["reconcile_workers_2_s"], "1 worker / 2 workers")
    r.section(f"a reconcile with nothing to do, {args.datasets} derived datasets defined")
    r.figure("noop_in_process_s", f["noop_in_process_s"], "in process (Workspace API)", "s")
    r.figure("noop_process_s", f["noop_process_s"], "as a new `lakepub reconcile` process", "s")
    r.emit(args)


if __name__ == "__main__":
    main()
