"""Benchmark 6: peak RSS of ``lakepub run`` vs batch size and vs history.

Every measurement is a child process (``lakepub -w WS run orders_daily --max-batch B`` through
the CLI's click entry point) on a fresh workspace whose landing source links to a generated
3-year stream; its peak RSS is its own VmHWM, read at exit (``ru_maxrss`` of a child would
include this process's RSS, carried over fork+exec by Linux). Three series:

* batch size: the 1M-event stream with ``--max-batch`` 10k ... 1M (memory should follow it);
* history: streams of 250k, 500k and 1M events at ``--max-batch 100000`` (it should not follow);
* within one run: a child that runs ``Workspace.run`` and reads its own VmHWM after every batch
  (peak after the first batch vs after the last one, when the ledger holds the whole history).

Baselines in the same run: a child that only imports lakepub, DuckDB, pyiceberg and pyarrow, and
the seed protocol (``scripts/baselines/seed_sqlite``) over the same 1M-event stream.

    python scripts/bench/memory.py [--quick] [--json PATH]
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import common as c

# Peak RSS is read by the child itself (VmHWM at exit, written to a file): ru_maxrss from wait4
# would include the benchmark's own RSS, which Linux carries over a fork+exec into the child.
PREAMBLE = r"""
import atexit, os, sys
def _lakepub_bench_hwm():
    for line in open('/proc/self/status'):
        if line.startswith('VmHWM:'):
            with open(os.environ['LAKEPUB_BENCH_HWM'], 'w') as fh:
                fh.write(line.split()[1])
atexit.register(_lakepub_bench_hwm)
"""
IMPORTS = "import lakepub.cli, lakepub.workspace, duckdb, pyarrow, pyiceberg.catalog.sql"
CLI = "sys.argv = ['lakepub', *sys.argv[1:]]\nfrom lakepub.cli import main\nmain()"

TRACE = r"""
import json
from lakepub.workspace import Workspace
def hwm():
    for line in open('/proc/self/status'):
        if line.startswith('VmHWM:'):
            return int(line.split()[1]) * 1024
