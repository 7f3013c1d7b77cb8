"""Benchmark 2: cost of one 100,000-event publish vs history (1M orders vs 10M orders over 3 years).

For each size N a fresh workspace is built as fast as the public API allows: the N orders
(version 1, days spread evenly over 3 years, ids in time order) are generated with pyarrow,
written as Parquet files of ``--build-batch`` events and published with
``Workspace.publish("orders_daily", <parquet file>, start=..., end=...)``. Then the same-shaped
100,000-event batch is published ``--warmup`` times untimed, ``--repeat`` times timed (median),
and once more under cProfile to split the publish into phases:

    55%  new orders on the last day           35%  corrections of the most recent orders
     4%  corrections of random older orders     3%  deletes of recent orders
     3%  exact re-sends of version 1 of random orders (duplicates)

(30% of corrections also move the order's day by up to a week.) The old corrections make every
batch rewrite all ~37 month partitions of both datasets, so both pay the same rewrite; what can
differ is everything that reads history (the ledger lookup). Growth = median(10M) / median(1M).

    python scripts/bench/history.py [--quick] [--json PATH] [--sizes 1000000,10000000]
"""

from __future__ import annotations

import gc
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

import common as c

EPOCH_DAY = 20089  # 2025-01-01 as days since 1970-01-01
MIX = {"new": 0.55, "recent": 0.35, "old": 0.04, "delete": 0.03, "dup": 0.03}


def order_ids(idx: np.ndarray) -> pa.Array:
    digits = pc.utf8_lpad(pc.cast(pa.array(idx + 1, pa.int64()), pa.string()), 12, "0")
    return pc.binary_join_element_wise("o", digits, "")


def v1_cents(idx: np.ndarray) -> np.ndarray:
    return 100 + (idx.astype(np.int64) * 7919 + 13) % 20_000


