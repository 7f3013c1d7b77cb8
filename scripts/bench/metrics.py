"""Micro-benchmark of ``lakepub metrics`` (not part of run_all): what gathering and rendering the
metrics costs next to ``lakepub status`` of the same datasets, which reads the same snapshot.

    python scripts/bench/metrics.py [--events N] [--repeat N]

One workspace (the generated order stream: corrections, duplicates, deletes, 2 landing
partitions), published in batches of 10,000, with a tenth of the stream left unpublished in the
landing folder. Interleaved series in one process after a warm-up (DuckDB's extensions loaded,
the catalog open): ``render(gather(ws))`` and ``status`` of every dataset; medians and their
ratio are printed from the same run.
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
from lakepub.ops.metrics import gather, render  # noqa: E402
from lakepub.workspace import Workspace  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=15)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "ws"
        init_workspace(root)
        landing = root / "landing" / "orders"
        generate_stream(landing, events=args.events, partitions=2, days=90, seed=7, segment_size=5_000)
        ws = Workspace.open(root)
        last = {p.name: max(p.glob("*.jsonl")) for p in landing.iterdir()}
        held = {name: seg.rename(seg.with_suffix(".held")) for name, seg in last.items()}
        ws.run("orders_daily", max_batch=10_000)
        for held_path in held.values():  # the newest segments land after the run: a backlog
            held_path.rename(held_path.with_suffix(".jsonl"))
        names = sorted(ws.config.datasets)
        render(gather(ws))
        [reports.status(ws, n) for n in names]
        series: dict[str, list[float]] = {"metrics": [], "status": []}
        for _ in range(args.repeat):
            start = time.perf_counter()
            text = render(gather(ws))
            series["metrics"].append(time.perf_counter() - start)
            start = time.perf_counter()
            [reports.status(ws, n) for n in names]
            series["status"].append(time.perf_counter() - start)
        m, s = (statistics.median(series[k]) for k in ("metrics", "status"))
        lag = sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith("lakepub_lag_records"))
        print(f"{args.events} events, {len(names)} dataset(s), {int(lag)} records of backlog, {args.repeat} runs:")
        print(f"  metrics (gather + render) {m * 1000:7.1f} ms")
        print(f"  status                    {s * 1000:7.1f} ms")
        print(f"  ratio metrics / status    {m / s:7.2f}x   (+{(m - s) * 1000:.1f} ms)")


if __name__ == "__main__":
    main()
