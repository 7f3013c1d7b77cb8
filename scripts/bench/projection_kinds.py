"""Cost of the projection kinds (lakepub/projection/) on one batch: changes + apply.

100k before + 100k after states of orders over 36 months (~1,100 day groups), legacy aggregate
(group_by day, month(day)) and current (bucket(36, order_id) and month(day)), against a
published table built from 1M live states. Prints milliseconds (best of --repeat).

    .venv/bin/python scripts/bench/projection_kinds.py [--states 1000000] [--batch 100000]
"""

from __future__ import annotations

import argparse
import time
from datetime import date

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lakepub.identity import partition_checksum as legacy_checksum
from lakepub.projection import Entity, kind_of, partition_checksum

ORDERS = Entity(pa.schema([("order_id", pa.string()), ("version", pa.int64()), ("day", pa.date32()),
                           ("cents", pa.int64()), ("deleted", pa.bool_())]), ("order_id",), "version", "deleted")
DAYS = 36 * 30


def states(ids: np.ndarray, rng: np.random.Generator, version: int) -> pa.Table:
    n = len(ids)
    days = pa.array(rng.integers(0, DAYS, n).astype(np.int32) + (date(2023, 1, 1) - date(1970, 1, 1)).days).cast(pa.date32())
    return pa.table({"order_id": pa.array([f"o{i:09d}" for i in ids]), "version": pa.array(np.full(n, version)),
                     "day": days, "cents": pa.array(rng.integers(0, 10 ** 6, n)),
                     "deleted": pa.array(np.zeros(n, dtype=bool))}, schema=ORDERS.schema)


def best(fn, repeat: int) -> tuple[float, object]:
    times, out = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return min(times) * 1000, out


def run(kind, all_states, before, after, repeat: int) -> dict[str, float]:
    built_ms, published = best(lambda: kind.build(all_states), repeat)
    changes_ms, changes = best(lambda: kind.changes(before, after), repeat)
    part = kind.partition
    values = part.values(published)
    touched = pc.unique(part.values(changes))
    current = published.filter(pc.is_in(values, touched))
    apply_ms, new = best(lambda: kind.apply(current, changes), repeat)

    cur_values, change_values = part.values(current), part.values(changes)

    def per_partition():  # as the property test does: each partition's rows and change rows alone
        return [kind.apply(current.filter(pc.equal(cur_values, v)), changes.filter(pc.equal(change_values, v)))
                for v in touched]
    per_ms, _ = best(per_partition, max(1, repeat // 2))
    values_ms, _ = best(lambda: part.values(changes), repeat)
    return {"build": built_ms, "changes": changes_ms, "apply_at_once": apply_ms, "apply_per_partition": per_ms,
            "partition_values": values_ms, "partitions": len(touched), "current_rows": current.num_rows,
            "change_rows": changes.num_rows, "new_rows": new.num_rows}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--states", type=int, default=1_000_000)
    parser.add_argument("--batch", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    rng = np.random.default_rng(7)
    all_ids = np.arange(args.states)
    everything = states(all_ids, rng, 1)
    changed = rng.choice(all_ids, args.batch, replace=False)
    before = everything.take(pa.array(changed))
    after = states(changed, rng, 2)
    legacy = kind_of({}, ORDERS, where="bench", dataset="orders_daily")
    print("aggregate month(day):", run(legacy, everything, before, after, args.repeat))
    for partition in ("bucket(36, order_id)", "month(day)"):
        current = kind_of({"projection": {"kind": "current"}, "partition": partition}, ORDERS, where="bench")
        print(f"current {partition}:", run(current, everything, before, after, args.repeat))

    rows = legacy.build(everything)
    triples = [(r["day"], r["cents"], r["orders"]) for r in rows.to_pylist()]
    generic_ms, _ = best(lambda: partition_checksum(rows), args.repeat)
    legacy_ms, _ = best(lambda: legacy_checksum(triples), args.repeat)
    print(f"checksum of {rows.num_rows} orders_daily rows: generic {generic_ms:.2f} ms "
          f"({generic_ms * 1000 / rows.num_rows:.2f} us/row), identity.py {legacy_ms:.2f} ms")
    wide = pa.table({"k": [f"c{i}" for i in range(100_000)], "s": ["FR|x"] * 100_000,
                     "n": pa.array(np.arange(100_000)), "d": pa.array(np.full(100_000, 19000), pa.int32()).cast(pa.date32()),
                     "b": pa.array(np.ones(100_000, dtype=bool)), "f": pa.array(np.linspace(0, 1, 100_000)),
                     "m": pa.array(np.arange(100_000)).cast(pa.decimal128(38, 2)),
                     "t": pa.array(np.arange(100_000)).cast(pa.timestamp("us", tz="UTC"))})
    wide_ms, _ = best(lambda: partition_checksum(wide), args.repeat)
    print(f"checksum of 100000 rows x 8 mixed columns: {wide_ms:.1f} ms ({wide_ms * 10 / 1000:.2f} us/row)")


if __name__ == "__main__":
    main()
