"""Micro-benchmark of event validation (not part of run_all): ``read_events`` on 100k JSON Lines
events of the orders contract and of a 20-field contract (composite key of 2), JSONL and Parquet,
plus the canonical sort and digest of the wide batch.

    python scripts/bench/validate_events.py [--events N] [--repeat R] [--baseline GIT_REV]

``--baseline REV`` also times ``lakepub/events.py`` as it was at REV (a module standing alone, as
before contracts), interleaved with the current one, so both see the same machine load. Minimums
are the figures to compare; medians show the noise of a shared machine.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import pyarrow.parquet as pq  # noqa: E402

from lakepub import events  # noqa: E402
from lakepub.contract.model import load_contract  # noqa: E402
from lakepub.contract.validate import read_events  # noqa: E402
from lakepub.identity import canonical, events_digest  # noqa: E402

WIDE = """\
name: wide
version: "1.0"
entity: {key: [region, account_id], version: version, deleted: deleted}
fields:
  region: string
  account_id: long
  version: long
  deleted: boolean
  name: string
  country: {type: string, nullable: true}
  plan: string
  seats: int
  mrr_cents: long
  arr_cents: long
  score: double
  ratio: float
  churn_risk: {type: double, nullable: true}
  signup_day: date
  renewal_day: {type: date, nullable: true}
  updated_at: timestamp
  created_at: timestamp
  balance: decimal(18,2)
  credit: {type: "decimal(12,4)", nullable: true}
  active: boolean
"""


def orders_lines(n: int, r: random.Random):
    for i in range(n):
        oid, version = f"o{i % (n * 7 // 10 or 1):07d}", 1 + i // (n * 7 // 10 or 1)
        if i % 50 == 0:
            yield {"order_id": oid, "version": version + 1, "day": None, "cents": None, "deleted": True}
        else:
            yield {"order_id": oid, "version": version, "day": f"2025-{r.randint(1, 12):02d}-{r.randint(1, 28):02d}",
                   "cents": r.randint(0, 10**6), "deleted": False}


def wide_lines(n: int, r: random.Random):
    for i in range(n):
        yield {"region": r.choice(["eu", "us", "apac"]), "account_id": i % 80000, "version": 1 + i // 80000,
               "deleted": False, "name": f"acct {i}", "country": r.choice(["FR", "DE", None]),
               "plan": r.choice(["free", "pro"]), "seats": r.randint(1, 500), "mrr_cents": r.randint(0, 10**7),
               "arr_cents": r.randint(0, 10**8), "score": r.random(), "ratio": r.random(),
               "churn_risk": None if i % 3 else r.random(),
               "signup_day": f"2024-{r.randint(1, 12):02d}-{r.randint(1, 28):02d}", "renewal_day": None,
               "updated_at": f"2025-01-{r.randint(1, 28):02d}T{r.randint(0, 23):02d}:00:00.{r.randint(0, 999999):06d}Z",
               "created_at": "2024-06-01T00:00:00+02:00", "balance": f"{r.randint(0, 10**6)}.{r.randint(0, 99):02d}",
               "credit": None if i % 2 else r.randint(0, 10**5) / 4, "active": True}


def timed(fn, repeat: int) -> list[float]:
    out = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out


def show(label: str, times: list[float]) -> None:
    times = sorted(times)
    print(f"{label:<44} min {times[0] * 1e3:7.1f} ms   median {times[len(times) // 2] * 1e3:7.1f} ms")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--events", type=int, default=100_000)
    p.add_argument("--repeat", type=int, default=15)
    p.add_argument("--baseline", help="a git revision whose lakepub/events.py to time as well")
    args = p.parse_args()
    r = random.Random(1)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        orders = work / "orders.jsonl"
        orders.write_text("".join(json.dumps(e) + "\n" for e in orders_lines(args.events, r)))
        runs = {"orders JSONL (events.read_events)": events.read_events}
        if args.baseline:
            old = work / "events_baseline.py"
            old.write_text(subprocess.check_output(["git", "-C", str(ROOT), "show", f"{args.baseline}:lakepub/events.py"],
                                                   text=True))
            spec = importlib.util.spec_from_file_location("events_baseline", old)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            assert module.read_events(orders).equals(events.read_events(orders))
            runs[f"orders JSONL (events.py at {args.baseline})"] = module.read_events
        results: dict[str, list[float]] = {label: [] for label in runs}
        for _ in range(args.repeat):  # interleaved: both see the same load
            for label, fn in runs.items():
                results[label] += timed(lambda: fn(orders), 1)
        print(f"{args.events} events, {args.repeat} runs each")
        for label, times in results.items():
            show(label, times)

        (work / "wide@v1.0.yaml").write_text(WIDE)
        contract = load_contract(work / "wide@v1.0.yaml")
        wide = work / "wide.jsonl"
        wide.write_text("".join(json.dumps(e) + "\n" for e in wide_lines(args.events, r)))
        table = read_events(wide, contract)
        show(f"20 fields JSONL ({wide.stat().st_size / 1e6:.0f} MB)", timed(lambda: read_events(wide, contract), args.repeat))
        pq.write_table(table, work / "wide.parquet")
        show("20 fields Parquet", timed(lambda: read_events(work / "wide.parquet", contract), args.repeat))
        show("20 fields canonical + digest",
             timed(lambda: events_digest(canonical(table, contract), contract, is_canonical=True), args.repeat))


if __name__ == "__main__":
    main()
