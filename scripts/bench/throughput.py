"""Benchmark 1: publish throughput of ``lakepub run`` vs the seed's protocol and a pyiceberg upsert.

Two generated 3-year streams (``lakepub.generate.generate_stream``; ``--streams``, default both):

* ``advance``: two source partitions, 50k-line segments; new orders dated on the stream's current
  day, corrections moving amounts and days within a week, exact duplicates, late older versions,
  deletes: a 100k batch touches the ~4-6 month partitions around its time;
* ``drift`` (issue 10): one source partition ``p0`` in four segments of a quarter of the events;
  new orders and day-moving corrections dated anywhere in the 1,095 days, so every 100k batch
  rewrites all 36 month partitions.

Each stream is published three ways, batches of ``--max-batch``:

* lakepub as a user runs it: one ``lakepub -w WS run orders_daily --max-batch N`` process, timed
  from its start to its exit (Python start and imports, reading the JSONL, the projection,
  Parquet writes and the atomic Iceberg commits) in a fresh workspace whose landing source links
  to the stream; ``--repeat`` runs (fresh workspace each, default 3), the median run counts;
* the seed's protocol: ``scripts/baselines/seed_sqlite.run_seed_baseline`` (SQLite ledger + current
  + full summary recompute + checkpoint in one transaction, event by event);
* what a user would write with pyiceberg: ``scripts/baselines/pyiceberg_upsert.run_upsert_baseline``.

Beside each ``lakepub run`` process, alternated with it, two child processes split its time
(``--no-split`` skips them):

* the **imports alone**: a process that only imports what a publishing ``lakepub run`` process
  imports (``_FLOOR``: lakepub's CLI and publisher, pyiceberg's SQL catalog and pyarrow FileIO,
  pyarrow's Parquet and JSON, DuckDB), start to exit, serially;
* the **run alone**: ``Workspace.run`` of the same stream in a fresh workspace, timed after those
  imports in a new process (the in-process figure of session 3, but one run per process).

A run overlaps much of its importing with reading its landing, so what it pays for its start
is the process's time minus the run alone's ("start-up as paid"), less than the imports alone.
From them the report derives what the target asks of the run itself: the ratio with a free
start-up (seed / run alone), and the speed-up of the run alone that the target needs with the
start-up as paid (issue 10's "where the time goes").

It checks that lakepub's published table equals the seed baseline's summary, then (full mode,
unless ``--no-profile``) profiles two more fresh lakepub runs in this process of the
``--profile-stream`` (default drift): the time per publish phase, from pyinstrument's sampling
profiler if it is installed (optional; the call tree goes to ``--profile-out``) else from
cProfile, and the top 10 functions by own time from cProfile.

    python scripts/bench/throughput.py [--quick] [--json PATH] [--streams advance,drift] [--skip-upsert] [--no-profile]
"""

from __future__ import annotations

import gc
import json
import sys
import time
from pathlib import Path

import common as c

STREAMS = ("advance", "drift")
# Figure keys: the advancing stream keeps the keys of before (lakepub_events_per_s, ratio_vs_seed, ...).
PREFIX = {"advance": "", "drift": "drift_"}
TARGET_VS_SEED = {"advance": 12, "drift": 10}

# What a publishing `lakepub run` process has imported before its first batch (its slowest imports;
# `python -X importtime` of a run lists them), as one process started and ended: the floor under
# any process-level figure, whatever the run costs.
_FLOOR = ("import lakepub.cli, lakepub.workspace, lakepub.publish.publisher, lakepub.store.commit, "
          "pyiceberg.catalog.sql, pyiceberg.io.pyarrow, pyarrow.parquet, pyarrow.json, duckdb")

# The run alone: Workspace.run timed after those imports, in a new process; prints wall and CPU.
_ALONE = _FLOOR + """
import sys, time
from lakepub.workspace import Workspace
root, dataset, max_batch = sys.argv[1], sys.argv[2], int(sys.argv[3])
t0, c0 = time.perf_counter(), time.process_time()
Workspace.open(root).run(dataset, max_batch=max_batch)
print(time.perf_counter() - t0, time.process_time() - c0)
"""


