"""Where a new process's publish spends more than a long-warm process's (issue 16): by function, by thread.

One history (``--history`` orders, built in this process with batches of ``--build-batch``, and
``--pool`` 100k-event batches made with it; a local warehouse unless ``--s3``, then on a moto
server adding ``--latency-ms`` per request), kept under ``--work`` for the next invocation (a
local one only: the S3 server's bucket ends with the run). Then ``--rounds`` rounds, each: one
publish by this process (warm for minutes: it built the history, as ``object_store.py``'s warm
figure), then one new process publishing ``--publishes`` consecutive batches: its first publish
is the new process's (timed from after the imports ``object_store.py`` leaves outside its
clock), the others are that process's own warm ones. With ``--other <checkout>`` each round
also runs a new process of that checkout (the two alternately first): an A/B against the same
long-warm publishes.

Per publish: wall, CPU of all threads, system CPU and minor faults (``getrusage``), and CPU per
thread group (``/proc/self/task``, by Python thread name; "(ended)" is the process CPU no live
thread accounts for: threads gone by then and the ticks' rounding, a rough figure). With
``--profile`` pyinstrument samples the main thread (1 ms) and the report lists, per function
(cumulative main-thread seconds), where the new process's first publish spent more than the
long-warm one: issue 16's phase table. With ``--perf <dir>`` a ``perf record -g`` of one publish
of each new process (``--perf-at``: 0 its first, 2 a warm one of the same process), started and
stopped around it through perf's control fifo, native stacks of every thread (the kernel's page
zeroing, mimalloc, Arrow's S3 stream); ``tids.json`` names the Python threads by native id.

A 1+4 round is 5 publishes: every 4th publish merges key-index runs, so the merge falls on each
slot in turn and the medians of ``--rounds`` (>= 5) compare publishes that did not merge.

    python scripts/bench/cold_phases.py --work /dev/shm/cp1m --history 1000000 [--rounds 5] [--profile]
        [--s3] [--other <checkout>] [--perf <dir> [--perf-at 2]]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import numpy as np  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

import common as c  # noqa: E402
from history import History, build  # noqa: E402

_CHILD = r"""
import json, os, sys, threading, time
ENDED = {}  # Python threads that end: name -> CPU s (a head start's, a per-publish pool's)
_run = threading.Thread.run
TIDS = {}  # native thread id -> name, of every Python thread started (to read perf's tids)
def _timed_run(self):
    TIDS[threading.get_native_id()] = self.name
    try:
        _run(self)
    finally:
        ENDED[self.name] = ENDED.get(self.name, 0.0) + time.thread_time()
threading.Thread.run = _timed_run
from lakepub.workspace import Workspace
import pyarrow, pyiceberg.catalog.sql, pyiceberg.io.pyarrow  # outside object_store.py's clock
sys.path.insert(0, sys.argv[6])
from cold_phases import profiled
root, batches = sys.argv[1:3]
first, count, history = map(int, sys.argv[3:6])
profile = sys.argv[7] == "1"
ws = None
for i in range(first, first + count):
    def one():
        global ws
        ws = ws or Workspace.open(root)
        ws.publish("orders_daily", f"{batches}/b{i:04d}.parquet", start={"p0": history + i * 100_000},
                   end={"p0": history + (i + 1) * 100_000})
    ctl = os.environ.get("COLD_PHASES_PERF_CTL") if i == first + int(os.environ.get("COLD_PHASES_PERF_AT", 0)) else None
    if ctl:  # perf record -D -1 --control fifo:<ctl>,<ack>: sample this publish only
        ctl_f, ack_f = open(ctl.split(",")[0], "w"), open(ctl.split(",")[1])
        ctl_f.write("enable\n"); ctl_f.flush(); ack_f.readline()
    out = profiled(one, profile, f"{batches}/../tree-new-{i}.txt" if i == first else None)
    if ctl:
        ctl_f.write("disable\n"); ctl_f.flush(); ack_f.readline()
    out["ended_python"] = {k: round(v, 3) for k, v in ENDED.items()}
    out["tids"] = {**TIDS, threading.main_thread().native_id: "main"}
    ENDED.clear()
    print(json.dumps(out), flush=True)
