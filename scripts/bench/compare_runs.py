"""Two lakepub checkouts, same stream: CPU and wall time of `lakepub run`, interleaved, one process each.

A refactoring of the publish path must not slow the orders stream beyond noise, and on a shared
2-core machine one run of each is noise. This runs ``Workspace.run("orders_daily")`` over the same
generated stream in a fresh process per run, alternating between ``--before`` and this checkout
(``before, after, before, after, ...``, so drift hits both), and reports the median CPU time
(user + system of the child: what the code costs, whatever else the machine does) and wall time
of each, and their ratio per pair and overall.

    git archive <commit> | tar -x -C /tmp/before
    python scripts/bench/compare_runs.py --before /tmp/before [--pairs 5] [--events 1000000] [--cache DIR]

Not part of ``run_all.py``: it needs a second checkout.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import common as c

_CHILD = """
import json, resource, sys, tempfile, shutil, time
root, stream = sys.argv[1], sys.argv[2]
sys.path[:0] = [root, root + "/scripts/bench"]
import common as c
work = tempfile.mkdtemp(prefix="lakepub-compare-")
try:
    r0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    run = c.workspace(__import__("pathlib").Path(work) / "ws", __import__("pathlib").Path(stream)).run(
        "orders_daily", max_batch=int(sys.argv[3]))
    t1, r1 = time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF)
    print(json.dumps({"events": run.events, "wall": t1 - t0,
                      "cpu": r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime}))
finally:
    shutil.rmtree(work, ignore_errors=True)
"""


def _one(root: Path, stream: Path, max_batch: int) -> dict[str, float]:
    out = subprocess.run([sys.executable, "-c", _CHILD, str(root), str(stream), str(max_batch)],
                         capture_output=True, text=True, cwd="/", env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"})
    if out.returncode != 0:
        raise SystemExit(f"run with {root} failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    p = c.parser(__doc__.splitlines()[0])
    p.add_argument("--before", type=Path, required=True, help="the other checkout (e.g. a git archive)")
    p.add_argument("--pairs", type=int, default=5, help="before/after pairs (default 5; --quick 1)")
    p.add_argument("--events", type=int, help="stream size (default 1,000,000; --quick 30,000)")
    p.add_argument("--max-batch", type=int, default=100_000)
    args = p.parse_args()
    events = args.events or (30_000 if args.quick else 1_000_000)
    pairs = 1 if args.quick else args.pairs
    r = c.Report("compare_runs", "lakepub run, this checkout vs --before, interleaved fresh processes", args.quick,
                 params={"events": events, "pairs": pairs, "before": str(args.before), "max_batch": args.max_batch})
    with c.scratch(args, "compare_runs") as work:
        stream, _ = c.stream(args, work, events)
        runs: dict[str, list[dict[str, float]]] = {"before": [], "after": []}
        for i in range(pairs):
            for side, root in (("before", args.before.resolve()), ("after", c.REPO)):
                runs[side].append(_one(root, stream, args.max_batch))
                c.log(f"pair {i + 1}/{pairs} {side}: cpu {runs[side][-1]['cpu']:.2f} s, wall {runs[side][-1]['wall']:.2f} s")
    for what in ("cpu", "wall"):
        before = c.median([x[what] for x in runs["before"]])
        after = c.median([x[what] for x in runs["after"]])
        r.figure(f"{what}_before_s", before, f"median {what} s, --before")
        r.figure(f"{what}_after_s", after, f"median {what} s, this checkout")
        ratios = [a[what] / b[what] for a, b in zip(runs["after"], runs["before"])]
        r.figure(f"{what}_ratio", c.median(ratios), f"median of the per-pair {what} ratios (after / before)")
    r.emit(args)


if __name__ == "__main__":
    main()
