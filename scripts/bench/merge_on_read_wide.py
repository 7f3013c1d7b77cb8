"""Issue 12 (d), run by ``merge_on_read.py --wide ROWS``: the 200-column current table of
pyiceberg's "upsert gets slow on tables with many columns" report. One 20,000-change publish per
write mode (two each), DuckDB full scans with its delete files, plain and after the fold, and the
same changes through pyiceberg ``upsert`` in slices within a time budget (rows/s ratio)."""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import yaml

import common as c
from merge_on_read import delete_files, paired_scans

WIDE_PAYLOAD = 196  # + tenant, customer_id, version, deleted: 200 columns


def wide_contract() -> str:
    fields = "\n".join(f"  f{i:03d}: {{type: {'long' if i % 2 else 'string'}, nullable: true}}" for i in range(WIDE_PAYLOAD))
    return ("name: wide\nversion: \"1.0\"\nentity:\n  key: [tenant, customer_id]\n  version: version\n"
            "  deleted: deleted\nfields:\n  tenant: string\n  customer_id: long\n  version: long\n"
            f"{fields}\n  deleted: boolean\n")


def wide_events(ids: np.ndarray, version: int, seed: int) -> pa.Table:
    rng = np.random.default_rng(seed)
    n = len(ids)
    cols = {"tenant": pa.array(np.array(["acme", "globex", "initech", "umbrella"])[ids % 4]),
            "customer_id": pa.array(ids.astype(np.int64)), "version": pa.array(np.full(n, version, np.int64))}
    for i in range(WIDE_PAYLOAD):
        values = rng.integers(0, 1_000_000, n)
        cols[f"f{i:03d}"] = pa.array(values, pa.int64()) if i % 2 else pa.array(np.char.add("v", values.astype(str)))
    cols["deleted"] = pa.array(np.zeros(n, dtype=bool))
    return pa.table(cols)