def main() -> None:
    p = c.parser(__doc__.splitlines()[0])
    p.add_argument("--events", type=int, help="stream size (default 1,000,000; --quick 30,000)")
    p.add_argument("--max-batch", type=int, help="batch size (default 100,000; --quick 10,000)")
    p.add_argument("--repeat", type=int, help="lakepub runs, fresh workspace each; the median counts (default 3; --quick 1)")
    p.add_argument("--streams", default=",".join(STREAMS), help="comma-separated: advance, drift (default both)")
    p.add_argument("--skip-upsert", action="store_true", help="do not run the pyiceberg upsert baseline")
    p.add_argument("--no-profile", action="store_true", help="do not profile a second lakepub run")
    p.add_argument("--no-split", action="store_true",
                   help="do not time the import floor and the run alone beside each process")
    p.add_argument("--profile", action="store_true", help="profile even in --quick mode")
    p.add_argument("--profile-stream", choices=STREAMS, default="drift", help="the stream profiled (default drift)")
    p.add_argument("--profile-out", type=Path, help="write the pyinstrument call tree there (if installed)")
    args = p.parse_args()
    events = args.events or (30_000 if args.quick else 1_000_000)
    max_batch = args.max_batch or (10_000 if args.quick else 100_000)
    profile = args.profile or not (args.quick or args.no_profile)
    repeat = args.repeat or (1 if args.quick else 3)
    streams = [name.strip() for name in args.streams.split(",") if name.strip()]
    if not streams or set(streams) - set(STREAMS):
        p.error(f"--streams: choose from {', '.join(STREAMS)}")

    r = c.Report("throughput", "events/s of lakepub run (one process) vs the seed protocol and a pyiceberg upsert",
                 args.quick, params={"events": events, "days": c.STREAM_DAYS,
                                     "source_partitions": f"advance {c.STREAM_PARTITIONS}, drift 1",
                                     "max_batch": max_batch, "seed": args.seed, "lakepub_runs": repeat,
                                     "streams": ",".join(streams)})
    with c.scratch(args, "throughput") as work:
        dirs = {}
        for name in streams:
            dirs[name] = _stream(args, work, name, events)
            _measure(r, args, work, name, dirs[name], events, max_batch, repeat)
        if profile:
            name = args.profile_stream if args.profile_stream in dirs else streams[0]
            c.log(f"profiling two more lakepub runs of the {name} stream ...")
            _profile(r, work, dirs[name], max_batch, args, name)
    r.emit(args)


