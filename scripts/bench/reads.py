"""Benchmark 4: reads: a DuckDB query over the published Iceberg table vs its data files as Parquet.

A 3-year stream is published with ``lakepub run`` in small batches (``--max-batch``, default
20,000: 50 publishes, so the month partitions are rewritten many times). Then the same aggregate
runs ``--reps`` times (median, after one warm-up; the ways interleaved, so a load on the shared
machine hits them alike, and the ratio is the median of the per-round ratios) on one DuckDB
connection:

* lakepub: through ``Workspace.connect()``'s view (``lakepub.views``: the published snapshot
  resolved once to its data files, read by ``read_parquet`` with the schema by field id);
* plain Parquet: ``read_parquet([...], hive_partitioning=false)`` over exactly the data files of
  the current snapshot (the baseline);
* raw Iceberg: ``iceberg_scan(<published metadata>)`` (metadata JSON, manifest list and
  manifests are read on every query; what the view was before).

``Workspace.connect()`` is timed cold (the snapshot planned: a new process without the on-disk
cache) and warm, and ``Workspace.query`` (sandboxed, a new connection per call) repeated.

The publish time of the early and of the last batches of the run is reported too (what a
publish pays as snapshots and manifests accumulate).

Both for the published table (``orders_daily``: one row per day) and for the ledger (one row per
accepted order version). File counts are reported: data files of the current snapshot, manifests,
snapshots and all files under each table's folder. If ``lakepub.maintenance.compact`` exists the
ledger is compacted afterwards and its files and query time are reported again.

    python scripts/bench/reads.py [--quick] [--json PATH]
"""

from __future__ import annotations

import time
from pathlib import Path

import common as c

Q_PUBLISHED = "SELECT year(day) AS y, sum(cents) AS cents, sum(orders) AS orders FROM {src} GROUP BY y ORDER BY y"
Q_LEDGER = "SELECT count(*) AS n, count(DISTINCT order_id) AS orders, sum(cents) AS cents FROM {src}"


def data_files(table) -> list[str]:
    return [task.file.file_path for task in table.scan().plan_files()]


def bench_query(con, sql: str, reps: int) -> tuple[float, list]:
    (median, rows), = bench_queries(con, [sql], reps)
    return median, rows


def bench_queries(con, sqls: list[str], reps: int, rounds: list[list[float]] | None = None) -> list[tuple[float, list]]:
    """Median time and rows of each statement, after one warm-up each: ``reps`` rounds, each
    running every statement once, starting from another one each round (so neither always runs
    first). ``rounds`` receives each round's times, for paired ratios."""
    rows = [con.execute(sql).fetchall() for sql in sqls]  # warm-up
    times: list[list[float]] = [[] for _ in sqls]
    for rep in range(reps):
        for k in range(len(sqls)):
            i = (rep + k) % len(sqls)
            t0 = time.perf_counter()
            rows[i] = con.execute(sqls[i]).fetchall()
            times[i].append(time.perf_counter() - t0)
        if rounds is not None:
            rounds.append([t[-1] for t in times])
    return [(c.median(t), r) for t, r in zip(times, rows)]


def paired_ratio(rounds: list[list[float]], ours: int, base: int) -> float:
    """The median over rounds of ours / base measured in the same round: robust to a load that
    comes and goes on a shared machine (medians of each series are compared too)."""
    return c.median([r[ours] / r[base] for r in rounds])


def parquet_src(files: list[str]) -> str:
    """The baseline: the files as plain Parquet. ``hive_partitioning=false`` as in the view: by
    default DuckDB would parse the ``day_month=2025-01`` folder names into an extra column."""
    paths = ", ".join("'" + f.replace("'", "''") + "'" for f in files)
    return f"read_parquet([{paths}], hive_partitioning=false)"


