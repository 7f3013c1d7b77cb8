"""Micro-benchmark of observed-consumer recording (not part of run_all): what recording the
columns a query reads adds to ``Workspace.query``.

    python scripts/bench/consumers.py [--queries N]

Three interleaved series over one small published workspace, each query timed alone: recording
off (``observe_connection`` replaced by a no-op), recording on with one repeated SQL text (parse
cached, write throttled: the steady state of a dashboard), and recording on with a new SQL text
every call (a parse, a qualify and a SQLite upsert each time: the worst case). Medians and the
ratios to "off" are printed from the same run.
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

from lakepub.contract import consumers  # noqa: E402
from lakepub.init import init_workspace  # noqa: E402
from lakepub.workspace import Workspace  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--queries", type=int, default=60)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "ws"
        init_workspace(root)
        ws = Workspace.open(root)
        events = [{"order_id": f"o{i}", "version": 1, "day": f"2025-01-{i % 28 + 1:02d}", "cents": i, "deleted": False}
                  for i in range(1000)]
        ws.publish("orders_daily", events, start={}, end={"p0": len(events)})
        real = consumers.observe_connection
        off = lambda *a, **k: None  # noqa: E731
        ws.query("SELECT 1")
        times: dict[str, list[float]] = {"off": [], "repeated": [], "distinct": []}
        for i in range(args.queries):
            for series in times:
                consumers.observe_connection = off if series == "off" else real
                limit = 1000 + i if series == "distinct" else 1000
                sql = f"SELECT day, sum(cents) AS c FROM orders_daily GROUP BY day ORDER BY day LIMIT {limit}"
                start = time.perf_counter()
                ws.query(sql)
                times[series].append(time.perf_counter() - start)
        consumers.observe_connection = real
        base = statistics.median(times["off"])
        print(f"Workspace.query over {args.queries} queries per series (median):")
        for series, values in times.items():
            med = statistics.median(values)
            print(f"  {series:9s} {med * 1000:7.2f} ms   ratio to off {med / base:5.2f}x   (+{(med - base) * 1000:.2f} ms)")


if __name__ == "__main__":
    main()
