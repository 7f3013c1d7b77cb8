"""Micro-benchmark of ``lakepub state`` / ``wait``'s poll, ``retire``/``restore`` and what the
retirement check adds to ``run`` (not part of run_all).

    python scripts/bench/lifecycle.py [--events N] [--batch N] [--repeat N]

One workspace (the generated order stream), published in batches of ``--batch`` events (so the
table holds many snapshots for ``state`` to walk). In one process after a warm-up: ``state``
(one wait poll), ``status`` of the same dataset (for scale), the catalog load that ``run``'s
retirement check costs, and a retire + restore pair (two catalog commits). Medians of one run.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

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
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=50_000)
    ap.add_argument("--batch", type=int, default=1_000)
    ap.add_argument("--repeat", type=int, default=15)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "ws"
        init_workspace(root)
        generate_stream(root / "landing" / "orders", events=args.events, partitions=2, days=90, seed=7,
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
        print(f"{args.events} events in batches of {args.batch}: {snapshots} snapshots, "
              f"{len(found.partitions)} partitions, {args.repeat} runs:")
        print(f"  state (one wait poll)        {state * 1000:7.1f} ms")
        print(f"  status (for scale)           {status * 1000:7.1f} ms")
        print(f"  run's retirement check       {check * 1000:7.1f} ms  (one catalog load)")
        print(f"  retire + restore             {pair * 1000:7.1f} ms  (two catalog commits)")


if __name__ == "__main__":
    main()
