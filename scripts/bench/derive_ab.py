"""Two lakepub checkouts, the derive benchmark's full build, offline rebuild and DuckDB COPY, interleaved.

``derive.py`` measures one checkout; a change to the derive path is judged against the code
before it, and on a shared 2-core machine only runs made alternately say anything. This builds
one workspace (``facts``: ROWS live entities over 365 days, published once by this checkout),
then runs a fresh process per checkout, alternating (``before, after, before, after, ...``): each
does a warm-up build and COPY, then ``--rounds`` rounds of (full build of the 365-partition daily
rollup with the output table dropped and the input's labels forgotten, offline rebuild after a
definition change, DuckDB ``COPY ... PARTITION_BY``), and reports medians of wall and CPU seconds
(``time.process_time``: every thread of the process, DuckDB's included). Printed per process and
as medians over the processes, with the ratios to COPY measured in the same process.

    git archive <commit> | tar -x -C /tmp/before
    python scripts/bench/derive_ab.py --before /tmp/before [--rows 1000000] [--pairs 3] [--rounds 3]

Not part of ``run_all.py``: it needs a second checkout.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import common as c

_CHILD = r"""
import json, shutil, statistics, sys, time
from pathlib import Path
checkout, root, rounds = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3])
sys.path[:0] = [checkout, checkout + "/scripts/bench"]
import yaml
import derive as d
from lakepub.derive.reconcile import reconcile
from lakepub.store.layout import summary_id
from lakepub.workspace import Workspace

datasets = root / "catalog" / "datasets"
runs = {}

def drop_with_folder(ws, name):  # derive.drop_with_folder, here: "before" checkouts may predate it
    ident = summary_id(ws.config.namespace, name)
    try:
        location = ws.catalog.load_table(ident).location()
    except Exception:
        return
    ws.catalog.drop_table(ident)
    shutil.rmtree(location.removeprefix("file://"), ignore_errors=True)

def timed(key, fn):
    t, cpu = time.perf_counter(), time.process_time()
    fn()
    runs.setdefault(key, []).append(time.perf_counter() - t)
    runs.setdefault(key + "_cpu", []).append(time.process_time() - cpu)

def build(key="build"):
    try:
        from lakepub.derive import labels
        labels.clear_memo()
    except ImportError:  # a checkout before derive/labels.py
        pass
    shutil.rmtree(root / ".lakepub" / "labels", ignore_errors=True)
    with Workspace.open(root) as ws:
        drop_with_folder(ws, "facts_daily")  # and its folder: a build starts from nothing, like COPY
        timed(key, lambda: reconcile(ws, ["facts_daily"]))

def rebuild(k):
    query = d.QUERY.replace("count(*) AS n", f"count(*) + {k} AS n")
    (datasets / "facts_daily.yaml").write_text(yaml.safe_dump({**d.DAILY, "projection": {**d.DAILY["projection"], "query": query}}))
    try:
        with Workspace.open(root) as ws:
            timed("rebuild", lambda: reconcile(ws, ["facts_daily"]))
    finally:
        (datasets / "facts_daily.yaml").write_text(yaml.safe_dump(d.DAILY))

def copy(key="copy"):
    with Workspace.open(root) as ws:
        con = ws.connect()
        out = root.parent / "copy"
        shutil.rmtree(out, ignore_errors=True)
        timed(key, lambda: con.execute(f"COPY ({d.QUERY}) TO '{out}' (FORMAT parquet, PARTITION_BY (day))"))
        con.close()

build("warmup"); copy("warmup_copy")
for i in range(rounds):
    build(); rebuild(i + 1); copy()
print(json.dumps({k: statistics.median(v) for k, v in runs.items() if not k.startswith("warmup")}))
"""


def main() -> None:
    p = c.parser(__doc__.splitlines()[0])
    p.add_argument("--before", type=Path, required=True, help="the other checkout (e.g. git archive of the base commit)")
    p.add_argument("--rows", type=int, default=1_000_000, help="live entities of facts (default 1,000,000)")
    p.add_argument("--pairs", type=int, default=3, help="processes per checkout, alternating")
    p.add_argument("--rounds", type=int, default=3, help="rounds per process (medians)")
    args = p.parse_args()
    import pyarrow as pa
    import yaml

    import derive as d
    from lakepub.init import init_workspace
    from lakepub.workspace import Workspace

    checkouts = {"before": str(args.before.resolve()), "after": str(c.REPO)}
    with c.scratch(args, "derive_ab") as tmp:
        root = Path(tmp) / "ws"
        init_workspace(root)
        (root / "catalog" / "contracts" / "facts@v1.0.yaml").write_text(d.CONTRACT)
        (root / "catalog" / "datasets" / "facts.yaml").write_text(yaml.safe_dump(d.FACTS))
        (root / "catalog" / "datasets" / "facts_daily.yaml").write_text(yaml.safe_dump(d.DAILY))
        n = args.rows
        events = pa.table({"id": pa.array(range(n), pa.int64()), "version": pa.array([1] * n, pa.int64()),
                           "day": pa.array([19723 + i % 365 for i in range(n)], pa.int32()).cast(pa.date32()),
                           "amount": pa.array([i % 1000 for i in range(n)], pa.int64()),
                           "deleted": pa.array([False] * n)})
        with Workspace.open(root) as ws:
            ws.publish("facts", events, start={"p0": 0}, end={"p0": n})
        results: dict[str, list[dict]] = {k: [] for k in checkouts}
        for pair in range(args.pairs):
            for name, checkout in checkouts.items():
                env = {**os.environ, "PYTHONPATH": checkout}
                out = subprocess.run([sys.executable, "-c", _CHILD, checkout, str(root), str(args.rounds)],
                                     capture_output=True, text=True, env=env, cwd=checkout)
                if out.returncode:
                    raise SystemExit(f"{name} failed:\n{out.stderr[-3000:]}")
                figures = json.loads(out.stdout.strip().splitlines()[-1])
                results[name].append(figures)
                print(f"pair {pair + 1} {name:6s} " + _line(figures) + f"  load {os.getloadavg()[0]:.1f}", flush=True)
        for name, figures in results.items():
            medians = {k: statistics.median(f[k] for f in figures) for k in figures[0]}
            print(f"median {name:6s} " + _line(medians))


def _line(f: dict) -> str:
    return (f"build {f['build']:.3f} s (CPU {f['build_cpu']:.3f}) rebuild {f['rebuild']:.3f} s (CPU {f['rebuild_cpu']:.3f}) "
            f"COPY {f['copy']:.3f} s (CPU {f['copy_cpu']:.3f}) -> build/COPY {f['build'] / f['copy']:.2f}x, "
            f"rebuild/COPY {f['rebuild'] / f['copy']:.2f}x")


if __name__ == "__main__":
    main()
