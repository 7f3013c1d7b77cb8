"""A/B: a new process's publish (cache warm) against the warm publish, two lakepub checkouts, interleaved.

Issue 16's target (``object_store.py``: a publish in a new process with the disk cache warm <=
1.3x the warm publish, S3 +30 ms, 10M orders) compared across checkouts on a shared machine. One
moto server (``s3_latency_server.py``) and one history (``--history`` orders, built once with
checkout B, batches of ``--build-batch``); then ``--pairs`` rounds, each one new process per
checkout, alternately (A, B, B, A, ...: neither always runs first). Each process publishes
``--publishes`` consecutive 100k-event batches into the same workspace: the first is the new
process's publish (timed, as in ``object_store.py``, from after importing ``lakepub.workspace``,
pyarrow and pyiceberg's SQL catalog and pyarrow FileIO, so Python's start and those imports are
outside it), the others are warm publishes of the same process (their median is its warm
figure). Per process: wall s and CPU s (``time.process_time``: all threads) of each; the
new/warm ratio within the process (same moment, same load); the medians over the pairs.

Both checkouts publish into one workspace in turn: each process's first publish finds the
catalog moved on by the other (as a new process always does), its later ones are warm. Every
4th publish merges key-index runs (2-3x slower: ``object_store.py``), so medians of several
pairs compare like with like; single pairs are printed.

    python scripts/bench/cold_publish_ab.py --a /tmp/main --b . [--history 10000000] [--pairs 6]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import numpy as np  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

import common as c  # noqa: E402
from history import History, build  # noqa: E402
from object_store import Server, make_workspace  # noqa: E402

# One process: ``count`` publishes of consecutive batches; per publish "wall cpu" on stdout.
_PROCESS = """
import sys, time
from lakepub.workspace import Workspace
import pyarrow, pyiceberg.catalog.sql, pyiceberg.io.pyarrow  # imported by any lakepub process before it publishes
root, batches, first, count, history, size = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:7])
ws = None
for i in range(first, first + count):
    t0, c0 = time.perf_counter(), time.process_time()
    ws = ws or Workspace.open(root)
    ws.publish("orders_daily", f"{batches}/b{i:04d}.parquet", start={"p0": history + i * size},
               end={"p0": history + (i + 1) * size})
    print(time.perf_counter() - t0, time.process_time() - c0, flush=True)
"""


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--a", required=True, help="checkout A (e.g. main, extracted with git archive)")
    p.add_argument("--b", required=True, help="checkout B (this worktree)")
    p.add_argument("--history", type=int, default=1_000_000)
    p.add_argument("--build-batch", type=int, default=1_000_000)
    p.add_argument("--batch", type=int, default=100_000)
    p.add_argument("--pairs", type=int, default=6)
    p.add_argument("--publishes", type=int, default=5, help="per process: the new one, then warm ones (median)")
    p.add_argument("--latency-ms", type=float, default=30.0)
    p.add_argument("--seed", type=int, default=7)
    args = p.parse_args()
    server = Server(args.latency_ms)
    work = Path(tempfile.mkdtemp(prefix="cold-ab-"))
    results: dict[str, list[tuple[float, float, float, float]]] = {"A": [], "B": []}
    try:
        os.environ["PYTHONPATH"] = str(Path(args.b).resolve())
        ws = make_workspace(work / "hist", server, prefix="cold-ab")
        hist = History(args.history)
        t0 = time.perf_counter()
        build(ws, hist, work, min(args.history, args.build_batch))
        ws.close()
        c.log(f"history {args.history:,} orders built in {time.perf_counter() - t0:.1f} s")
        batches = work / "batches"
        batches.mkdir()
        rng = np.random.default_rng(args.seed)
        for i in range(2 * args.pairs * args.publishes):
            pq.write_table(hist.batch(args.batch, rng), batches / f"b{i:04d}.parquet")
        first = 0
        for k in range(args.pairs):
            for label in ("AB" if k % 2 == 0 else "BA"):
                os.environ["PYTHONPATH"] = str(Path(args.a if label == "A" else args.b).resolve())
                argv = [sys.executable, "-c", _PROCESS, str(work / "hist"), str(batches), str(first),
                        str(args.publishes), str(args.history), str(args.batch)]
                out = subprocess.run(argv, cwd=work / "hist", capture_output=True, text=True, timeout=1800)
                if out.returncode:
                    raise SystemExit(f"{label} failed:\n{out.stderr[-3000:]}")
                first += args.publishes
                rows = [tuple(map(float, line.split())) for line in out.stdout.split("\n") if line.strip()]
                (new_s, new_cpu), warm = rows[0], rows[1:]
                warm_s, warm_cpu = _median([w[0] for w in warm]), _median([w[1] for w in warm])
                results[label].append((new_s, new_cpu, warm_s, warm_cpu))
                c.log(f"pair {k} {label}: new {new_s:.3f} s (CPU {new_cpu:.2f}), warm "
                      f"{' '.join(f'{w[0]:.3f}' for w in warm)} s (CPU {warm_cpu:.2f}): {new_s / warm_s:.2f}x, "
                      f"load {os.getloadavg()[0]:.1f}")
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)  # the history and batches (~1 GB at 10M orders)
    for label in ("A", "B"):
        rs = results[label]
        print(f"{label} ({args.a if label == 'A' else args.b}): new {_median([r[0] for r in rs]):.3f} s "
              f"(CPU {_median([r[1] for r in rs]):.2f}), warm {_median([r[2] for r in rs]):.3f} s "
              f"(CPU {_median([r[3] for r in rs]):.2f}); new/warm per process median "
              f"{_median([r[0] / r[2] for r in rs]):.2f}x (CPU {_median([r[1] / r[3] for r in rs]):.2f}x) "
              f"{[round(r[0] / r[2], 2) for r in rs]}")


def _median(xs: list[float]) -> float:
    return sorted(xs)[len(xs) // 2]


if __name__ == "__main__":
    main()