class History:
    """The orders of one dataset: deterministic version-1 payloads plus what later batches changed."""

    def __init__(self, n: int, days: int = c.STREAM_DAYS):
        self.n, self.days, self.last_day = n, days, days - 1
        self.next = n  # index of the next new order
        self.version: dict[int, int] = {}
        self.day: dict[int, int] = {}
        self.deleted: set[int] = set()

    def v1_day(self, idx: np.ndarray) -> np.ndarray:
        return np.where(idx < self.n, idx.astype(np.int64) * self.days // self.n, self.last_day)

    def build_batch(self, lo: int, hi: int) -> pa.Table:
        idx = np.arange(lo, hi, dtype=np.int64)
        return _events(order_ids(idx), np.ones(len(idx), np.int64), self.v1_day(idx), v1_cents(idx),
                       np.zeros(len(idx), bool))

    def batch(self, size: int, rng: np.random.Generator) -> pa.Table:
        """The same-shaped batch of ``size`` events (see the module docstring)."""
        counts = {k: int(round(v * size)) for k, v in MIX.items()}
        counts["new"] += size - sum(counts.values())
        ids: list[np.ndarray] = []
        ver: list[np.ndarray] = []
        day: list[np.ndarray] = []
        cents: list[np.ndarray] = []
        dele: list[np.ndarray] = []

        def add(i, v, d, ct, dl):
            ids.append(np.asarray(i, np.int64))
            ver.append(np.asarray(v, np.int64))
            day.append(np.asarray(d, np.float64))
            cents.append(np.asarray(ct, np.float64))
            dele.append(np.asarray(dl, bool))

        # recent orders (not deleted), newest first: corrections and deletes take distinct ones
        want = counts["recent"] + counts["delete"]
        recent: list[int] = []
        k = self.next - 1
        while len(recent) < want and k >= 0:
            if k not in self.deleted:
                recent.append(k)
            k -= 1
        recent_arr = rng.permutation(np.array(recent, np.int64))
        oldest_recent = k
        fix, kill = recent_arr[:counts["recent"]], recent_arr[counts["recent"]:]
        old = rng.choice(max(1, oldest_recent), size=counts["old"], replace=False).astype(np.int64)
        old = np.array([o for o in old if o not in self.deleted], np.int64)

        for group in (fix, old):
            v = np.array([self.version.get(int(o), 1) + 1 for o in group], np.int64)
            d = np.array([self.day.get(int(o), -1) for o in group], np.int64)
            d = np.where(d < 0, self.v1_day(group), d)
            move = rng.random(len(group)) < 0.3
            d = np.clip(np.where(move, d + rng.integers(-7, 8, len(group)), d), 0, self.last_day)
            add(group, v, d, rng.integers(100, 20_100, len(group)), np.zeros(len(group), bool))
            for o, vv, dd in zip(group.tolist(), v.tolist(), d.tolist()):
                self.version[o], self.day[o] = vv, dd
        v = np.array([self.version.get(int(o), 1) + 1 for o in kill], np.int64)
        add(kill, v, np.full(len(kill), np.nan), np.full(len(kill), np.nan), np.ones(len(kill), bool))
        for o, vv in zip(kill.tolist(), v.tolist()):
            self.version[o] = vv
            self.deleted.add(o)
        dup = rng.choice(self.next, size=counts["dup"], replace=False).astype(np.int64)
        add(dup, np.ones(len(dup)), self.v1_day(dup), v1_cents(dup), np.zeros(len(dup), bool))
        new = np.arange(self.next, self.next + counts["new"] + (counts["old"] - len(old)), dtype=np.int64)
        self.next += len(new)
        add(new, np.ones(len(new)), np.full(len(new), self.last_day), v1_cents(new), np.zeros(len(new), bool))

        idx = np.concatenate(ids)
        order = rng.permutation(len(idx))
        table = _events(order_ids(idx[order]), np.concatenate(ver)[order], np.concatenate(day)[order],
                        np.concatenate(cents)[order], np.concatenate(dele)[order])
        assert table.num_rows == size, (table.num_rows, size)
        return table


def _events(ids: pa.Array, version, day, cents, deleted) -> pa.Table:
    day = np.asarray(day, np.float64)
    cents = np.asarray(cents, np.float64)
    null_day = np.isnan(day)
    null_cents = np.isnan(cents)
    day_arr = pa.array(np.where(null_day, 0, day).astype(np.int32) + EPOCH_DAY, pa.int32(),
                       mask=null_day).cast(pa.date32())
    cents_arr = pa.array(np.where(null_cents, 0, cents).astype(np.int64), pa.int64(), mask=null_cents)
    return pa.table({"order_id": ids, "version": pa.array(np.asarray(version, np.int64)), "day": day_arr,
                     "cents": cents_arr, "deleted": pa.array(np.asarray(deleted, bool))})


def build(ws, hist: History, folder: Path, build_batch: int) -> dict[str, float]:
    """Publish the N version-1 orders through ``ws.publish`` in batches of ``build_batch``."""
    t_gen = t_pub = 0.0
    for lo in range(0, hist.n, build_batch):
        hi = min(hist.n, lo + build_batch)
        t0 = time.perf_counter()
        path = folder / f"build-{lo:010d}.parquet"
        pq.write_table(hist.build_batch(lo, hi), path, compression="zstd")
        t1 = time.perf_counter()
        res = ws.publish(c.DATASET, path, start={"p0": lo}, end={"p0": hi})
        t_pub += time.perf_counter() - t1
        t_gen += t1 - t0
        assert res.status == "published", res
        path.unlink()
        c.log(f"  built {hi:,}/{hist.n:,} orders ({t_gen + t_pub:.1f} s)")
    return {"generate_s": t_gen, "publish_s": t_pub}


def measure(r: c.Report, label: str, n: int, work: Path, args, batch_size: int) -> dict:
    folder = work / label
    folder.mkdir()
    ws = c.workspace(folder / "ws")
    hist = History(n)
    c.log(f"building {n:,} orders ...")
    t0 = time.perf_counter()
    b = build(ws, hist, folder, args.build_batch or min(n, 1_000_000))
    build_s = time.perf_counter() - t0
    rng = np.random.default_rng(args.seed)
    position = n
    times, results = [], []
    paths = []
    for i in range(args.warmup + args.repeat + 1):
        path = folder / f"batch-{i}.parquet"
        pq.write_table(hist.batch(batch_size, rng), path)
        paths.append(path)
    for i in range(args.warmup + args.repeat):
        gc.collect()
        t0 = time.perf_counter()
        res = ws.publish(c.DATASET, paths[i], start={"p0": position}, end={"p0": position + batch_size})
        seconds = time.perf_counter() - t0
        position += batch_size
        warm = i < args.warmup
        if not warm:
            times.append(seconds)
            results.append(res)
        c.log(f"  {label}: {'warm-up' if warm else 'timed'} batch {i + 1}: {seconds:.3f} s, "
              f"{len(res.partitions)} partitions, {res.counts}")
    gc.collect()
    res, stats, wall = c.profile_call(lambda: ws.publish(c.DATASET, paths[-1], start={"p0": position},
                                                         end={"p0": position + batch_size}))
    phases = c.phase_times(stats)
    from lakepub.store.layout import load_tables

    t = load_tables(ws.catalog, ws.config.namespace, c.DATASET)
    return {
        "n": n, "build_s": build_s, "build": b, "times": times, "median": c.median(times),
        "partitions": len(results[-1].partitions), "counts": results[-1].counts.__dict__,
        "phases": phases, "profile_wall": wall,
        "ledger_files": c.table_files(t.ledger), "summary_files": c.table_files(t.summary),
        "ledger_rows": ws.query(f"SELECT count(*) FROM iceberg_scan('{t.ledger.metadata_location}')").column(0)[0].as_py(),
    }


def main() -> None:
    p = c.parser(__doc__.splitlines()[0])
    p.add_argument("--sizes", help="comma-separated history sizes in orders (default 1000000,10000000; "
                                   "--quick 20000,200000)")
    p.add_argument("--batch", type=int, help="events per measured batch (default 100,000; --quick 5,000)")
    p.add_argument("--repeat", type=int, help="timed batches per size (default 3; --quick 2)")
    p.add_argument("--warmup", type=int, help="untimed batches per size before the timed ones (default 2; --quick 1)")
    p.add_argument("--build-batch", type=int, help="orders per build publish (default min(N, 1,000,000))")
    args = p.parse_args()
    sizes = [int(x) for x in (args.sizes or ("20000,200000" if args.quick else "1000000,10000000")).split(",")]
    batch_size = args.batch or (5_000 if args.quick else 100_000)
    args.repeat = args.repeat or (2 if args.quick else 3)
    args.warmup = (1 if args.quick else 2) if args.warmup is None else args.warmup
    r = c.Report("history", "publish time of one same-shaped batch vs history size", args.quick,
                 params={"sizes": ",".join(f"{s:,}" for s in sizes), "batch": batch_size, "warmup": args.warmup,
                         "repeat": args.repeat,
                         "days": c.STREAM_DAYS})
    out = []
    with c.scratch(args, "history") as work:
        for n in sizes:
            out.append(measure(r, f"h{n}", n, work, args, batch_size))
    for m in out:
        tag = _tag(m["n"])
        r.section(f"history {m['n']:,} orders")
        r.figure(f"build_s_{tag}", m["build_s"], "build (generate Parquet + ws.publish)", "s",
                 f"{m['n'] / m['build_s']:,.0f} orders/s; publish {m['build']['publish_s']:.1f} s")
        r.figure(f"ledger_rows_{tag}", m["ledger_rows"], "ledger rows after the timed batches")
        r.figure(f"ledger_data_files_{tag}", m["ledger_files"]["data_files"], "ledger data files")
        r.figure(f"summary_data_files_{tag}", m["summary_files"]["data_files"], "published data files")
        r.figure(f"partitions_{tag}", m["partitions"], "partitions rewritten by the batch")
        r.figure(f"batch_s_{tag}", m["median"], f"publish {batch_size:,} events (median of {len(m['times'])})", "s",
                 "runs: " + ", ".join(f"{t:.3f}" for t in m["times"]))
        r.figure(f"events_per_s_{tag}", batch_size / m["median"], "  = events/s", "events/s")
    if len(out) >= 2:
        a, b = out[0], out[-1]
        r.section(f"where the batch's time goes (cProfile of one more batch: {_tag(a['n'])} vs {_tag(b['n'])})")
        r.figures["phases"] = {_tag(m["n"]): m["phases"] for m in out}
        labels = set(a["phases"]) | set(b["phases"])
        for label in sorted(labels, key=lambda k: (-b["phases"].get(k.replace(c.NESTED, ""), 0.0)
                                                   if k.startswith(c.NESTED) else -b["phases"].get(k, 0.0), k)):
            x, y = a["phases"].get(label, 0.0), b["phases"].get(label, 0.0)
            if max(x, y) < 0.0005:
                continue
            r.lines.append(f"  {label:<46} {x:9.3f} s -> {y:9.3f} s   x{(y / x if x else float('nan')):.2f}")
        r.lines.append(f"  {'whole publish under the profiler':<46} {a['profile_wall']:9.3f} s -> "
                       f"{b['profile_wall']:9.3f} s")
        r.section("growth")
        growth = r.ratio("growth", b["median"], a["median"], f"batch time {_tag(b['n'])} / {_tag(a['n'])} orders")
        r.figure("history_factor", b["n"] / a["n"], "history factor")
        r.target(f"growth for {b['n'] // a['n']}x history <= 1.5x", growth, "<=", 1.5)
        key = "ledger lookup (key index, else DuckDB join)"
        pa_, pb = a["phases"].get(key, 0.0), b["phases"].get(key, 0.0)
        r.note(f"the ledger lookup (the only phase that reads history) takes {pa_:.3f} s -> {pb:.3f} s "
               f"(x{pb / pa_ if pa_ else float('nan'):.2f}) for {b['n'] // a['n']}x history")
    r.note("build publishes go through Workspace.publish with a Parquet file (vectorised read + validation)")
    _arrow_api_cost(r, batch_size, args.seed)
    r.emit(args)


def _arrow_api_cost(r: c.Report, batch_size: int, seed: int) -> None:
    """What ``Workspace.publish(pa.Table)`` adds before publishing: its conversion of the table."""
    from lakepub.events import read_parquet_events
    from lakepub.workspace import _events_table as _to_table

    try:  # since contracts: validated against the dataset's contract
        from lakepub.contract.orders import ORDERS_CONTRACT

        def _events_table(t):
            return _to_table(t, ORDERS_CONTRACT)
    except ImportError:  # before contracts
        _events_table = _to_table

    hist = History(1_000_000)
    table = hist.batch(batch_size, np.random.default_rng(seed))
    r.section("input path of Workspace.publish for the same batch")
    try:
        _events_table(table)
        r.figure("publish_arrow_date32_accepted", True, "pa.Table with a date32 'day' column accepted")
    except Exception as exc:  # noqa: BLE001 - reported, not fatal
        r.figure("publish_arrow_date32_accepted", False, "pa.Table with a date32 'day' column accepted")
        r.note(f"Workspace.publish(pa.Table) refuses the canonical date32 'day' column: {' '.join(str(exc).split())}; "
               "timed below with 'day' as ISO strings")
    as_text = table.set_column(2, "day", pc.cast(table.column("day"), pa.string()))
    t0 = time.perf_counter()
    _events_table(as_text)
    arrow_s = time.perf_counter() - t0
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "b.parquet"
        pq.write_table(table, path)
        t0 = time.perf_counter()
        read_parquet_events(path)
        parquet_s = time.perf_counter() - t0
    r.figure("publish_arrow_table_convert_s", arrow_s, "pa.Table in (vectorised validation, ISO-string days)", "s")
    r.figure("publish_parquet_read_s", parquet_s, "Parquet file in (vectorised read + validation)", "s")


def _tag(n: int) -> str:
    return f"{n // 1_000_000}M" if n % 1_000_000 == 0 else f"{n // 1000}k"


if __name__ == "__main__":
    main()
