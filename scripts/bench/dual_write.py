"""What publishing both versions of a contract in one commit (DUAL_WRITE) costs against one.

A customers entity with an aggregate (MRR per country and plan) and a current-state table
(bucket(16, customer_id)); ``--customers`` live customers landed and published under v1.0. Then
``--rounds`` batches of ``--batch`` updates, each landed as a segment and published by one
``Workspace.run`` in a fresh workspace object: first under v1.0 alone, then with v2.0 (``mrr_cents``
narrowed long -> int) in DUAL_WRITE, after its build beside the published one (timed once: the
whole landing published under v2.0 in its own commits), alternating runs with the v2.0 side
staged in its background thread (as shipped) and inline after the v1.0 side (``serial``). Minimums and medians in seconds; the ratio
dual / single is measured in the same run.

    python scripts/bench/dual_write.py [--quick] [--customers N] [--batch B] [--rounds R] [--json PATH]

``--quick`` (CI): 5,000 customers, batches of 200, 2 rounds.
"""

from __future__ import annotations

import json
import random
import statistics
import time
from pathlib import Path

import yaml

import common as c  # puts the checkout first on sys.path

from lakepub.publish import dual  # noqa: E402
from lakepub.workspace import Workspace  # noqa: E402

BACKGROUND = dual._BACKGROUND


class _Inline:
    def submit(self, fn, *args):
        from concurrent.futures import Future

        done: Future = Future()
        try:
            done.set_result(fn(*args))
        except Exception as exc:  # noqa: BLE001
            done.set_exception(exc)
        return done

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
  deleted: boolean
"""
V2 = (CONTRACT.replace('version: "1.0"', 'version: "2.0"').replace("mrr_cents: long", "mrr_cents: int")
      + "compat_mode: break\nshadow: {enabled: true}\nstatus: DUAL_WRITE\n")
DATASETS = [
    {"name": "customers_mrr", "source": "customers", "entity": "customers", "contract": "contracts/customers@v1.0",
     "projection": {"kind": "aggregate", "group_by": ["country", "plan"],
                    "measures": {"mrr_cents": "sum(mrr_cents)", "customers": "count()"}}},
    {"name": "customers_all", "source": "customers", "entity": "customers", "contract": "contracts/customers@v1.0",
     "projection": {"kind": "current"}, "partition": "bucket(16, customer_id)"},
]


def _land(folder: Path, name: str, ids, version: int, r: random.Random) -> None:
    lines = [json.dumps({"customer_id": f"c{i:08d}", "version": version, "country": r.choice(["FR", "DE", "US", None]),
                         "plan": r.choice(["basic", "pro"]), "mrr_cents": r.randrange(10_000), "deleted": False})
             for i in ids]
    (folder / name).write_text("\n".join(lines) + "\n")


def _run(root: Path) -> float:
    began = time.perf_counter()
    with Workspace.open(root) as ws:  # cold, like one `lakepub run`
        ws.run("customers_all")
    return time.perf_counter() - began


def one(folder: Path, customers: int, batch: int, rounds: int) -> dict[str, list[float]]:
    r = random.Random(7)
    root = folder / "ws"
    Workspace.init(root)
    (root / "catalog" / "datasets" / "orders_daily.yaml").unlink()
    (root / "catalog" / "contracts" / "customers@v1.0.yaml").write_text(CONTRACT)
    for d in DATASETS:
        (root / "catalog" / "datasets" / f"{d['name']}.yaml").write_text(yaml.safe_dump(d, sort_keys=False))
    landing = root / "landing" / "customers" / "p0"
    landing.mkdir(parents=True)
    _land(landing, "0000.jsonl", range(customers), 1, r)
    _run(root)
    out: dict[str, list[float]] = {"single": [], "build": [], "dual": [], "serial": []}
    seg = 1
    plan = ([(2 + i, "single") for i in range(rounds)] + [(None, "build")]
            + [(2 + rounds + i, k) for i in range(rounds) for k in ("dual", "serial")])
    for version, key in plan:
        if key == "build":
            (root / "catalog" / "contracts" / "customers@v2.0.yaml").write_text(V2)
        else:
            _land(landing, f"{seg:04d}.jsonl", r.sample(range(customers), batch), version + seg, r)
            seg += 1
        # "serial": the partner's side staged inline after the old version's (the background
        # thread replaced by a synchronous executor), to measure what the overlap saves.
        dual._BACKGROUND = _Inline() if key == "serial" else BACKGROUND
        out[key].append(_run(root))
    dual._BACKGROUND = BACKGROUND
    with Workspace.open(root) as ws:  # the dual write happened: both versions hold the same live rows
        n = [ws.catalog.load_table(("lakepub", t)).scan().to_arrow().num_rows for t in ("customers_all", "customers_all__v2")]
        assert n[0] == n[1] == customers, n
    return out


def main() -> None:
    parser = c.parser(__doc__.splitlines()[0])
    parser.add_argument("--customers", type=int, help="live customers (default 100,000; --quick 5,000)")
    parser.add_argument("--batch", type=int, help="updates per timed publish (default 1000; --quick 200)")
    parser.add_argument("--rounds", type=int, help="timed publishes of each kind (default 5; --quick 2)")
    args = parser.parse_args()
    args.customers = args.customers or (5_000 if args.quick else 100_000)
    args.batch = args.batch or (200 if args.quick else 1000)
    args.rounds = args.rounds or (2 if args.quick else 5)
    r = c.Report("dual_write", "a DUAL_WRITE publish (both versions, one commit) vs a single-version publish",
                 args.quick, params={"customers": args.customers, "batch": args.batch, "rounds": args.rounds})
    with c.scratch(args, "dual_write") as tmp:
        runs = one(Path(tmp), args.customers, args.batch, args.rounds)
    r.section(f"{args.customers:,} live customers, batches of {args.batch:,} updates, one `run` each: minimum (median)")
    for key, label in (("single", "v1.0 alone"), ("dual", "v1.0 + v2.0 in one commit"),
                       ("serial", "same, the v2.0 side staged serially"),
                       ("build", "build beside (whole landing under v2.0)")):
        r.figure(f"{key}_min_s", min(runs[key]), label, "s", f"median {statistics.median(runs[key]):.3f} s")
    r.ratio("dual_vs_single", r.figures["dual_min_s"], r.figures["single_min_s"], "dual-write run / single run (minimums)")
    r.ratio("dual_vs_serial", r.figures["dual_min_s"], r.figures["serial_min_s"],
            "dual-write run / same with serial staging (minimums)")
    r.emit(args)


if __name__ == "__main__":
    main()