ws = Workspace.open(sys.argv[1])
out = []
ws.run('orders_daily', max_batch=int(sys.argv[2]), on_batch=lambda r, pending: out.append(hwm()))
print(json.dumps(out))
"""


def child(code: str, *args: str) -> tuple[int, float, str]:
    """Run ``python -c code args``; return (its peak RSS in bytes, seconds, stdout)."""
    with tempfile.TemporaryDirectory() as tmp:
        hwm = Path(tmp) / "hwm"
        argv = [sys.executable, "-c", PREAMBLE + code, *args]
        t0 = time.perf_counter()
        proc = subprocess.run(argv, capture_output=True, text=True, env={**os.environ, "LAKEPUB_BENCH_HWM": str(hwm)})
        seconds = time.perf_counter() - t0
        if proc.returncode != 0:
            raise SystemExit(f"{' '.join(argv[3:])} exited {proc.returncode}: {proc.stderr.strip()[-2000:]}")
        return int(hwm.read_text()) * 1024, seconds, proc.stdout


def lakepub_run(work: Path, name: str, stream_dir: Path, batch: int) -> tuple[int, float]:
    ws = c.workspace(work / name, stream_dir)
    rss, seconds, _ = child(CLI, "-w", str(ws.config.root), "run", c.DATASET, "--max-batch", str(batch),
                            "--format", "json")
    return rss, seconds


def main() -> None:
    p = c.parser(__doc__.splitlines()[0])
    p.add_argument("--events", type=int, help="stream size (default 1,000,000; --quick 10,000)")
    p.add_argument("--batches", help="batch sizes (default 10000,50000,100000,250000,1000000; --quick 2500,10000)")
    p.add_argument("--history", help="stream sizes at the fixed batch (100,000; --quick 2,500) "
                                     "(default 250000,500000,1000000; --quick 2500,10000)")
    p.add_argument("--skip-seed", action="store_true", help="do not measure the seed baseline's RSS")
    args = p.parse_args()
    events = args.events or (10_000 if args.quick else 1_000_000)
    batches = [int(x) for x in (args.batches or ("2500,10000" if args.quick else
                                                 "10000,50000,100000,250000,1000000")).split(",")]
    histories = [int(x) for x in (args.history or ("2500,10000" if args.quick else "250000,500000,1000000")).split(",")]
    fixed = 2_500 if args.quick else 100_000
    r = c.Report("memory", "peak RSS of lakepub run vs batch size and history (child processes)", args.quick,
                 params={"events": events, "batches": ",".join(map(str, batches)),
                         "history": ",".join(map(str, histories)), "fixed_batch": fixed})
    with c.scratch(args, "memory") as work:
        stream_dir, _ = c.stream(args, work, events)
        base_rss, _, _ = child(IMPORTS)

        by_batch = {}
        for b in batches:
            c.log(f"lakepub run --max-batch {b:,} over {events:,} events ...")
            by_batch[b] = lakepub_run(work, f"ws-b{b}", stream_dir, b)
        by_history = {}
        for n in histories:
            sd = stream_dir if n == events else c.stream(args, work, n)[0]
            if n == events and fixed in by_batch:
                by_history[n] = by_batch[fixed]
                continue
            c.log(f"lakepub run --max-batch {fixed:,} over {n:,} events ...")
            by_history[n] = lakepub_run(work, f"ws-h{n}", sd, fixed)

        c.log("per-batch VmHWM trace ...")
        ws = c.workspace(work / "ws-trace", stream_dir)
        _, _, out = child(TRACE, str(ws.config.root), str(fixed))
        trace = json.loads(out.strip().splitlines()[-1])

        seed_rss = None
        if not args.skip_seed:
            c.log("seed baseline ...")
            code = (f"sys.path.insert(0, {str(c.BASELINES)!r})\nimport seed_sqlite\n"
                    f"seed_sqlite.run_seed_baseline({str(stream_dir)!r}, {str(work / 'seed.db')!r}, {fixed})")
            seed_rss, _, _ = child(code)

    mb = c.mib
    r.section("baselines")
    r.figure("import_only_rss_mib", mb(base_rss), "python importing lakepub+duckdb+pyiceberg+pyarrow", "MiB")
    if seed_rss is not None:
        r.figure("seed_rss_mib", mb(seed_rss), f"seed protocol over {events:,} events, batch {fixed:,}", "MiB")
    r.section(f"peak RSS vs batch size ({events:,} events)")
    for b, (rss, seconds) in by_batch.items():
        r.figure(f"rss_mib_batch_{b}", mb(rss), f"lakepub run --max-batch {b:,}", "MiB",
                 f"{seconds:.1f} s, {events / seconds:,.0f} events/s incl. process start")
    small, large = batches[0], batches[-1]
    r.ratio("rss_ratio_batch", by_batch[large][0], by_batch[small][0], f"RSS batch {large:,} / batch {small:,}")
    r.section(f"peak RSS vs history (--max-batch {fixed:,})")
    for n, (rss, seconds) in by_history.items():
        r.figure(f"rss_mib_history_{n}", mb(rss), f"lakepub run over {n:,} events", "MiB", f"{seconds:.1f} s")
    lo, hi = histories[0], histories[-1]
    growth = r.ratio("rss_ratio_history", by_history[hi][0], by_history[lo][0],
                     f"RSS {hi:,} / {lo:,} events ({hi / lo:g}x history)")
    r.section(f"within one run over {events:,} events (--max-batch {fixed:,}): VmHWM after each batch")
    r.figure("hwm_first_batch_mib", mb(trace[0]), "peak after the first batch", "MiB")
    r.figure("hwm_last_batch_mib", mb(trace[-1]), f"peak after the last batch ({len(trace)})", "MiB")
    r.figures["hwm_trace_mib"] = [round(mb(x), 1) for x in trace]
    r.lines.append("  trace (MiB): " + " ".join(f"{mb(x):.0f}" for x in trace))
    r.target(f"RSS growth for {hi / lo:g}x history <= 1.25x (bounded by batch)", growth, "<=", 1.25)
    if seed_rss is not None:
        r.ratio("rss_ratio_vs_seed", by_history[events][0] if events in by_history else by_batch[fixed][0],
                seed_rss, f"lakepub / seed protocol RSS (batch {fixed:,})")
    r.emit(args)


if __name__ == "__main__":
    main()
