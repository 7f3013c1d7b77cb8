"""Benchmark 1: publish throughput of ``lakepub run`` vs the seed's protocol and a pyiceberg upsert.

One generated 3-year stream (``lakepub.generate.generate_stream``: new orders dated on the stream's
current day, corrections moving amounts and days within a week, exact duplicates, late older
versions, deletes) is published three ways, one process each in turn, batches of ``--max-batch``:

* lakepub: ``Workspace.open(ws).run("orders_daily", max_batch=...)`` in a fresh workspace whose
  landing source links to the stream (end to end: reading the JSONL, DuckDB projection, Parquet
  writes and the atomic Iceberg commits, opening the catalog and loading DuckDB's extensions);
  ``--repeat`` runs (fresh workspace each, default 3), the median run counts;
* the seed's protocol: ``scripts/baselines/seed_sqlite.run_seed_baseline`` (SQLite ledger + current
  + full summary recompute + checkpoint in one transaction, event by event);
* what a user would write with pyiceberg: ``scripts/baselines/pyiceberg_upsert.run_upsert_baseline``.

It checks that lakepub's published table equals the seed baseline's summary, then (full mode,
unless ``--no-profile``) profiles two more fresh lakepub runs: the time per publish phase, from
pyinstrument's sampling profiler if it is installed (optional; the call tree goes to
``--profile-out``) else from cProfile, and the top 10 functions by own time from cProfile.

    python scripts/bench/throughput.py [--quick] [--json PATH] [--skip-upsert] [--no-profile]
"""

from __future__ import annotations

import gc
import time
from pathlib import Path

import common as c


