"""Benchmark: what a merge-on-read table costs to read between folds, per ``fold_threshold`` (issue 12 (c)).

The customers stream of ``merge_on_read.py`` (composite key, 10 fields, ``bucket(16,
customer_id)``, updates anywhere in the key space, ~2% deletes) published into one merge-on-read
table per ``--thresholds`` value (1 turns the deleted-fraction rule off: only the 8-delete-file
rule, the code before it), the publishes of each batch interleaved across the tables (the order
rotated per batch), wall and CPU time each. After each batch, DuckDB full scans (every column
aggregated) of every table with its live delete files and of the same live rows as one plain
Parquet file (snappy, and zstd: the tables' codec), alternating in paired rounds; the scans'
results must be equal. The worst point between folds is the batch with the highest ratio.

At the end each table is folded (``lakepub compact``, threshold 0) and scanned again, alongside
what separates it from the plain file: its own files read by ``read_parquet`` (no Iceberg
metadata) and the plain rows in one zstd file with the tables' row-group size.

    python scripts/bench/mor_fold.py [--events N] [--max-batch N] [--thresholds 1,0.2,0.1] [--json PATH]
"""

from __future__ import annotations

import statistics
import sys
import time

import pyarrow.parquet as pq

import common as c
import merge_on_read as mor


def table_files(ws) -> tuple[int, int, int, list[str]]:
    """(data files, delete files, stored rows, data file paths) of the table's current snapshot."""
    table = ws.catalog.load_table(("lakepub", "customers_current"))
    tasks = list(table.scan().plan_files())
    return (len(tasks), mor.delete_files(table), sum(t.file.record_count for t in tasks),
            [t.file.file_path for t in tasks])


