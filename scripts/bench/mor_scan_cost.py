"""Benchmark: what DuckDB's full scan pays for position deletes, per delete FILE and per deleted ROW (issue 12 (c)).

One Iceberg table's worth of data files (the customers rows of ``merge_on_read.py``: 10 fields,
``--rows`` rows in 16 data files by ``customer_id % 16``, zstd like lakepub's tables), registered
in one table per delete layout, the delete files written and committed by lakepub's own code
(``store/deletes.py``: sorted positions, ``file_path`` bounds set). Each layout is scanned by
DuckDB (iceberg extension; every column aggregated, as ``merge_on_read.py``'s scans), in paired
rounds with the same data files without deletes and with the live rows as one plain Parquet file
(snappy; zstd), CPU and wall; all scans of one deleted set must give the same result.

* per ROW: 16 delete files, one per data file, deleting ``--fractions`` of the rows;
* per FILE: the same deleted rows (``--fixed``, 5% by default) in 1 delete file naming every
  data file, 16 aligned (one per data file), 16 spread (each naming every data file: lakepub's
  layout, one file per partition per publish, when a partition holds several data files), and
  4 or 8 per data file (64, 128: many publishes' deletes);
* bounds: the 16 aligned files without ``file_path`` lower/upper bounds.

Measured (h-mor, AMD EPYC VM, loaded 4-10; README "Benchmarks", MoR): the cost follows the deleted
rows, plus a fixed share of every data file carrying a delete: vs the same files without deletes,
CPU, 1% deleted 1.21x (1M) / 1.28x (10M), 20% 1.37x / 1.90x; 5% in 1 to 128 delete files, aligned
or spread, with or without bounds, 1.28-1.40x (1M) / 1.48-1.58x (10M) with no trend. So neither
the delete-file count nor the layout is worth changing; the deleted share is what costs.

    python scripts/bench/mor_scan_cost.py [--rows 1000000] [--fractions 0.001,0.01,0.05,0.2] [--fixed 0.05] [--rounds 5]
"""

from __future__ import annotations

import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

import common as c
import merge_on_read as mor

FILES = 16