"""


def _threads() -> dict[str, tuple[str, float, float]]:
    """Per thread of this process: its name (Python's; "native:<comm>" for Arrow's and other
    native threads), user and system CPU seconds (Linux)."""
    import threading
    names = {t.native_id: "main" if t is threading.main_thread() else t.name for t in threading.enumerate()}
    out, tick = {}, os.sysconf("SC_CLK_TCK")
    for tid in os.listdir("/proc/self/task"):
        try:
            stat = Path(f"/proc/self/task/{tid}/stat").read_text()
        except OSError:  # ended
            continue
        comm, rest = stat[stat.index("(") + 1:stat.rindex(")")], stat[stat.rindex(")") + 2:].split()
        out[tid] = (names.get(int(tid), "native:" + comm), int(rest[11]) / tick, int(rest[12]) / tick)
    return out


def _by_group(before: dict, after: dict) -> dict[str, list[float]]:
    """CPU (user, system) of the threads between two ``_threads()``, by name without digits."""
    groups: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    for tid, (comm, user, system) in after.items():
        _, u0, s0 = before.get(tid, (comm, 0.0, 0.0))
        g = groups[comm.rstrip("0123456789_-")]
        g[0] += user - u0
        g[1] += system - s0
    return {k: [round(v[0], 3), round(v[1], 3)] for k, v in groups.items() if v[0] + v[1] > 0}


def profiled(fn, profile: bool, tree: str | None = None) -> dict:
    """``fn()`` timed (wall, process CPU) and, if ``profile``, its main thread's cumulative
    seconds per function (each function counted once per stack) and its call tree written to
    the file ``tree``."""
    prof = None
    if profile:
        from pyinstrument import Profiler
        prof = Profiler(interval=0.001, async_mode="disabled")
        prof.start()
    th0 = _threads()
    r0 = resource.getrusage(resource.RUSAGE_SELF)
    t0, c0 = time.perf_counter(), time.process_time()
    fn()
    out = {"wall": time.perf_counter() - t0, "cpu": time.process_time() - c0}
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    out.update(sys=r1.ru_stime - r0.ru_stime, minflt=r1.ru_minflt - r0.ru_minflt, threads=_by_group(th0, _threads()))
    ended = out["cpu"] - sum(u + s for u, s in out["threads"].values())
    out["threads"]["(ended)"] = [round(ended, 3), 0.0]  # threads gone before the end: user + system
    if prof is not None:
        prof.stop()
        if tree:
            Path(tree).write_text(prof.output_text(unicode=False, show_all=False))
        cum: dict[str, float] = defaultdict(float)

        def walk(frame, seen):
            key = f"{frame.function} {Path(frame.file_path or '?').name}:{frame.line_no}"
            if key not in seen:
                cum[key] += frame.time
            for child in frame.children:
                walk(child, seen | {key})
        root = prof.last_session.root_frame()
        if root is not None:
            walk(root, frozenset())
        out["functions"] = {k: round(v, 4) for k, v in cum.items() if v >= 0.002}
    return out


def _perf_summary(data: Path, tids: dict[str, str], groups: int = 4) -> list[str]:
    """CPU seconds of a ``perf record -F 4000 -g`` by Python thread group, and the samples whose
    stack holds the kernel's page zeroing (``clear_page_erms``), Arrow's S3 output stream
    (``ObjectOutputStream``), mimalloc's fresh pages (``mi_page_free_list_extend``), Python's GC."""
    text = subprocess.run(["perf", "script", "-i", str(data), "-F", "tid,ip,sym"], capture_output=True,
                          text=True).stdout
    keys = ("cpu", "zeroing", "zeroing under S3 stream", "mimalloc extend", "gc")
    count: dict[str, dict[str, int]] = defaultdict(lambda: dict.fromkeys(keys, 0))
    for sample in text.split("\n\n"):
        lines = sample.strip().splitlines()
        if not lines:
            continue
        stack = "\n".join(lines[1:])
        zero = "clear_page_erms" in stack
        hits = (True, zero, zero and "ObjectOutputStream" in stack, "mi_page_free_list_extend" in stack,
                "gc_collect_main" in stack)
        for group in ("all", tids.get(lines[0].split()[0], "native").rstrip("0123456789_-")):
            for key, hit in zip(keys, hits):
                count[group][key] += hit
    ranked = sorted(count.items(), key=lambda kv: -kv[1]["cpu"])[:groups + 1]
    return [f"{group:<16} " + "  ".join(f"{key} {n / 4000:.3f}" for key, n in c.items()) for group, c in ranked]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--work", type=Path, required=True, help="kept between invocations (history built once)")
    p.add_argument("--history", type=int, default=1_000_000)
    p.add_argument("--build-batch", type=int, default=1_000_000)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--publishes", type=int, default=4, help="per new process (the first is the new one; with "
                                                            "the long-warm one, 5 a round: the 4-publish merge "
                                                            "cycle falls on each in turn)")
    p.add_argument("--profile", action="store_true", help="pyinstrument, main thread (adds ~5-10%%)")
    p.add_argument("--perf", type=Path, help="a folder: `perf record -g` of each new process's first publish "
                                             "(new<round>.data; `perf report -i ... --no-children --sort dso,sym`)")
    p.add_argument("--perf-at", type=int, default=0, help="which publish of the new process --perf samples "
                                                          "(0: its first; 2: a warm one of the same process)")
    p.add_argument("--other", type=Path, help="another checkout (byte-compiled): each round also one new process "
                                              "of it, the two alternately first (an A/B against the same long-warm)")
    p.add_argument("--s3", action="store_true", help="the warehouse on moto (the server is started here)")
    p.add_argument("--latency-ms", type=float, default=30.0)
    p.add_argument("--pool", type=int, default=120, help="100k-event batches made with the history")
    p.add_argument("--top", type=int, default=30)
    args = p.parse_args()
    from object_store import Server, make_workspace

    server = Server(args.latency_ms) if args.s3 else None
    try:
        run(args, server, make_workspace)
    finally:
        if server:
            server.stop()


def run(args, server, make_workspace) -> None:
    from lakepub.workspace import Workspace

    root, batches = args.work / "hist", args.work / "batches"
    if server is not None or not (root / "lakepub.yaml").exists():
        import shutil
        shutil.rmtree(args.work, ignore_errors=True)
        batches.mkdir(parents=True)
        ws = make_workspace(root, server, prefix="cold-phases")
        hist = History(args.history)
        build(ws, hist, args.work, args.build_batch)
        ws.close()
        rng = np.random.default_rng(0)  # History's batches advance its versions: all made by one instance
        for i in range(args.pool):
            pq.write_table(hist.batch(100_000, rng), batches / f"b{i:04d}.parquet")
    done = json.loads((args.work / "next.json").read_text()) if (args.work / "next.json").exists() else 0
    if done + args.rounds * (args.publishes * (2 if args.other else 1) + 1) + 1 > args.pool:
        raise SystemExit(f"{args.work}: batches used up (--pool {args.pool}); remove it to start again")
    ws = Workspace.open(root)
    i = done

    def warm_one():
        ws.publish("orders_daily", f"{batches}/b{i:04d}.parquet", start={"p0": args.history + i * 100_000},
                   end={"p0": args.history + (i + 1) * 100_000})
    profiled(warm_one, False)  # this process's first publish after the build or open: not counted
    i += 1
    warm, new, own, other = [], [], [], []
    for k in range(args.rounds):
        gc.collect()
        warm.append(profiled(warm_one, args.profile, str(args.work / f"tree-warm-{i}.txt")))
        c.log(f"round {k}: long-warm {warm[-1]['wall']:.3f} s (cpu {warm[-1]['cpu']:.3f})")
        i += 1
        for checkout in ([args.other, None] if k % 2 else [None, args.other]) if args.other else [None]:
            if checkout is None:
                i = _new_process(args, k, root, batches, i, Path.cwd(), new, own)
            else:
                i = _new_process(args, k, root, batches, i, checkout, other, [])
    ws.close()
    (args.work / "next.json").write_text(json.dumps(i))
    _report(args, server, warm, new, own, other)


def _new_process(args, k, root, batches, i, checkout, new, own) -> int:
    """One new process from ``checkout`` publishing batches ``i``, ``i + 1``, ...: its rows
    appended to ``new`` (the first) and ``own``; the next batch number."""
    env = dict(os.environ, PYTHONPATH=str(checkout))
    argv = [sys.executable, "-c", _CHILD, str(root), str(batches), str(i), str(args.publishes),
            str(args.history), str(HERE), "1" if args.profile else "0"]
    if args.perf and checkout == Path.cwd():  # a publish of this checkout's new process, sampled by perf
        ctl, ack = args.perf / f"ctl{k}", args.perf / f"ack{k}"
        for f in (ctl, ack):
            f.unlink(missing_ok=True)
            os.mkfifo(f)
        argv = ["perf", "record", "-q", "-F", "4000", "-g", "-D", "-1", "--control", f"fifo:{ctl},{ack}",
                "-o", str(args.perf / f"new{k}.data"), "--"] + argv
        env.update(COLD_PHASES_PERF_CTL=f"{ctl},{ack}", COLD_PHASES_PERF_AT=str(args.perf_at))
    out = subprocess.run(argv, env=env, capture_output=True, text=True, check=True).stdout
    rows = [json.loads(x) for x in out.splitlines() if x.startswith("{")]
    i += args.publishes
    new.append(rows[0])
    own.extend(rows[1:])
    load = os.getloadavg()[0]
    c.log(f"round {k}: new process ({checkout}) " + " / ".join(f"{r['wall']:.3f} (cpu {r['cpu']:.3f})" for r in rows)
          + f"  load {load:.1f}")
    return i


def _report(args, server, warm, new, own, other) -> None:
    med = lambda rows, key: sorted(r[key] for r in rows)[len(rows) // 2]  # noqa: E731
    print(f"history {args.history:,} {'S3 +%g ms' % args.latency_ms if server else 'local'}, rounds {args.rounds}, "
          f"load {os.getloadavg()}")
    for label, rows in (("long-warm", warm), ("new process", new), ("its own next", own)):
        print(f"  {label:<14} wall {med(rows, 'wall'):.3f} s  cpu {med(rows, 'cpu'):.3f} s (system {med(rows, 'sys'):.3f} s)"
              f"  minor faults {med(rows, 'minflt'):,}")
    print(f"  new / long-warm {med(new, 'wall') / med(warm, 'wall'):.2f}x (cpu {med(new, 'cpu') / med(warm, 'cpu'):.2f}x); "
          f"new / own next {med(new, 'wall') / med(own, 'wall'):.2f}x")
    if other:
        print(f"  --other {args.other}: new process wall {med(other, 'wall'):.3f} s  cpu {med(other, 'cpu'):.3f} s "
              f"(system {med(other, 'sys'):.3f} s); / long-warm {med(other, 'wall') / med(warm, 'wall'):.2f}x "
              f"(cpu {med(other, 'cpu') / med(warm, 'cpu'):.2f}x); each round, this checkout / other: "
              + " ".join(f"{a['wall'] / b['wall']:.2f}" for a, b in zip(new, other)))
    print("  CPU by thread group (user + system s, median over rounds):")
    for label, rows in (("long-warm", warm), ("new process", new), ("its own next", own)):
        names = sorted(set().union(*(r["threads"] for r in rows)))
        cells = []
        for n in names:
            u = sorted(r["threads"].get(n, [0, 0])[0] for r in rows)[len(rows) // 2]
            s_ = sorted(r["threads"].get(n, [0, 0])[1] for r in rows)[len(rows) // 2]
            cells.append(f"{n or '?'} {u:.2f}+{s_:.2f}")
        print(f"    {label:<14} " + "; ".join(cells))
    print("  ended Python threads of the new process's first publish (CPU s, each round):",
          [r.get("ended_python") for r in new])
    if args.perf:
        (args.perf / "tids.json").write_text(json.dumps([r["tids"] for r in new]))
        print(f"  perf, publish {args.perf_at} of each new process: CPU s by thread group (samples / 4000 Hz), of it the "
              "kernel zeroing pages, that under Arrow's S3 output stream, mimalloc extending pages, Python's GC:")
        for k, row in enumerate(new):
            for line in _perf_summary(args.perf / f"new{k}.data", row["tids"]):
                print(f"    {k}: {line}")
    if args.profile:
        keys = set().union(*(r["functions"] for r in warm + new))
        mf = {k: (sorted(r["functions"].get(k, 0.0) for r in new)[len(new) // 2],
                  sorted(r["functions"].get(k, 0.0) for r in warm)[len(warm) // 2],
                  sorted(r["functions"].get(k, 0.0) for r in own)[len(own) // 2] if own else 0.0) for k in keys}
        print(f"  main thread, cumulative s per function (median), new - long-warm, top {args.top}:")
        print(f"  {'new':>7} {'warm':>7} {'own':>7} {'diff':>7}  function")
        for k, (n, w, o) in sorted(mf.items(), key=lambda kv: -(kv[1][0] - kv[1][1]))[:args.top]:
            print(f"  {n:7.3f} {w:7.3f} {o:7.3f} {n - w:+7.3f}  {k}")


if __name__ == "__main__":
    main()