def main() -> None:
    p = c.parser(__doc__.splitlines()[0])
    p.add_argument("--events", type=int, help="events (default 1,000,000; --quick 20,000)")
    p.add_argument("--max-batch", type=int, help="batch size (default 100,000; --quick 2,000)")
    p.add_argument("--customers", type=int, help="distinct customers (default: events / 2)")
    p.add_argument("--thresholds", default="1,0.2,0.1", help="fold_threshold of each table (default 1,0.2,0.1)")
    p.add_argument("--rounds", type=int, default=3, help="paired scan rounds after each batch (default 3)")
    args = p.parse_args()
    events = args.events or (20_000 if args.quick else 1_000_000)
    max_batch = args.max_batch or (2_000 if args.quick else 100_000)
    customers = args.customers or max(1, events // 2)
    thresholds = [float(x) for x in args.thresholds.split(",")]
    names = [f"t{t:g}" for t in thresholds]
    r = c.Report("mor_fold", "merge-on-read reads between folds, per fold_threshold", args.quick,
                 params={"events": events, "max_batch": max_batch, "customers": customers, "thresholds": thresholds,
                         "partition": "bucket(16, customer_id)", "fields": 10, "seed": args.seed})
    sys.path.insert(0, str(c.REPO))
    from lakepub import duck
    from lakepub.maintenance.fold import fold_deletes

    batches = mor.make_batches(events, customers, max_batch, args.seed)
    with c.scratch(args, "mor_fold") as work:
        mor.run_lakepub(work / "warm", "merge-on-read", mor.make_batches(2_000, 1_000, 1_000, args.seed + 1))
        spaces = {n: mor.lakepub_workspace(work / n, "merge-on-read", t) for n, t in zip(names, thresholds)}
        times = {n: [] for n in names}
        reads = []
        con = duck.connect(spaces[names[0]].config.catalog)
        position = 0
        for i, batch in enumerate(batches):
            order = names[i % len(names):] + names[:i % len(names)]
            for n in order:
                t0, c0 = time.perf_counter(), time.process_time()
                spaces[n].publish("customers_current", batch, start={"p0": position} if position else {},
                                  end={"p0": position + batch.num_rows})
                times[n].append((time.perf_counter() - t0, time.process_time() - c0))
            position += batch.num_rows
            files = {n: table_files(spaces[n]) for n in names}
            srcs = {n: duck.scan_sql(spaces[n].catalog.load_table(("lakepub", "customers_current")).metadata_location)
                    for n in names}
            results = {con.execute(mor.SCAN.format(src=s)).fetchall()[0] for s in srcs.values()}
            assert len(results) == 1, f"the tables differ after batch {i + 1}: {results}"
            scans = mor.paired_scans(con, {**srcs, **mor.plain_copies(con, srcs[names[0]], work, str(i))},
                                     rounds=args.rounds)
            live = con.execute(f"SELECT count(*) FROM {srcs[names[0]]}").fetchone()[0]
            reads.append({"batch": i + 1, "live": live, **{f"{n}_{k}": v for n in names
                                                           for k, v in zip(("data", "deletes", "stored"), files[n][:3])},
                          **{f"{k}_ms": v[0] * 1000 for k, v in scans.items()},
                          **{f"{k}_cpu_ms": v[1] * 1000 for k, v in scans.items()}})
            x = reads[-1]
            c.log(f"batch {i + 1}: live {live:,}; " + "; ".join(
                f"{n}: {x[n + '_data']} data, {x[n + '_deletes']} deletes, stored {x[n + '_stored']:,}, "
                f"{x[n + '_cpu_ms'] / x['plain_snappy_cpu_ms']:.2f}x snappy CPU" for n in names))

        r.section(f"{len(batches)} publishes of {max_batch:,} events, interleaved (wall / CPU seconds)")
        for n, t in zip(names, thresholds):
            walls, cpus = [w for w, _ in times[n]], [u for _, u in times[n]]
            r.figure(f"{n}_publish_cpu_s", sum(cpus), f"fold_threshold {t:g}: CPU, all publishes", "s",
                     f"wall {sum(walls):.2f} s; per publish CPU {', '.join(f'{u:.2f}' for u in cpus)}")
        r.section("DuckDB full scan after each publish / the same live rows as one plain Parquet file "
                  "(median of paired rounds; CPU)")
        for x in reads:
            r.figure(f"batch_{x['batch']}", x["live"], f"after publish {x['batch']}: live rows", "", "; ".join(
                f"{n}: {x[n + '_data']}/{x[n + '_deletes']} files, stored {x[n + '_stored'] / x['live']:.2f}x live, "
                f"{x[n + '_cpu_ms'] / x['plain_snappy_cpu_ms']:.2f}x snappy / "
                f"{x[n + '_cpu_ms'] / x['plain_zstd_cpu_ms']:.2f}x zstd" for n in names))
        for n, t in zip(names, thresholds):
            for unit, k in (("CPU", "_cpu_ms"), ("wall", "_ms")):
                ratios = [x[n + k] / x["plain_snappy" + k] for x in reads]
                worst = max(range(len(reads)), key=ratios.__getitem__)
                r.figure(f"{n}_scan_mean_{unit.lower()}", statistics.mean(ratios),
                         f"fold_threshold {t:g}: scan / plain snappy, mean ({unit})", "x",
                         f"worst {ratios[worst]:.2f}x after publish {worst + 1}; vs zstd worst "
                         f"{max(x[n + k] / x['plain_zstd' + k] for x in reads):.2f}x")
                r.target(f"fold_threshold {t:g}: scan with live deletes / plain snappy, worst publish ({unit})",
                         ratios[worst], "<=", 1.3)

        r.section("after lakepub compact (fold, threshold 0): scans vs one plain file (median of paired rounds)")
        srcs = {}
        for n in names:
            fold_deletes(spaces[n], "customers_current", threshold=0.0)
            srcs[n] = duck.scan_sql(spaces[n].catalog.load_table(("lakepub", "customers_current")).metadata_location)
        data, _, _, paths = table_files(spaces[names[0]])
        plain = mor.plain_copies(con, srcs[names[0]], work, "end")
        big = work / "plain-end-zstd-1m.parquet"
        pq.write_table(pq.read_table(plain["plain_zstd"].split("'")[1]), big, row_group_size=1_048_576,
                       compression="zstd")
        files_src = "read_parquet([" + ", ".join(f"'{q.removeprefix('file://')}'" for q in paths) + "])"
        scans = mor.paired_scans(con, {n: srcs[n] for n in names[:1]} | {"its_files": files_src, **plain,
                                 "plain_zstd_1m_groups": f"read_parquet('{big}')"}, rounds=5)
        labels = {names[0]: f"iceberg_scan, {data} files after the fold", "its_files": "read_parquet of those files",
                  "plain_snappy": "one file, snappy", "plain_zstd": "one file, zstd",
                  "plain_zstd_1m_groups": "one file, zstd, 1M-row groups"}
        for k, (wall, cpu) in scans.items():
            r.figure(f"folded_{k}_cpu_ms", cpu * 1000, labels[k], "ms CPU",
                     f"wall {wall * 1000:.1f} ms; {cpu / scans['plain_snappy'][1]:.2f}x snappy, "
                     f"{cpu / scans['plain_zstd'][1]:.2f}x zstd (CPU)")
        for unit, j in (("CPU", 1), ("wall", 0)):
            r.target(f"after the fold / plain snappy ({unit})", scans[names[0]][j] / scans["plain_snappy"][j], "<=", 1.05)
        r.figures["reads"] = reads
    r.emit(args)


if __name__ == "__main__":
    main()
