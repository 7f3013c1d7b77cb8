"""Derived datasets (issue 14): reconcile vs DuckDB writing the same Parquet, workers, a no-op run.

One workspace with a current-state base dataset ``facts`` (ROWS live entities over 365 days,
``month(day)``), published once from an Arrow table, and a derived daily rollup ``facts_daily``
(365 ``day(day)`` partitions). Measured, in one process, ratios in one run:

1. a full build of the whole rollup by ``reconcile`` (the table dropped and its folder deleted
   before, as the COPY's output folder is; default windows:
   one window of 365 partitions, a DuckDB query over the published snapshot, one Parquet file per
   day written by DuckDB, one atomic commit; the input's distinct days not remembered, as for a
   first build: ``derive/labels.py``) vs DuckDB running the same SQL over the same
   published files and writing the Parquet itself (``COPY ... TO dir (FORMAT parquet,
   PARTITION_BY (day))``); and an offline rebuild of it (the definition changed: built beside
   the published table, audited by reading it back, swapped in) vs the same COPY; beside them,
   DuckDB reading back the COPY's own files once (``read_parquet``, every row): the least any
   rebuild whose audit recomputes checksums from the written rows pays over the COPY, so
   (COPY + read-back) / COPY is a floor of the rebuild's ratio whatever lakepub's own code costs;
2. the same build in windows of ``--batch`` partitions (12 windows of 31) with ``workers=2`` vs
   ``workers=1``;
3. a routine ``reconcile`` that finds nothing to do, with DATASETS derived datasets defined
   (each a monthly count over ``facts``), in process (Python API) and as a new process.

    PYTHONPATH=. python scripts/bench/derive.py [--quick] [--rows N] [--datasets N] [--batch N] [--repeat N] [--json PATH]

A warm-up build and COPY run first (not reported: imports, DuckDB's extensions); then
``--repeat`` interleaved rounds of the three builds and the COPY, medians reported, wall and CPU
seconds (``time.process_time``: every thread of this process, DuckDB's and the window workers').
Codecs are like for like: the COPY writes DuckDB's default, snappy; lakepub writes files of a few
rows with snappy too (``store/duck_files.file_codec``), larger ones with the table's zstd.

``--quick`` (CI): 10,000 rows and 5 derived datasets (same 365-partition rollup).
"""

from __future__ import annotations

import shutil
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


def drop_with_folder(ws, name: str) -> None:
    """Drop the derived table and delete its folder, so that a build starts from nothing, like the
    ``COPY`` baseline, whose output folder is deleted first: a dropped table's folder keeps its 365
    partition folders (and every earlier round's files), and a build into it then only created
    files, never the folders the baseline creates (before session 10 the build had that edge)."""
    from lakepub.store.layout import summary_id

    ident = summary_id(ws.config.namespace, name)
    try:
        location = ws.catalog.load_table(ident).location()
    except Exception:  # noqa: BLE001 - first round: no table yet
        return
    ws.catalog.drop_table(ident)
    shutil.rmtree(location.removeprefix("file://"), ignore_errors=True)


