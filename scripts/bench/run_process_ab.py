"""Two lakepub checkouts, same stream: one ``lakepub run`` process each, start to exit, interleaved.

Benchmark 1 (issue 10) times ``lakepub -w WS run orders_daily --max-batch N`` as a user runs it:
Python start, imports, the run, exit. On a shared 2-core machine one process of each checkout is
noise, so this alternates ``before, after, before, after, ...`` (``--pairs``, default 5) over the
same generated stream (``--stream advance|drift``), each process in a fresh workspace initialised
by *its own* checkout, and reports per process wall seconds and CPU seconds (user + system of the
child, all its threads: what the load moves least), their medians and the after/before ratios.
The published tables of both checkouts are checked equal.

``--in-process``: each child imports lakepub first and times only ``Workspace.run`` (wall, CPU of
all its threads, and CPU of the main thread, which runs the publish while pools write files and
read ahead): for a change to the run itself, whose effect the ~1 s of imports would blur.

    git archive <commit> | tar -x -C /tmp/before
    python scripts/bench/run_process_ab.py --before /tmp/before [--stream drift] [--pairs 5] [--cache DIR]
    python scripts/bench/run_process_ab.py --before . --before-env LAKEPUB_PREFETCH=0   # prefetch off vs on
    python scripts/bench/run_process_ab.py --before /tmp/before --in-process   # the run only, imports excluded

Not part of ``run_all.py``: it needs a second checkout.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import common as c

HERE = Path(__file__).resolve().parents[2]


def _env(root: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    return {**os.environ, **(extra or {}), "PYTHONPATH": str(root)}


def _init(root: Path, folder: Path, stream_dir: Path) -> None:
    code = ("import sys, pathlib; sys.path[:0] = [sys.argv[1], sys.argv[1] + '/scripts/bench']; import common as c; "
            "c.workspace(pathlib.Path(sys.argv[2]), pathlib.Path(sys.argv[3]))")
    subprocess.run([sys.executable, "-c", code, str(root), str(folder), str(stream_dir)], check=True,
                   env=_env(root), capture_output=True)


def _summary(root: Path, folder: Path) -> str:
    code = ("import sys; sys.path[:0] = [sys.argv[1]]; from lakepub.workspace import Workspace; "
            "t = Workspace.open(sys.argv[2]).query('SELECT day, cents, orders FROM orders_daily ORDER BY day'); "
            "import hashlib; print(hashlib.sha256(repr([t.column(i).to_pylist() for i in range(3)]).encode()).hexdigest())")
    return subprocess.run([sys.executable, "-c", code, str(root), str(folder)], check=True, env=_env(root),
                          capture_output=True, text=True).stdout.strip()


# --in-process: the child times Workspace.run only; prints wall, CPU (all threads), main-thread CPU, events.
_IN_PROCESS = ("import sys, time; sys.path[:0] = [sys.argv[1]]; from lakepub.workspace import Workspace; "
               "ws = Workspace.open(sys.argv[2]); t, c, m = time.perf_counter(), time.process_time(), time.thread_time(); "
               "r = ws.run(sys.argv[3], max_batch=int(sys.argv[4])); "
               "print(time.perf_counter() - t, time.process_time() - c, time.thread_time() - m, "
               "r.events)")


def _run_in_process(root: Path, folder: Path, max_batch: int, extra: dict[str, str]) -> tuple[float, float, float, int]:
    proc = subprocess.run([sys.executable, "-c", _IN_PROCESS, str(root), str(folder), c.DATASET, str(max_batch)],
                          capture_output=True, text=True, env=_env(root, extra))
    if proc.returncode != 0:
        raise SystemExit(f"{root}: exited {proc.returncode}\n{proc.stderr[-3000:]}")
    wall, cpu, main, events = proc.stdout.split()
    return float(wall), float(cpu), float(main), int(events)


def _run(root: Path, folder: Path, max_batch: int, extra: dict[str, str]) -> tuple[float, float, None, int]:
    argv = [sys.executable, "-m", "lakepub.cli", "-w", str(folder), "run", c.DATASET, "--max-batch", str(max_batch),
            "--format", "json"]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, env=_env(root, extra))
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"{root}: exited {proc.returncode}\n{proc.stderr[-3000:]}")
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    return wall, cpu, None, json.loads(proc.stdout)["events"]


def main() -> None:
    p = c.parser(__doc__.splitlines()[0])
    p.add_argument("--before", type=Path, required=True, help="the other checkout (a folder holding lakepub/)")
    p.add_argument("--stream", choices=("advance", "drift"), default="drift")
    p.add_argument("--pairs", type=int, default=5)
    p.add_argument("--events", type=int, default=1_000_000)
    p.add_argument("--max-batch", type=int, default=100_000)
    p.add_argument("--before-env", action="append", default=[], metavar="KEY=VALUE",
                   help="environment of the 'before' runs (with --before . : LAKEPUB_PREFETCH=0 compares the "
                        "landing prefetch on and off in this checkout)")
    p.add_argument("--in-process", action="store_true",
                   help="time Workspace.run inside each child, imports excluded (adds main-thread CPU)")
    args = p.parse_args()
    run = _run_in_process if args.in_process else _run
    roots = {"before": args.before.resolve(), "after": HERE}
    extra = {"before": dict(kv.split("=", 1) for kv in args.before_env), "after": {}}
    with c.scratch(args, "run-ab") as work:
        if args.stream == "drift":
            stream_dir, _ = c.stream(args, work, args.events, partitions=1, spread=True,
                                     segment_size=max(1, -(-args.events // 4)))
        else:
            stream_dir, _ = c.stream(args, work, args.events)
        res: dict[str, list[tuple[float, ...]]] = {"before": [], "after": []}
        sums = {}
        for i in range(args.pairs):
            for name, root in roots.items():
                folder = work / f"ws-{name}-{i}"
                _init(root, folder, stream_dir)
                wall, cpu, main, events = run(root, folder, args.max_batch, extra[name])
                assert events == args.events, (events, args.events)
                res[name].append((wall, cpu, main) if args.in_process else (wall, cpu))
                if i == 0:
                    sums[name] = _summary(root, folder)
                c.log(f"pair {i + 1} {name}: wall {wall:.3f} s, CPU {cpu:.3f} s"
                      + (f", main thread {main:.3f} s" if args.in_process else "") + f", load {os.getloadavg()[0]:.1f}")
        assert sums["before"] == sums["after"], "the two checkouts published different tables"
        out = {}
        keys = ("wall", "cpu", "main") if args.in_process else ("wall", "cpu")
        for name, rows in res.items():
            out[name] = {key: c.median([row[k] for row in rows]) for k, key in enumerate(keys)}
            print(f"{name:6s} median " + "  ".join(f"{key} {out[name][key]:.3f} s" for key in keys) + "  "
                  + "  ".join(f"{key}s {' '.join(f'{row[k]:.2f}' for row in rows)}" for k, key in enumerate(keys)))
        print("after/before: " + ", ".join(f"{key} {out['after'][key] / out['before'][key]:.3f}" for key in keys)
              + f"; load now {os.getloadavg()}")
        if args.json:
            Path(args.json).write_text(json.dumps({"stream": args.stream, "results": res, "medians": out}))


if __name__ == "__main__":
    main()