def _stream(args, work: Path, name: str, events: int) -> Path:
    if name == "drift":
        folder, _ = c.stream(args, work, events, partitions=1, spread=True, segment_size=max(1, -(-events // 4)))
    else:
        folder, _ = c.stream(args, work, events)
    return folder


def _measure(r: c.Report, args, work: Path, name: str, stream_dir: Path, events: int, max_batch: int,
             repeat: int) -> None:
    pre = PREFIX[name]
    # --- lakepub: --repeat fresh processes, median ------------------------------------------
    runs: list[tuple[float, dict, float]] = []
    floors: list[tuple[float, float]] = []
    alone: list[tuple[float, float]] = []
    lp_rows = None
    for i in range(repeat):
        c.log(f"{name}: lakepub run process {i + 1}/{repeat} ...")
        folder = work / f"ws-{name}-{i}"
        c.workspace(folder, stream_dir)
        gc.collect()
        seconds, cpu, out = c.timed_process_cpu(c.lakepub_argv("-w", str(folder), "run", c.DATASET, "--max-batch",
                                                      str(max_batch), "--format", "json"))
        result = json.loads(out)
        assert result["events"] == events, (result["events"], events)
        runs.append((seconds, result, cpu))
        if i == 0:
            lp_rows = _summary(c.workspace_open(folder))
        if not args.no_split:
            floors.append(c.timed_process_cpu([sys.executable, "-c", _FLOOR])[:2])
            folder = work / f"ws-{name}-{i}-alone"
            c.workspace(folder, stream_dir)
            gc.collect()
            out = c.timed_process_cpu([sys.executable, "-c", _ALONE, str(folder), c.DATASET, str(max_batch)])[2]
            alone.append(tuple(float(x) for x in out.split()[-2:]))
    lp_s, result, lp_cpu = sorted(runs, key=lambda x: x[0])[len(runs) // 2]

    # --- seed protocol ------------------------------------------------------------------------
    c.log(f"{name}: seed baseline (SQLite) ...")
    gc.collect()
    cpu0 = time.process_time()  # the seed baseline runs on this process's one thread
    seed = c.load_baseline("seed_sqlite").run_seed_baseline(stream_dir, work / f"seed-{name}.db", max_batch)
    seed_cpu = time.process_time() - cpu0
    assert seed["events"] == events

    # --- pyiceberg upsert -----------------------------------------------------------------------
    ups = None
    if not args.skip_upsert:
        c.log(f"{name}: pyiceberg upsert baseline ...")
        gc.collect()
        ups = c.load_baseline("pyiceberg_upsert").run_upsert_baseline(stream_dir, work / f"upsert-{name}", max_batch)
        assert ups["events"] == events

    # --- report -------------------------------------------------------------------------------
    title = {"advance": "advancing stream (days follow the stream)",
             "drift": "drifting stream (days over 3 years in every batch: issue 10)"}[name]
    r.section(f"{title}: end to end, one process each, same stream")
    lp_rate = r.figure(f"{pre}lakepub_events_per_s", events / lp_s,
                       "lakepub run process" + (f" (median of {repeat})" if repeat > 1 else ""), "events/s",
                       f"{lp_s:.2f} s" + (f"; runs {', '.join(f'{x[0]:.2f}' for x in runs)} s" if repeat > 1 else ""))
    seed_rate = r.figure(f"{pre}seed_events_per_s", seed["events_per_s"], "seed protocol (SQLite, baseline)",
                         "events/s", f"{seed['seconds']:.2f} s")
    r.figures[f"{pre}lakepub_seconds"], r.figures[f"{pre}seed_seconds"] = lp_s, seed["seconds"]
    r.figures[f"{pre}lakepub_runs_s"] = [x[0] for x in runs]
    if ups is not None:
        r.figure(f"{pre}upsert_events_per_s", ups["events_per_s"], "pyiceberg upsert (baseline)", "events/s",
                 f"{ups['seconds']:.2f} s")
        r.figures[f"{pre}upsert_seconds"] = ups["seconds"]
    r.ratio(f"{pre}ratio_vs_seed", lp_rate, seed_rate, "lakepub / seed protocol")
    if ups is not None:
        r.ratio(f"{pre}ratio_vs_upsert", lp_rate, ups["events_per_s"], "lakepub / pyiceberg upsert")
    # CPU seconds (user + system): what a shared machine's load changes least. lakepub's wall time
    # counts on its threads finding two cores; the seed protocol runs on one.
    r.figure(f"{pre}lakepub_cpu_s", lp_cpu, "lakepub run process CPU (user + system, all threads)", "s",
             f"CPU / wall {lp_cpu / lp_s:.2f}")
    r.figure(f"{pre}seed_cpu_s", seed_cpu, "seed protocol CPU", "s", f"CPU / wall {seed_cpu / seed['seconds']:.2f}")
    r.ratio(f"{pre}cpu_ratio_vs_seed", seed_cpu, lp_cpu, "seed CPU / lakepub CPU")
    batches = result["batches"]
    parts = [len(b.get("partitions") or []) for b in batches]
    r.figure(f"{pre}batches", len(batches), "lakepub batches")
    r.figure(f"{pre}lakepub_partitions_rewritten_max", max(parts, default=0), "lakepub partitions rewritten (max per batch)")
    r.figure(f"{pre}lakepub_partitions_rewritten_median", c.median(parts), "lakepub partitions rewritten (median)")
    if ups is not None:
        r.figure(f"{pre}upsert_batch_first_s", ups["batch_seconds"][0], "upsert first batch", "s")
        r.figure(f"{pre}upsert_batch_last_s", ups["batch_seconds"][-1], "upsert last batch", "s")
    if floors:
        _split(r, pre, name, seed["seconds"], lp_s, floors, alone)
    seed_rows = {d: list(v) for d, v in seed["summary"].items()}
    same = lp_rows == seed_rows
    r.figure(f"{pre}same_result_as_seed", same, "published table == seed baseline summary")
    if not same:
        raise SystemExit(f"{name}: lakepub's published table differs from the seed baseline's summary")

    label = "" if name == "advance" else f"{name}: "
    r.target(f"{label}lakepub >= {TARGET_VS_SEED[name]}x seed protocol", r.figures[f"{pre}ratio_vs_seed"], ">=",
             TARGET_VS_SEED[name])
    if ups is not None:
        r.target(f"{label}lakepub >= 30x pyiceberg upsert", r.figures[f"{pre}ratio_vs_upsert"], ">=", 30)


def _split(r: c.Report, pre: str, name: str, seed_s: float, lp_s: float, floors, alone) -> None:
    """The process's time split into its start-up as paid and the run alone, and what the target asks.

    A run overlaps much of its importing with reading its landing (the prefetch) and with
    background imports, so the serial import floor is larger than what a run pays for its start:
    the start-up as paid is the process's time minus the run alone's."""
    floor_s, floor_cpu = c.median([x[0] for x in floors]), c.median([x[1] for x in floors])
    alone_s, alone_cpu = c.median([x[0] for x in alone]), c.median([x[1] for x in alone])
    target = TARGET_VS_SEED[name]
    start_s = lp_s - alone_s
    r.figure(f"{pre}import_floor_s", floor_s, "imports alone, serial (a process doing only them)", "s",
             f"CPU {floor_cpu:.2f} s")
    r.figure(f"{pre}run_alone_s", alone_s, "the run alone, after its imports", "s", f"CPU {alone_cpu:.2f} s")
    r.figure(f"{pre}startup_paid_s", start_s, "start-up as paid: process - run alone", "s")
    r.ratio(f"{pre}run_alone_ratio_vs_seed", seed_s, alone_s, "seed / the run alone (start-up free)")
    budget = seed_s / target - start_s
    r.figure(f"{pre}run_budget_s", budget, f"run budget at {target}x, start-up as paid", "s",
             f"seed {seed_s:.2f} s / {target} - start-up {start_s:.2f} s")
    if budget > 0:
        r.ratio(f"{pre}run_speedup_needed", alone_s, budget, f"run-alone speed-up {target}x needs")


def _summary(ws) -> dict[str, list[int]]:
    table = ws.query(f"SELECT day, cents, orders FROM {c.DATASET}")
    return {str(d): [cents, orders] for d, cents, orders in zip(*(table.column(i).to_pylist() for i in range(3)))}


def _profile(r: c.Report, work: Path, stream_dir: Path, max_batch: int, args, stream: str) -> None:
    def fresh_run(name: str):
        ws = c.workspace(work / name, stream_dir)
        return ws.run(c.DATASET, max_batch=max_batch)

    r.figures["profile_stream"] = stream

    gc.collect()
    sampled = c.sampled_profile(lambda: fresh_run("ws-pyinstrument"))
    gc.collect()
    _, stats, cwall = c.profile_call(lambda: fresh_run("ws-cprofile"))
    if sampled is not None:
        text, phases, wall = sampled
        how = f"pyinstrument (sampling) of a fresh run: {wall:.2f} s"
        if args.profile_out is not None:
            Path(args.profile_out).write_text(text)
            r.note(f"pyinstrument call tree written to {args.profile_out}")
    else:
        phases, wall = c.phase_times(stats), cwall
        how = f"cProfile of a fresh run: {wall:.2f} s with profiler overhead; pip install pyinstrument for less"
    r.section(f"where the time goes in the {stream} stream ({how})")
    top_level = 0.0
    for label, seconds in sorted(phases.items(), key=lambda kv: -kv[1]):
        if label.startswith(c.NESTED):
            continue
        top_level += seconds
        r.figure(f"phase:{label}", seconds, label, "s", f"{100 * seconds / wall:.0f}%")
        for sub, sub_s in phases.items():
            if sub.startswith(c.NESTED) and label.startswith("replace published"):
                r.figure(f"phase:{sub.strip()}", sub_s, sub, "s", f"{100 * sub_s / wall:.0f}%")
    r.figure("phase:other", max(0.0, wall - top_level), "other (Python glue, metadata loads, GC)", "s")
    r.figures["profile_wall_s"] = wall
    r.figures["profile_method"] = "pyinstrument" if sampled is not None else "cProfile"
    r.section(f"top 10 functions by own time (cProfile of another fresh run, {cwall:.2f} s with its overhead; "
              "cumulative in brackets)")
    top = c.top_functions(stats, 10)
    r.figures["profile_top10"] = top
    for i, row in enumerate(top, 1):
        r.lines.append(f"  {i:>2}. {row['own_s']:6.2f} s own [{row['cum_s']:6.2f} s cum] {row['calls']:>9,} calls  "
                       f"{row['function']}")


if __name__ == "__main__":
    main()