def main() -> None:
    p = c.parser(__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, help="live entities of facts (default 1,000,000; --quick 10,000)")
    p.add_argument("--datasets", type=int, help="derived datasets of the no-op run (default 100; --quick 5)")
    p.add_argument("--batch", type=int, default=31, help="partitions per window of the workers comparison")
    p.add_argument("--repeat", type=int, help="interleaved rounds, medians reported (default 3; --quick 1)")
    args = p.parse_args()
    args.repeat = args.repeat or (1 if args.quick else 3)
    args.rows = args.rows or (10_000 if args.quick else 1_000_000)
    args.datasets = args.datasets if args.datasets is not None else (5 if args.quick else 100)
    r = c.Report("derive", "derived rollup: reconcile vs DuckDB COPY, workers, a no-op reconcile", args.quick,
                 params={"rows": args.rows, "datasets": args.datasets, "batch_partitions": args.batch, "repeat": args.repeat,
                         "rollup_partitions": 365})
    from lakepub.derive import labels
    from lakepub.derive.reconcile import reconcile
    from lakepub.derive.state import Batching
    from lakepub.init import init_workspace
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
        figures: dict = {}
        runs: dict[str, list[float]] = {}

        def timed(key: str, run):
            """Wall and CPU seconds (this process, every thread: DuckDB's and the window workers')."""
            t, cpu = time.perf_counter(), time.process_time()
            out = run()
            runs.setdefault(f"{key}_s", []).append(time.perf_counter() - t)
            runs.setdefault(f"{key}_cpu_s", []).append(time.process_time() - cpu)
            return out

        def build(key: str, batching: Batching, workers: int) -> None:
            """A first build: no output table, and the input's labels not remembered (a cold plan:
            derive/labels.py scans the input once per snapshot, then remembers its labels)."""
            labels.clear_memo()
            shutil.rmtree(root / ".lakepub" / "labels", ignore_errors=True)
            with Workspace.open(root) as ws:
                drop_with_folder(ws, "facts_daily")
                done = timed(key, lambda: reconcile(ws, ["facts_daily"], batching=batching, workers=workers))
                assert sum(len(r.partitions) for r in done) == 365
                figures[f"commit_attempts_{key}"] = sum(r.attempts for r in done)
                figures[f"windows_{key}"] = len(done)

        def rebuild(k: int) -> None:
            """An offline rebuild: the definition changes (a new data version), reconcile builds it
            beside the published table, audits it (read back, checksums) and swaps it in."""
            query = QUERY.replace("count(*) AS n", f"count(*) + {k} AS n")
            (datasets / "facts_daily.yaml").write_text(yaml.safe_dump(
                {**DAILY, "projection": {**DAILY["projection"], "query": query}}))
            try:
                with Workspace.open(root) as ws:
                    done = timed("rebuild", lambda: reconcile(ws, ["facts_daily"]))
                    assert sum(len(r.partitions) for r in done) == 365
            finally:
                (datasets / "facts_daily.yaml").write_text(yaml.safe_dump(DAILY))

        def copy(key: str = "duckdb_copy") -> None:
            with Workspace.open(root) as ws:
                con = ws.connect()
                out = Path(tmp) / "copy"
                shutil.rmtree(out, ignore_errors=True)
                timed(key, lambda: con.execute(f"COPY ({QUERY}) TO '{out}' (FORMAT parquet, PARTITION_BY (day))"))
                # An audit's floor: reading back every row of the files just written, once (what
                # a rebuild's audit must do at least to recompute its checksums; lakepub's audit
                # also decodes the manifests and hashes the rows). No Iceberg, no Python per row.
                timed(key.replace("copy", "readback"), lambda: con.execute(
                    f"SELECT * FROM read_parquet('{out}/**/*.parquet', hive_partitioning = true)").arrow())
                con.close()

        # Warm-up (not reported): DuckDB's extensions, pyiceberg's and lakepub's imports, the
        # schema resolution cache; both sides then run warm in this process.
        build("warmup", Batching(), 1)
        copy("warmup_copy")
        for _ in range(args.repeat):  # interleaved, medians reported: the machine is shared
            build("full", Batching(), 1)
            rebuild(_ + 1)
            build("workers_1", Batching(partitions=args.batch), 1)
            build("workers_2", Batching(partitions=args.batch), 2)
            copy()
        for key, values in runs.items():
            if key.startswith("warmup"):
                continue
            figures[key] = c.median(values)
            figures[key + "_all"] = [round(v, 4) for v in values]
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
    r.section(f"full build of the 365-partition daily rollup over {args.rows:,} rows, medians of {args.repeat}")
    r.figure("full_s", f["full_s"], f"reconcile, default windows ({f['windows_full']} window)", "s",
             f"runs {f['full_s_all']}, CPU {f['full_cpu_s']:.3f} s")
    r.figure("duckdb_copy_s", f["duckdb_copy_s"], "DuckDB COPY ... PARTITION_BY (day), same SQL", "s",
             f"runs {f['duckdb_copy_s_all']}, CPU {f['duckdb_copy_cpu_s']:.3f} s")
    r.ratio("reconcile_vs_copy", f["full_s"], f["duckdb_copy_s"], "reconcile / DuckDB COPY")
    r.figure("rebuild_s", f["rebuild_s"], "offline rebuild (build, audit, swap)", "s",
             f"runs {f['rebuild_s_all']}, CPU {f['rebuild_cpu_s']:.3f} s")
    r.ratio("rebuild_vs_copy", f["rebuild_s"], f["duckdb_copy_s"], "offline rebuild / DuckDB COPY")
    r.figure("duckdb_readback_s", f["duckdb_readback_s"], "DuckDB read-back of the COPY's files (an audit's floor)", "s",
             f"runs {f['duckdb_readback_s_all']}, CPU {f['duckdb_readback_cpu_s']:.3f} s")
    r.ratio("rebuild_floor_vs_copy", f["duckdb_copy_s"] + f["duckdb_readback_s"], f["duckdb_copy_s"],
            "floor of any audited rebuild: (COPY + read-back) / COPY")
    r.target("reconcile_vs_copy", f["full_s"] / f["duckdb_copy_s"], "<=", 1.3)
    r.target("rebuild_vs_copy", f["rebuild_s"] / f["duckdb_copy_s"], "<=", 1.3)
    r.section(f"the same build in windows of {args.batch} partitions, 1 and 2 workers")
    for w in (1, 2):
        r.figure(f"workers_{w}_s", f[f"workers_{w}_s"], f"reconcile --batch-partitions {args.batch}, {w} worker(s)",
                 "s", f"{f[f'windows_workers_{w}']} windows, {f[f'commit_attempts_workers_{w}']} commit attempts, "
                 f"runs {f[f'workers_{w}_s_all']}, CPU {f[f'workers_{w}_cpu_s']:.3f} s")
    for key in ("commit_attempts_workers_1", "commit_attempts_workers_2"):
        r.figures[key] = f[key]
    r.ratio("windows_vs_copy", f["workers_1_s"], f["duckdb_copy_s"], f"windows of {args.batch} / DuckDB COPY")
    r.ratio("workers_2_speedup", f["workers_1_s"], f["workers_2_s"], "1 worker / 2 workers")
    # On 2 cores, 2 workers can at best use both cores all the time: when 1 worker (its DuckDB
    # queries and COPYs in 2 threads) already keeps C cores busy, 2 workers gain at most 2 / C.
    # Meaningful on a quiet machine only (under load, wall time includes waiting for a core).
    r.ratio("workers_1_cores_busy", f["workers_1_cpu_s"], f["workers_1_s"],
            "cores busy with 1 worker (CPU / wall; 2 workers gain at most 2 / this)")
    r.target("workers_2_speedup", f["workers_1_s"] / f["workers_2_s"], ">=", 1.6)
    r.section(f"a reconcile with nothing to do, {args.datasets} derived datasets defined")
    r.figure("noop_in_process_s", f["noop_in_process_s"], "in process (Workspace API)", "s")
    r.figure("noop_process_s", f["noop_process_s"], "as a new `lakepub reconcile` process", "s")
    r.emit(args)


if __name__ == "__main__":
    main()
