"""Registering a derived window's files: pyiceberg's footer statistics vs ``store/footer_stats.py``, interleaved.

Writes FILES one-row Parquet files as ``store/duck_files`` writes a daily rollup's (DuckDB
``COPY ... PARTITION_BY`` with field ids, snappy; columns day date, amount long, n long; the
derived table's metrics: ``none`` except the partition column, ``full``), reads their footers
once, then alternates ``--rounds`` times: pyiceberg's ``data_file_statistics_from_parquet_metadata``
+ ``to_serialized_dict`` for every footer, and ``FooterStatistics.of`` (a new one per round, as a
window makes one); medians of wall and CPU milliseconds, and the footer read itself for scale.
Asserts both give equal dicts.

    PYTHONPATH=. python scripts/bench/footer_stats_ab.py [--files 365] [--rounds 15]

Not part of ``run_all.py``: a micro-benchmark of one step of ``scripts/bench/derive.py``.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time

import common as c


def main() -> None:
    p = c.parser(__doc__.splitlines()[0])
    p.add_argument("--files", type=int, default=365)
    p.add_argument("--rounds", type=int, default=15)
    args = p.parse_args()
    import duckdb
    import pyarrow as pa
    from pyiceberg.io.pyarrow import compute_statistics_plan, data_file_statistics_from_parquet_metadata, \
        parquet_path_to_id_mapping
    from pyiceberg.schema import Schema
    from pyiceberg.types import DateType, LongType, NestedField

    from lakepub.store.duck_files import footer

    schema = Schema(NestedField(1, "day", DateType(), required=False),
                    NestedField(2, "amount", LongType(), required=False),
                    NestedField(3, "n", LongType(), required=False))
    props = {"write.metadata.metrics.default": "none", "write.metadata.metrics.column.day": "full"}
    with tempfile.TemporaryDirectory(prefix="lakepub-bench-footer-") as tmp:
        n = args.files
        rows = pa.table({"day": pa.array(range(19723, 19723 + n), pa.int32()).cast(pa.date32()),
                         "amount": pa.array(range(n), pa.int64()), "n": pa.array([1] * n, pa.int64())})
        rows = rows.append_column("day_day", rows["day"].cast(pa.string()))
        con = duckdb.connect()
        con.register("rows", rows)
        (_, files), = con.execute(f"COPY (SELECT day, amount, n, day_day FROM rows) TO '{tmp}/data' (FORMAT parquet, "
                                  "FIELD_IDS {day: 1, amount: 2, n: 3}, COMPRESSION snappy, PARTITION_BY (day_day), "
                                  "RETURN_FILES true)").fetchall()
        footers = [footer(f) for f in files]
        plan, mapping = compute_statistics_plan(schema, props), parquet_path_to_id_mapping(schema)
        runs: dict[str, list[tuple[float, float]]] = {}

        def timed(key, fn):
            t, cpu = time.perf_counter(), time.process_time()
            out = fn()
            runs.setdefault(key, []).append(((time.perf_counter() - t) * 1000, (time.process_time() - cpu) * 1000))
            return out

        for _ in range(args.rounds):
            theirs = timed("pyiceberg", lambda: [data_file_statistics_from_parquet_metadata(
                parquet_metadata=m, stats_columns=plan, parquet_column_mapping=mapping).to_serialized_dict()
                for m in footers])
            mine = timed("footer_stats", lambda: _all(schema, props, footers))
            assert mine == theirs
            timed("footer read", lambda: [footer(f) for f in files])
    print(f"{len(files)} files, {args.rounds} interleaved rounds, load {os.getloadavg()[0]:.1f}")
    for key, values in runs.items():
        print(f"  {key:14s} wall {statistics.median(v[0] for v in values):7.2f} ms   CPU "
              f"{statistics.median(v[1] for v in values):7.2f} ms")


def _all(schema, props, footers):
    from lakepub.store.footer_stats import FooterStatistics

    statistics_ = FooterStatistics(schema, props)
    return [statistics_.of(m) for m in footers]


if __name__ == "__main__":
    main()