def main() -> None:
    p = c.parser(__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, help="rows (default 1,000,000; --quick 32,000)")
    p.add_argument("--fractions", default="0.001,0.01,0.05,0.2", help="deleted shares of the per-row series")
    p.add_argument("--fixed", type=float, default=0.05, help="the deleted share of the per-file series (default 0.05)")
    p.add_argument("--rounds", type=int, default=5, help="paired scan rounds (default 5)")
    args = p.parse_args()
    rows = args.rows or (32_000 if args.quick else 1_000_000)
    fractions = [float(x) for x in args.fractions.split(",")]
    r = c.Report("mor_scan_cost", "DuckDB scan cost of position deletes: per delete file vs per deleted row",
                 args.quick, params={"rows": rows, "data_files": FILES, "fractions": fractions, "fixed": args.fixed,
                                     "rounds": args.rounds, "seed": args.seed})
    sys.path.insert(0, str(c.REPO))
    from pyiceberg.catalog.sql import SqlCatalog

    from lakepub import duck
    from lakepub.store.deletes import stage_row_delta, submit_deletes
    from lakepub.store.files import FileWriter
    from lakepub.store.write import transaction

    with c.scratch(args, "mor_scan_cost") as work:
        catalog = SqlCatalog("bench", uri=f"sqlite:///{work}/catalog.db", warehouse=f"file://{work}/warehouse")
        catalog.create_namespace("b")
        state = mor.full_state(rows, args.seed)
        by_file = [state.filter(pa.compute.equal(pa.compute.bit_wise_and(state["customer_id"], FILES - 1), i))
                   for i in range(FILES)]
        made = [0]

        def new_table(data=None, deletes: dict | None = None, bounds: bool = True):
            """A table holding ``data`` (DataFiles, written into the first table) and delete files
            of ``deletes`` (key -> (file_path, pos) rows: one delete file each); its scan SQL."""
            made[0] += 1
            table = catalog.create_table(("b", f"t{made[0]}"), state.schema,
                                         properties={"format-version": "2", "write.parquet.compression-codec": "zstd"})
            if data is None:
                data = FileWriter(table.metadata, table.io).write([(None, t) for t in by_file])
            tx = transaction(table)
            stage_row_delta(tx, table, snapshot_properties={}, add_data=data)
            tx.commit_transaction()
            table = catalog.load_table(("b", f"t{made[0]}"))
            if deletes:
                written = [f.result() for f in submit_deletes(table.metadata, table.io, deletes)]
                if not bounds:
                    written = [_without_bounds(f) for f in written]
                tx = transaction(table)
                stage_row_delta(tx, table, snapshot_properties={}, add_deletes=written)
                tx.commit_transaction()
                table = catalog.load_table(("b", f"t{made[0]}"))
            return data, duck.scan_sql(table.metadata_location)

        data, plain_table = new_table()
        paths = [f.file_path for f in data]
        con = duck.connect()
        rng = np.random.default_rng(args.seed + 5)

        def deleted(share: float) -> list[np.ndarray]:
            """Per data file: sorted positions, ``share`` of its rows."""
            return [np.sort(rng.choice(t.num_rows, int(t.num_rows * share), replace=False)) for t in by_file]

        def rows_of(i: int, pos: np.ndarray) -> pa.Table:
            return pa.table({"file_path": pa.array([paths[i]] * len(pos)), "pos": pa.array(pos, pa.int64())})

        def aligned(sets: list[np.ndarray], per_file: int = 1) -> dict:
            return {(i, j): rows_of(i, part) for i, pos in enumerate(sets)
                    for j, part in enumerate(np.array_split(pos, per_file))}

        def spread(sets: list[np.ndarray], count: int) -> dict:
            pieces = [[rows_of(i, part) for part in np.array_split(pos, count)] for i, pos in enumerate(sets)]
            return {j: pa.concat_tables([pieces[i][j] for i in range(FILES)]) for j in range(count)}

        def measure(title: str, layouts: dict[str, tuple[dict, bool]]) -> None:
            srcs = {name: new_table(data, d, bounds)[1] for name, (d, bounds) in layouts.items()}
            first = next(iter(srcs.values()))
            results = {con.execute(mor.SCAN.format(src=s)).fetchall()[0] for s in srcs.values()}
            assert len(results) == 1, f"{title}: the layouts differ: {results}"
            plain = mor.plain_copies(con, first, work, str(made[0]))
            scans = mor.paired_scans(con, {**srcs, "no_deletes": plain_table, **plain}, rounds=args.rounds)
            r.section(f"{title} (median of {args.rounds} paired rounds)")
            base = scans["plain_snappy"]
            for name, (wall, cpu) in scans.items():
                r.figure(f"{title.split(':')[0]}_{name}_cpu_ms", cpu * 1000, name, "ms CPU",
                         f"wall {wall * 1000:.1f} ms; {cpu / base[1]:.2f}x snappy, "
                         f"{cpu / scans['plain_zstd'][1]:.2f}x zstd, {cpu / scans['no_deletes'][1]:.2f}x the same "
                         f"files without deletes (CPU); wall {wall / base[0]:.2f}x snappy")
            c.log(f"{title}: " + ", ".join(f"{n} {v[1] / base[1]:.2f}x" for n, v in scans.items()))
            return scans

        for share in fractions:
            measure(f"rows{share:g}: 16 delete files (one per data file), {share:.1%} of the rows deleted",
                    {f"aligned16_{share:g}": (aligned(deleted(share)), True)})
        sets = deleted(args.fixed)
        scans = measure(f"files: {args.fixed:.1%} of the rows deleted in N delete files",
                {"one1": (spread(sets, 1), True), "aligned16": (aligned(sets), True),
                 "spread16": (spread(sets, 16), True), "aligned64": (aligned(sets, 4), True),
                 "aligned128": (aligned(sets, 8), True), "aligned16_no_bounds": (aligned(sets), False)})
        for unit, j in (("CPU", 1), ("wall", 0)):
            r.target(f"16 delete files spread as lakepub writes them, {args.fixed:.0%} deleted / plain snappy ({unit})",
                     scans["spread16"][j] / scans["plain_snappy"][j], "<=", 1.3)
    r.emit(args)


def _without_bounds(delete_file):
    from pyiceberg.manifest import DataFile

    out = DataFile.from_args(content=delete_file.content, file_path=delete_file.file_path,
                             file_format=delete_file.file_format, partition=delete_file.partition,
                             record_count=delete_file.record_count, file_size_in_bytes=delete_file.file_size_in_bytes,
                             sort_order_id=None, equality_ids=None, key_metadata=None)
    out.spec_id = delete_file.spec_id
    return out


if __name__ == "__main__":
    main()