def main() -> None:
    p = c.parser(__doc__.splitlines()[0])
    p.add_argument("--events", type=int, help="stream size (default 1,000,000; --quick 30,000)")
    p.add_argument("--max-batch", type=int, help="batch size (default 100,000; --quick 10,000)")
    p.add_argument("--repeat", type=int, help="lakepub runs, fresh workspace each; the median counts (default 3; --quick 1)")
    p.add_argument("--skip-upsert", action="store_true", help="do not run the pyiceberg upsert baseline")
    p.add_argument("--no-profile", action="store_true", help="do not profile a second lakepub run")
    p.add_argument("--profile", action="store_true", help="profile even in --quick mode")
    p.add_argument("--profile-out", type=Path, help="write the pyinstrument call tree there (if installed)")
    args = p.parse_args()
    events = args.events or (30_000 if args.quick else 1_000_000)
    max_batch = args.max_batch or (10_000 if args.quick else 100_000)
    profile = args.profile or not (args.quick or args.no_profile)
    repeat = args.repeat or (1 if args.quick else 3)

    r = c.Report("throughput", "events/s of lakepub run vs the seed protocol and a pyiceberg upsert", args.quick,
                 params={"events": events, "days": c.STREAM_DAYS, "partitions": c.STREAM_PARTITIONS,
                         "max_batch": max_batch, "seed": args.seed, "lakepub_runs": repeat})
    with c.scratch(args, "throughput") as work:
        stream_dir, stats = c.stream(args, work, events)
        r.params["orders"] = stats["orders"]

        # --- lakepub: --repeat fresh runs, median -----------------------------------------
        runs: list[tuple[float, list[float], list[int]]] = []
        for i in range(repeat):
            c.log(f"lakepub run {i + 1}/{repeat} ...")
            gc.collect()
            batch_s: list[float] = []
            parts: list[int] = []
            t0 = time.perf_counter()
            ws = c.workspace(work / f"ws-{i}", stream_dir)
            last = [t0]

            def on_batch(result, _pending, batch_s=batch_s, parts=parts, last=last) -> None:
                now = time.perf_counter()
                batch_s.append(now - last[0])
                last[0] = now
                parts.append(len(result.partitions))

            run = ws.run(c.DATASET, max_batch=max_batch, on_batch=on_batch)
            runs.append((time.perf_counter() - t0, batch_s, parts))
            assert run.events == events, (run.events, events)
            if i == 0:
                lp_rows = _summary(ws)
        lp_s, batch_s, parts = sorted(runs, key=lambda x: x[0])[len(runs) // 2]

        # --- seed protocol ------------------------------------------------------------------
        c.log("seed baseline (SQLite) ...")
        gc.collect()
        seed = c.load_baseline("seed_sqlite").run_seed_baseline(stream_dir, work / "seed.db", max_batch)
        assert seed["events"] == events

        # --- pyiceberg upsert ---------------------------------------------------------------
        ups = None
        if not args.skip_upsert:
            c.log("pyiceberg upsert baseline ...")
            gc.collect()
            ups = c.load_baseline("pyiceberg_upsert").run_upsert_baseline(stream_dir, work / "upsert", max_batch)
            assert ups["events"] == events

        # --- report -------------------------------------------------------------------------
        r.section("end to end, one process each, same stream")
        lp_rate = r.figure("lakepub_events_per_s", events / lp_s, "lakepub run" + (f" (median of {repeat})" if repeat > 1 else ""),
                           "events/s", f"{lp_s:.2f} s" + (f"; runs {', '.join(f'{x[0]:.2f}' for x in runs)} s"
                                                         if repeat > 1 else ""))
        seed_rate = r.figure("seed_events_per_s", seed["events_per_s"], "seed protocol (SQLite, baseline)", "events/s",
                             f"{seed['seconds']:.2f} s")
        r.figures["lakepub_seconds"], r.figures["seed_seconds"] = lp_s, seed["seconds"]
        if ups is not None:
            r.figure("upsert_events_per_s", ups["events_per_s"], "pyiceberg upsert (baseline)", "events/s",
                     f"{ups['seconds']:.2f} s")
            r.figures["upsert_seconds"] = ups["seconds"]
        r.ratio("ratio_vs_seed", lp_rate, seed_rate, "lakepub / seed protocol")
        if ups is not None:
            r.ratio("ratio_vs_upsert", lp_rate, ups["events_per_s"], "lakepub / pyiceberg upsert")
        r.section("per batch")
        r.figure("batches", len(batch_s), "lakepub batches")
        r.figure("lakepub_batch_first_s", batch_s[0], "lakepub first batch (incl. opening the catalog + tables)", "s")
        r.figure("lakepub_batch_median_s", c.median(batch_s), "lakepub median batch", "s")
        r.figure("lakepub_batch_last_s", batch_s[-1], "lakepub last batch", "s")
        r.figure("lakepub_partitions_rewritten_max", max(parts), "lakepub partitions rewritten (max per batch)")
        if ups is not None:
            r.figure("upsert_batch_first_s", ups["batch_seconds"][0], "upsert first batch", "s")
            r.figure("upsert_batch_last_s", ups["batch_seconds"][-1], "upsert last batch", "s")
        seed_rows = {d: list(v) for d, v in seed["summary"].items()}
        same = lp_rows == seed_rows
        r.figure("same_result_as_seed", same, "published table == seed baseline summary")
        if not same:
            raise SystemExit("lakepub's published table differs from the seed baseline's summary")

        r.target("lakepub >= 10x seed protocol", r.figures["ratio_vs_seed"], ">=", 10)
        if ups is not None:
            r.target("lakepub >= 30x pyiceberg upsert", r.figures["ratio_vs_upsert"], ">=", 30)

        if profile:
            c.log("profiling a second lakepub run (cProfile) ...")
            _profile(r, work, stream_dir, max_batch, args)
    r.emit(args)


def _summary(ws) -> dict[str, list[int]]:
    table = ws.query(f"SELECT day, cents, orders FROM {c.DATASET}")
    return {str(d): [cents, orders] for d, cents, orders in zip(*(table.column(i).to_pylist() for i in range(3)))}


def _profile(r: c.Report, work: Path, stream_dir: Path, max_batch: int, args) -> None:
    def fresh_run(name: str):
        ws = c.workspace(work / name, stream_dir)
        return ws.run(c.DATASET, max_batch=max_batch)

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
    r.section(f"where the time goes ({how})")
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