def wide(args) -> None:
    """Issue 12 (d): the 200-column table (pyiceberg's "upsert gets slow on tables with many
    columns"): one 20,000-change publish per write mode, then DuckDB full scans."""
    from lakepub import duck
    from lakepub.init import init_workspace
    from lakepub.maintenance.fold import fold_deletes
    from lakepub.workspace import Workspace

    rows = args.wide
    changes = min(20_000, rows // 2)
    r = c.Report("merge_on_read_wide", "200-column current table: one 20,000-change publish, reads with deletes",
                 args.quick, params={"rows": rows, "changes": changes, "columns": 200,
                                     "partition": "bucket(16, customer_id)", "seed": args.seed})
    sys.path.insert(0, str(c.REPO))
    rng = np.random.default_rng(args.seed)
    changed = np.sort(rng.choice(rows, changes, replace=False))
    scan = "SELECT count(*), " + ", ".join(f"max(f{i:03d})" for i in range(WIDE_PAYLOAD)) + " FROM {src}"
    timings = {}
    with c.scratch(args, "merge_on_read_wide") as work:
        for mode in ("merge-on-read", "copy-on-write"):
            folder = work / mode
            init_workspace(folder)
            (folder / "catalog" / "contracts" / "wide@v1.0.yaml").write_text(wide_contract())
            (folder / "catalog" / "datasets" / "wide_current.yaml").write_text(yaml.safe_dump({
                "name": "wide_current", "source": "wide", "contract": "contracts/wide@v1.0",
                "projection": {"kind": "current"}, "partition": "bucket(16, customer_id)", "write_mode": mode}))
            ws = Workspace.open(folder)
            ws.publish("wide_current", wide_events(np.arange(rows), 1, args.seed), start={}, end={"p0": rows})
            times = []
            for k in range(2):
                batch = wide_events(changed, 2 + k, args.seed + 1 + k)
                t0 = time.perf_counter()
                ws.publish("wide_current", batch, start={"p0": rows + k * changes}, end={"p0": rows + (k + 1) * changes})
                times.append(time.perf_counter() - t0)
                c.log(f"wide {mode}: {changes:,}-change publish {times[-1]:.2f} s")
            timings[mode] = times
        ws = Workspace.open(work / "merge-on-read")
        table = ws.catalog.load_table(("lakepub", "wide_current"))
        con = duck.connect(ws.config.catalog)
        src = duck.scan_sql(table.metadata_location)
        plain = work / "plain.parquet"
        pq.write_table(con.execute(f"SELECT * FROM {src}").to_arrow_table(), plain, row_group_size=122_880)

        r.section(f"one {changes:,}-change publish into {rows:,} rows x 200 columns (in process, 2 publishes each)")
        mor, cow = statistics.mean(timings["merge-on-read"]), statistics.mean(timings["copy-on-write"])
        r.figure("wide_mor_s", mor, "merge-on-read publish", "s", ", ".join(f"{t:.2f}" for t in timings["merge-on-read"]))
        r.figure("wide_cow_s", cow, "copy-on-write publish", "s", ", ".join(f"{t:.2f}" for t in timings["copy-on-write"]))
        r.ratio("wide_cow_vs_mor", cow, mor, "copy-on-write / merge-on-read")
        r.section("DuckDB full scan (max of every payload column) of the merge-on-read table, paired rounds "
                  "(median wall, CPU)")
        plain_src, n_deletes = f"read_parquet('{plain}')", delete_files(table)
        before = paired_scans(con, {"deletes": src, "plain": plain_src}, rounds=3, query=scan)
        fold_deletes(ws, "wide_current", threshold=0.0)
        table = ws.catalog.load_table(("lakepub", "wide_current"))
        after = paired_scans(con, {"folded": duck.scan_sql(table.metadata_location), "plain": plain_src}, rounds=3,
                             query=scan)
        for key, label, (wall, cpu) in (("wide_plain", "plain Parquet (snappy)", before["plain"]),
                                        ("wide_deletes", f"iceberg_scan, {n_deletes} delete files", before["deletes"]),
                                        ("wide_folded", "iceberg_scan after the fold", after["folded"]),
                                        ("wide_plain_again", "plain Parquet, paired with the fold's scan", after["plain"])):
            r.figure(f"{key}_ms", wall * 1000, label, "ms", f"CPU {cpu * 1000:.0f} ms")
        for unit, j in (("CPU", 1), ("wall", 0)):
            r.target(f"200 columns: iceberg_scan with deletes / plain ({unit})",
                     before["deletes"][j] / before["plain"][j], "<=", 1.3)
            r.target(f"200 columns: after the fold / plain ({unit})", after["folded"][j] / after["plain"][j], "<=", 1.05)
        if not args.skip_upsert:
            wide_vs_upsert(r, work / "upsert", rows, changed, args, timings["merge-on-read"])
    r.emit(args)


def wide_vs_upsert(r, folder: Path, rows: int, changed: np.ndarray, args, mor: list[float]) -> None:
    """The 200-column changes through pyiceberg ``upsert`` into a table of the same rows (loaded by
    one ``append``), in ``--upsert-chunk`` slices (default here 1,000: the composite key's filter
    crashes on larger ones) within ``--upsert-budget`` (default here 300 s); rows/s against the
    merge-on-read publishes of the same changes (a lower bound if the budget stops it)."""
    from pyiceberg.catalog.sql import SqlCatalog

    chunk, budget = args.upsert_chunk or 1_000, args.upsert_budget or 300
    folder.mkdir(parents=True)
    catalog = SqlCatalog("bench", uri=f"sqlite:///{folder / 'catalog.db'}", warehouse=f"file://{folder}")
    catalog.create_namespace("bench")
    base = wide_events(np.arange(rows), 1, args.seed)
    table = catalog.create_table("bench.wide", schema=base.schema)
    table.append(base)
    batch = wide_events(changed, 2, args.seed + 1)
    done, spent, started = 0, 0.0, time.perf_counter()
    for start in range(0, batch.num_rows, chunk):
        if time.perf_counter() - started > budget:
            break
        t0 = time.perf_counter()
        part = batch.slice(start, chunk)
        table.upsert(part, join_cols=["tenant", "customer_id"])
        table = catalog.load_table("bench.wide")
        spent += time.perf_counter() - t0
        done += part.num_rows
        c.log(f"wide pyiceberg upsert: {done:,}/{batch.num_rows:,} rows {spent:.1f} s")
    up_rate, mor_rate = done / spent, batch.num_rows / statistics.mean(mor)
    r.section(f"the {batch.num_rows:,} changes vs pyiceberg upsert in slices of {chunk:,} rows (budget {budget:g} s)")
    r.figure("wide_upsert_rows_per_s", up_rate, f"pyiceberg upsert, {done:,} of {batch.num_rows:,} rows in {spent:.1f} s",
             "rows/s", "")
    r.figure("wide_mor_rows_per_s", mor_rate, "lakepub merge-on-read publish (mean of the two)", "rows/s", "")
    bound = " (a lower bound: the budget stopped upsert)" if done < batch.num_rows else ""
    r.target(f"200 columns: lakepub MoR / pyiceberg upsert, rows/s{bound}", r.ratio(
        "wide_upsert_vs_mor_rate", mor_rate, up_rate, "lakepub MoR rows/s / pyiceberg upsert rows/s"), ">=", 50)
