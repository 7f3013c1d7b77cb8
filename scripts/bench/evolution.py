"""What the publish that applies a contract evolution costs (run_all: in --quick or --all).

A customers entity with an aggregate (MRR per country and plan) and a current-state table with
the default column list (bucket(``--buckets``, customer_id)), ``--customers`` live customers published in
one batch. Then batches of ``--batch`` updates: under v1.0 (a normal publish), the first one
under v1.1 (adds ``referrer``, promotes ``seats`` int->long: the evolving publish, which rewrites
every partition of the current table, see lakepub/publish/evolution.py), and one more under v1.1.
Each timed publish opens the workspace anew (reads the published table once, like one ``lakepub
run``). Repeated on ``--repeat`` fresh workspaces; minimums and medians in seconds.

    python scripts/bench/evolution.py [--quick] [--customers N] [--batch B] [--repeat R] [--buckets K] [--json PATH]

``--quick`` (CI): 5,000 customers, batches of 200, one workspace.
"""

from __future__ import annotations

import random
import statistics
import time
from pathlib import Path

import yaml

import common as c  # puts the checkout first on sys.path

from lakepub.workspace import Workspace  # noqa: E402

CONTRACT = """\
name: customers
version: "1.0"
entity: {key: [customer_id], version: version, deleted: deleted}
fields:
  customer_id: string
  version: long
  country: {type: string, nullable: true}
  plan: string
  mrr_cents: long
  seats: {type: int, nullable: true}
  deleted: boolean
"""
V1_1 = (CONTRACT.replace('version: "1.0"', 'version: "1.1"').replace("seats: {type: int", "seats: {type: long")
        + "  referrer: {type: string, nullable: true}\n")
DATASETS = [
    {"name": "customers_mrr", "source": "customers", "entity": "customers",
     "projection": {"kind": "aggregate", "group_by": ["country", "plan"],
                    "measures": {"mrr_cents": "sum(mrr_cents)", "customers": "count()"}}},
    {"name": "customers_all", "source": "customers", "entity": "customers",
     "projection": {"kind": "current"}, "partition": "bucket(BUCKETS, customer_id)"},
]


def _datasets(root: Path, version: str, buckets: int) -> None:
    for d in DATASETS:
        text = yaml.safe_dump({**d, "contract": f"contracts/customers@v{version}"}, sort_keys=False)
        (root / "catalog" / "datasets" / f"{d['name']}.yaml").write_text(text.replace("BUCKETS", str(buckets)))


def _events(ids: range, version: int, r: random.Random, evolved: bool = False) -> list[dict]:
    out = []
    for i in ids:
        e = {"customer_id": f"c{i:08d}", "version": version, "country": r.choice(["FR", "DE", "US", None]),
             "plan": r.choice(["basic", "pro"]), "mrr_cents": r.randrange(10_000), "seats": r.randrange(1, 50),
             "deleted": False}
        if evolved:
            e["referrer"] = r.choice(["ads", "mail", None])
        out.append(e)
    return out


def one(folder: Path, customers: int, batch: int, seed: int, buckets: int) -> dict[str, float]:
    r = random.Random(seed)
    root = folder / f"ws{seed}"
    Workspace.init(root)
    (root / "catalog" / "datasets" / "orders_daily.yaml").unlink()
    (root / "catalog" / "contracts" / "customers@v1.0.yaml").write_text(CONTRACT)
    (root / "catalog" / "contracts" / "customers@v1.1.yaml").write_text(V1_1)
    _datasets(root, "1.0", buckets)
    ws = Workspace.open(root)
    ws.publish("customers_mrr", _events(range(customers), 1, r), start={}, end={"p0": customers})
    pos, out = customers, {}
    for label, version, evolved in (("v1.0 publish", 2, False), ("evolving publish", 3, True),
                                    ("v1.1 publish", 4, True)):
        if evolved and version == 3:
            _datasets(root, "1.1", buckets)
        ws = Workspace.open(root)  # each publish in a fresh workspace object (cold, like one `lakepub run`)
        events = _events(range(0, customers, max(1, customers // batch)), version, r, evolved)[:batch]
        began = time.perf_counter()
        ws.publish("customers_mrr", events, start={"p0": pos}, end={"p0": pos + len(events)})
        out[label] = time.perf_counter() - began
        pos += len(events)
    return out


def main() -> None:
    parser = c.parser(__doc__.splitlines()[0])
    parser.add_argument("--customers", type=int, help="live customers (default 100,000; --quick 5,000)")
    parser.add_argument("--batch", type=int, help="updates per timed publish (default 1000; --quick 200)")
    parser.add_argument("--repeat", type=int, help="fresh workspaces (default 3; --quick 1)")
    parser.add_argument("--buckets", type=int, default=16, help="bucket(N, customer_id) of the current table")
    args = parser.parse_args()
    args.customers = args.customers or (5_000 if args.quick else 100_000)
    args.batch = args.batch or (200 if args.quick else 1000)
    args.repeat = args.repeat or (1 if args.quick else 3)
    r = c.Report("evolution", "the publish that applies a contract evolution vs ordinary publishes", args.quick,
                 params={"customers": args.customers, "batch": args.batch, "repeat": args.repeat,
                         "buckets": args.buckets})
    runs = []
    with c.scratch(args, "evolution") as tmp:
        for seed in range(args.repeat):
            runs.append(one(Path(tmp), args.customers, args.batch, seed, args.buckets))
    r.section(f"{args.customers:,} live customers in bucket({args.buckets}), batches of {args.batch:,} updates, "
              f"{args.repeat} workspace(s): minimum (median)")
    for label in runs[0]:
        times = [run[label] for run in runs]
        key = label.replace(".", "_").replace(" ", "_")
        r.figures[f"{key}_median_s"] = statistics.median(times)
        r.figure(f"{key}_min_s", min(times), label, "s", f"median {statistics.median(times):.3f} s")
    r.ratio("evolving_vs_v1_0", r.figures["evolving_publish_min_s"], r.figures["v1_0_publish_min_s"],
            "evolving publish / v1.0 publish (minimums)")
    r.emit(args)


if __name__ == "__main__":
    main()
