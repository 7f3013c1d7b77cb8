"""Micro-benchmark of ``lakepub state`` / ``wait``'s poll, ``retire``/``restore`` and what the
retirement check adds to ``run`` (run_all runs it in --quick or --all).

    python scripts/bench/lifecycle.py [--quick] [--events N] [--batch N] [--repeat N] [--json PATH]

One workspace (the generated order stream), published in batches of ``--batch`` events (so the
table holds many snapshots for ``state`` to walk). In one process after a warm-up: ``state``
(one wait poll), ``status`` of the same dataset (for scale), the catalog load that ``run``'s
retirement check costs, and a retire + restore pair (two catalog commits). Medians of one run.
``--quick`` (CI): 5,000 events in batches of 500, 3 repeats.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

import common as c  # puts the checkout first on sys.path

from lakepub import reports  # noqa: E402
from lakepub.generate import generate_stream  # noqa: E402
from lakepub.init import init_workspace  # noqa: E402
from lakepub.workspace import Workspace  # noqa: E402


def _median(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    ap = c.parser(__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, help="events (default 50,000; --quick 5,000)")
    ap.add_argument("--batch", type=int, help="events per publish (default 1,000; --quick 500)")
    ap.add_argument("--repeat", type=int, help="timed runs of each step (default 15; --quick 3)")
    args = ap.parse_args()
    args.events = args.events or (5_000 if args.quick else 50_000)
    args.batch = args.batch or (500 if args.quick else 1_000)
    args.repeat = args.repeat or (3 if args.quick else 15)
    r = c.Report("lifecycle", "state (wait poll), status, run's retirement check, retire + restore", args.quick,
                 params={"events": args.events, "batch": args.batch, "repeat": args.repeat})
    with c.scratch(args, "lifecycle") as tmp:
        root = Path(tmp) / "ws"
        init_workspace(root)
        generate_stream(root / "landing" / "orders", events=args.events, partitions=2, days=90, seed=args.seed,
                        segment_size=5_000)
        ws = Workspace.open(root)
        ws.run("orders_daily", max_batch=args.batch)
        table = ws.catalog.load_table("lakepub.orders_daily")
        snapshots = len(table.metadata.snapshots)
        found = ws.state("orders_daily")
        reports.status(ws, "orders_daily")

        def retire_restore() -> None:
            ws.retire("orders_daily", grace="7d")
            ws.restore("orders_daily")

        state = _median(lambda: ws.state("orders_daily"), args.repeat)
        status = _median(lambda: reports.status(ws, "orders_daily"), args.repeat)
        check = _median(lambda: ws._summary_table("orders_daily"), args.repeat)  # noqa: SLF001
        pair = _median(retire_restore, max(3, args.repeat // 3))
        ws.close()
    r.section(f"{args.events:,} events in batches of {args.batch:,}: {snapshots} snapshots, "
              f"{len(found.partitions)} partitions, medians of {args.repeat} runs")
    r.figures.update({"snapshots": snapshots, "partitions": len(found.partitions)})
    r.figure("state_ms", state * 1000, "state (one wait poll)", "ms")
    r.figure("status_ms", status * 1000, "status (for scale)", "ms")
    r.figure("retirement_check_ms", check * 1000, "run's retirement check", "ms", "one catalog load")
    r.figure("retire_restore_ms", pair * 1000, "retire + restore", "ms", "two catalog commits")
    r.emit(args)


if __name__ == "__main__":
    main()