def main() -> None:
    p = c.parser(__doc__.splitlines()[0])
    p.add_argument("--events", type=int, help="stream size (default 1,000,000; --quick 30,000)")
    p.add_argument("--max-batch", type=int, help="batch size (default 20,000; --quick 5,000)")
    p.add_argument("--reps", type=int, help="timed repetitions per query (default 30; --quick 5)")
    p.add_argument("--no-compact", action="store_true", help="skip the ledger compaction step")
    args = p.parse_args()
    events = args.events or (30_000 if args.quick else 1_000_000)
    max_batch = args.max_batch or (5_000 if args.quick else 20_000)
    reps = args.reps or (5 if args.quick else 30)

    from lakepub.store.layout import ledger_id, summary_id

    r = c.Report("reads", "DuckDB over the published Iceberg table vs the same files as plain Parquet", args.quick,
                 params={"events": events, "max_batch": max_batch, "reps": reps})
    with c.scratch(args, "reads") as work:
        stream_dir, _ = c.stream(args, work, events)
        ws = c.workspace(work / "ws", stream_dir)
        c.log(f"lakepub run --max-batch {max_batch} ...")
        t0 = time.perf_counter()
        publish_s: list[float] = []
        last = [t0]

        parts: list[int] = []

        def on_batch(result, _pending) -> None:
            now = time.perf_counter()
            publish_s.append(now - last[0])
            parts.append(len(result.partitions))
            last[0] = now

        run = ws.run(c.DATASET, max_batch=max_batch, on_batch=on_batch)
        r.params["publishes"] = len(run.batches)
        c.log(f"  {len(run.batches)} publishes in {time.perf_counter() - t0:.1f} s")
        ns = ws.config.namespace
        summary = ws.catalog.load_table(summary_id(ns, c.DATASET))
        ledger = ws.catalog.load_table(ledger_id(ns, c.DATASET))

        from lakepub import views

        views.clear_memo()
        cache = ws.config.root / ".lakepub" / "views"
        for leftover in cache.glob("*.json") if cache.is_dir() else ():
            leftover.unlink()  # as a new process that finds no resolution
        t0 = time.perf_counter()
        con = ws.connect()
        connect_cold_s = time.perf_counter() - t0
        connect_warm_s = c.median([_timed(lambda: ws.connect().close()) for _ in range(max(3, reps // 3))])
        query_s = c.median([_timed(lambda: ws.query(Q_PUBLISHED.format(src=c.DATASET))) for _ in range(max(3, reps // 3))])
        n = max(3, reps // 3)
        resolve_plan_s = c.median([_timed(lambda: (views.clear_memo(), views.resolve(summary))) for _ in range(n)])
        resolve_disk_s = c.median([_timed(lambda: (views.clear_memo(), views.resolve(summary, cache))) for _ in range(n)])
        resolve_memo_s = c.median([_timed(lambda: views.resolve(summary, cache)) for _ in range(n)])
        con.execute(f"CREATE TEMP VIEW ledger AS SELECT * FROM iceberg_scan('{ledger.metadata_location}')")
        s_files, l_files = data_files(summary), data_files(ledger)
        assert sorted(ws.published_views()[c.DATASET].files) == sorted(s_files)  # the view reads these files

        rounds: list[list[float]] = []
        (lake, rows_v), (pq_, rows_p), (ice, rows_i) = bench_queries(con, [
            Q_PUBLISHED.format(src=c.DATASET), Q_PUBLISHED.format(src=parquet_src(s_files)),
            Q_PUBLISHED.format(src=f"iceberg_scan('{summary.metadata_location}')")], reps, rounds)
        assert rows_v == rows_p == rows_i, (rows_v, rows_p, rows_i)
        (l_ice, l_rows_i), (l_pq, l_rows_p) = bench_queries(con, [
            Q_LEDGER.format(src="ledger"), Q_LEDGER.format(src=parquet_src(l_files))], reps)
        assert l_rows_i == l_rows_p, (l_rows_i, l_rows_p)

        r.section(f"publishing ({len(publish_s)} publishes of {max_batch:,} events)")
        k = max(1, min(5, len(publish_s) // 4))
        early, late = c.median(publish_s[1:1 + k] or publish_s[:1]), c.median(publish_s[-k:])
        r.figure("publish_s_early", early, f"median publish, publishes 2..{1 + k}", "s",
                 f"{c.median(parts[1:1 + k] or parts[:1]):g} partitions rewritten")
        r.figure("publish_s_late", late, f"median publish, last {k}", "s", f"{c.median(parts[-k:]):g} partitions rewritten")
        r.ratio("publish_growth", late, early, "late / early publish time")
        r.section("file counts after the run")
        for name, table in (("published", summary), ("ledger", ledger)):
            info = c.table_files(table)
            folder = _table_folder(table)
            r.figure(f"{name}_data_files", info["data_files"], f"{name}: data files in the current snapshot")
            r.figure(f"{name}_manifests", info["manifests"], f"{name}: manifests in the current snapshot")
            r.figure(f"{name}_snapshots", info["snapshots"], f"{name}: snapshots kept in metadata")
            r.figure(f"{name}_files_on_disk", c.count_files(folder) if folder else None,
                     f"{name}: all files under the table folder", "", "before expiry + janitor")
        r.section(f"query time (median of {reps}, warm, interleaved)")
        r.figure("connect_s", connect_cold_s, "Workspace.connect(), first (extensions, catalog, planning)", "s")
        r.figure("connect_warm_s", connect_warm_s, "Workspace.connect(), resolution cached", "s")
        r.figure("resolve_plan_ms", resolve_plan_s * 1000, "resolving the published snapshot (manifests)", "ms")
        r.figure("resolve_disk_ms", resolve_disk_s * 1000, "  from .lakepub/views (a new process)", "ms")
        r.figure("resolve_memo_ms", resolve_memo_s * 1000, "  from the process memo", "ms")
        r.figure("query_s", query_s, f"Workspace.query of the aggregate (sandboxed, new connection)", "s")
        label = f"{c.DATASET} (published)"
        r.figure("published_lakepub_s", lake, f"{label}: Workspace.connect() view", "s", f"{len(rows_v)} result rows")
        r.figure("published_parquet_s", pq_, f"{label}: read_parquet of the same files", "s")
        r.figure("published_iceberg_s", ice, f"{label}: iceberg_scan", "s")
        r.ratio("published_ratio_of_medians", lake, pq_, f"{label}: lakepub view / parquet, medians")
        r.ratio("published_ratio", paired_ratio(rounds, 0, 1), 1.0, f"{label}: lakepub view / parquet, paired")
        r.ratio("published_iceberg_ratio", paired_ratio(rounds, 2, 1), 1.0, f"{label}: iceberg_scan / parquet, paired")
        r.figure("ledger_iceberg_s", l_ice, "ledger: iceberg_scan", "s", f"{len(l_rows_i)} result rows")
        r.figure("ledger_parquet_s", l_pq, "ledger: read_parquet of the same files", "s")
        r.ratio("ledger_ratio", l_ice, l_pq, "ledger: iceberg / parquet")
        r.target("published table: lakepub view / parquet <= 1.05x", r.figures["published_ratio"], "<=", 1.05)
        r.target("ledger: iceberg / parquet <= 1.2x", r.figures["ledger_ratio"], "<=", 1.2)

        _after_janitor(r, ws, con, reps, s_files)
        if not args.no_compact:
            _compact(r, ws, con, reps)
        con.close()
    r.emit(args)


def _after_janitor(r: c.Report, ws, con, reps: int, files: list[str]) -> None:
    """The published table once ``lakepub janitor --older-than 0s`` expired its old snapshots
    (``iceberg_scan`` parses every snapshot of the metadata JSON on each query, ~10 us per
    snapshot here; the lakepub view reads none of it)."""
    from lakepub.maintenance.janitor import JanitorOptions, run_janitor
    from lakepub.store.layout import summary_id

    before = ws.catalog.load_table(summary_id(ws.config.namespace, c.DATASET))
    run_janitor(ws, [c.DATASET], JanitorOptions(older_than_s=0.0))
    summary = ws.catalog.load_table(summary_id(ws.config.namespace, c.DATASET))
    assert sorted(data_files(summary)) == sorted(files)  # the janitor changes no data
    view = ws.published_views()[c.DATASET]  # the janitor's expiry wrote new metadata: resolved again
    con.execute(view.view_sql("after_janitor"))
    rounds: list[list[float]] = []
    (lake, _), (pq_, _), (ice, _) = bench_queries(con, [
        Q_PUBLISHED.format(src="after_janitor"), Q_PUBLISHED.format(src=parquet_src(files)),
        Q_PUBLISHED.format(src=f"iceberg_scan('{summary.metadata_location}')")], reps, rounds)
    r.section("published table after `lakepub janitor --older-than 0s` (no target; the default keeps 3 days)")
    r.figure("published_snapshots_after_janitor", len(summary.metadata.snapshots), "published: snapshots kept in metadata",
             "", f"was {len(before.metadata.snapshots)}")
    r.figure("published_metadata_kib_after_janitor", _size(summary.metadata_location) / 1024, "published: metadata JSON",
             "KiB", f"was {_size(before.metadata_location) / 1024:.0f} KiB")
    r.figure("published_lakepub_s_after_janitor", lake, "published: Workspace.connect() view", "s")
    r.figure("published_parquet_s_after_janitor", pq_, "published: read_parquet of the same files", "s")
    r.figure("published_iceberg_s_after_janitor", ice, "published: iceberg_scan", "s")
    r.ratio("published_ratio_after_janitor", paired_ratio(rounds, 0, 1), 1.0, "published: lakepub view / parquet, paired")
    r.ratio("published_iceberg_ratio_after_janitor", paired_ratio(rounds, 2, 1), 1.0,
            "published: iceberg_scan / parquet, paired")


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def _size(location: str) -> int:
    return Path(location.removeprefix("file://")).stat().st_size if location.startswith("file://") else 0


def _compact(r: c.Report, ws, con, reps: int) -> None:
    try:
        from lakepub.maintenance.compact import compact_ledger
    except ImportError:
        r.note("lakepub.maintenance.compact is not available: ledger compaction not measured")
        return
    from lakepub.store.layout import ledger_id

    t0 = time.perf_counter()
    res = compact_ledger(ws, c.DATASET)
    compact_s = time.perf_counter() - t0
    ledger = ws.catalog.load_table(ledger_id(ws.config.namespace, c.DATASET))
    files = data_files(ledger)
    con.execute(f"CREATE OR REPLACE TEMP VIEW ledger AS SELECT * FROM iceberg_scan('{ledger.metadata_location}')")
    (ice, _), (pq_, _) = bench_queries(con, [Q_LEDGER.format(src="ledger"), Q_LEDGER.format(src=parquet_src(files))], reps)
    r.section("after lakepub compact (ledger: one row per order, few files)")
    r.figure("compact_s", compact_s, "compaction time", "s", f"{res.rows_before:,} -> {res.rows_after:,} rows")
    r.figure("ledger_data_files_compacted", len(files), "ledger: data files in the current snapshot")
    r.figure("ledger_iceberg_s_compacted", ice, "ledger: iceberg_scan", "s")
    r.figure("ledger_parquet_s_compacted", pq_, "ledger: read_parquet of the same files", "s")
    r.ratio("ledger_ratio_compacted", ice, pq_, "ledger: iceberg / parquet")


def _table_folder(table) -> Path | None:
    location = table.location()
    return Path(location[len("file://"):]) if location.startswith("file://") else None


if __name__ == "__main__":
    main()
