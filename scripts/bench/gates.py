"""Micro-benchmark of the publish gates (not part of run_all): ``prepare`` (canonical sort, digest,
projection side) of a 100k-event batch under a contract with every kind of gate, against the same
contract without constraints (and without the default), interleaved in one run; and ``Gates.apply`` alone.

    python scripts/bench/gates.py [--events N] [--repeat R] [--reject-every K]

The gated contract: a history_only default filled on 1 event in 10, an enum mapped to other, a
not_null, a range, an enum with on_new reject and a unique column; 1 event in ``K`` breaks a rule
(default 100, i.e. 1% rejected). Minimums are the figures to compare; medians show the noise.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import pyarrow as pa  # noqa: E402

from lakepub.contract.gates import Gates  # noqa: E402
from lakepub.contract.model import load_contract  # noqa: E402
from lakepub.publish.publisher import prepare  # noqa: E402

FIELDS = """\
name: customers
version: "1.0"
entity: {key: [customer_id], version: version, deleted: deleted}
fields:
  customer_id: string
  version: long
  country: {type: string, nullable: true}
  plan: {type: string, nullable: true, default: {value: basic, kind: history_only}}
  status: string
  tier: string
  mrr_cents: {type: long, nullable: true}
  email: {type: string, nullable: true}
  deleted: boolean
"""
GATES = """\
constraints:
  not_null: [mrr_cents]
  range: [{col: mrr_cents, rule: "[0, 10000000]"}]
  enum:
    - {col: status, values: [ok, warn, err], on_new: reject}
    - {col: tier, values: [a, b, other], on_new: map-to-other, other: other}
  unique: [[email]]
validation: {mode: lenient}
"""


def batch(contract, n: int, reject_every: int, r: random.Random) -> pa.Table:
    rows = []
    for i in range(n):
        bad = i % reject_every == 0
        rows.append({"customer_id": f"c{i:07d}", "version": 1, "country": r.choice(["FR", "DE", "US"]),
                     "plan": None if i % 10 == 0 else "pro", "status": "new" if bad else r.choice(["ok", "warn"]),
                     "tier": r.choice(["a", "b", "z"]), "mrr_cents": r.randint(0, 10**6), "email": f"u{i}@x",
                     "deleted": False})
    return pa.Table.from_pylist(rows, schema=contract.arrow_schema)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--events", type=int, default=100_000)
    p.add_argument("--repeat", type=int, default=9)
    p.add_argument("--reject-every", type=int, default=100)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        plain_path, gated_path = Path(tmp) / "plain.yaml", Path(tmp) / "gated.yaml"
        plain_path.write_text(FIELDS.replace(", default: {value: basic, kind: history_only}", ""))
        gated_path.write_text(FIELDS + GATES)
        plain, gated = load_contract(plain_path), load_contract(gated_path)
    assert Gates.of(plain) is None
    events = batch(gated, args.events, args.reject_every, random.Random(1))
    gates = Gates.of(gated)
    verdict = gates.apply(events)
    print(f"{args.events} events, {verdict.n_rejected} rejected, {sum(verdict.inferred.values())} inferred, "
          f"{verdict.mapped} mapped")
    runs = {"prepare, contract without gates": lambda: prepare(events, plain),
            "prepare, contract with gates": lambda: prepare(events, gated),
            "Gates.apply alone": lambda: gates.apply(events)}
    times: dict[str, list[float]] = {k: [] for k in runs}
    for _ in range(args.repeat):
        for label, fn in runs.items():
            t = time.perf_counter()
            fn()
            times[label].append(time.perf_counter() - t)
    for label, ts in times.items():
        ts.sort()
        print(f"{label:<36} min {ts[0] * 1e3:7.1f} ms   median {ts[len(ts) // 2] * 1e3:7.1f} ms")
    base, ours = min(times["prepare, contract without gates"]), min(times["prepare, contract with gates"])
    print(f"ratio gated / ungated prepare: {ours / base:.2f}")


if __name__ == "__main__":
    main()
