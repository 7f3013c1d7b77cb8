"""Run every benchmark of ``scripts/bench`` (one child process each), then print a summary and,
with ``--markdown PATH``, write the README's "Benchmarks" section from the figures just measured.

    python scripts/bench/run_all.py [--quick] [--all] [--only throughput,history] [--out DIR] [--markdown PATH]
    python scripts/bench/run_all.py --render DIR --markdown PATH     # re-render saved reports

Full mode runs ``BENCHMARKS`` (the README table's rows) for roughly 7 minutes on 2 cores (the
pyiceberg upsert baseline alone takes about a minute and a half of it). ``FEATURE_BENCHMARKS``
(each feature's own benchmark, quoted in the feature's README section) run in ``--quick`` mode,
with ``--all``, or when named in ``--only``: their full modes are long (object_store builds 1M
orders of history on a moto S3; merge_on_read runs its 1M-event figures, here with
``--skip-upsert``: pyiceberg's composite-key upsert would take hours at that size).
``--out`` keeps each benchmark's text and JSON report (and the throughput run's pyinstrument call
tree, if pyinstrument is installed); streams are generated once into ``--cache`` (default:
``<out>/streams``) and shared between the benchmarks.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
BENCHMARKS = ["throughput", "wide", "history", "overhead", "reads", "janitor", "memory", "startup"]
FEATURE_BENCHMARKS = ["derive", "lifecycle", "evolution", "merge_on_read", "mor_fold", "mor_scan_cost", "object_store",
                      "superseded", "logs", "dual_write"]
FULL_ARGS = {"merge_on_read": ["--skip-upsert"]}  # the README's 1M figures; the upsert would take hours


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--all", action="store_true", help="in full mode also run: " + ", ".join(FEATURE_BENCHMARKS))
    p.add_argument("--only", help="comma-separated subset of: " + ", ".join(BENCHMARKS + FEATURE_BENCHMARKS))
    p.add_argument("--out", type=Path, help="folder for the reports (default: a temporary folder)")
    p.add_argument("--cache", type=Path, help="stream cache shared by the benchmarks (default: <out>/streams)")
    p.add_argument("--markdown", type=Path, help="write the README 'Benchmarks' section there")
    p.add_argument("--json", type=Path, help="write all reports as one JSON list there")
    p.add_argument("--render", type=Path, metavar="DIR",
                   help="run nothing: print the summary (and --markdown) from the <name>.json reports in DIR")
    args = p.parse_args()
    if args.render is not None:
        reports = [json.loads((args.render / f"{n}.json").read_text()) for n in BENCHMARKS + FEATURE_BENCHMARKS
                   if (args.render / f"{n}.json").is_file()]
        print(summary(reports))
        if args.markdown:
            args.markdown.write_text(markdown(reports))
            print(f"README section written to {args.markdown}")
        return
    every = BENCHMARKS + FEATURE_BENCHMARKS
    names = args.only.split(",") if args.only else (every if args.quick or args.all else BENCHMARKS)
    unknown = set(names) - set(every)
    if unknown:
        p.error(f"unknown benchmark(s): {', '.join(sorted(unknown))}")
    out = args.out or Path(tempfile.mkdtemp(prefix="lakepub-bench-all-"))
    out.mkdir(parents=True, exist_ok=True)
    cache = args.cache or out / "streams"

    reports, failed = [], []
    for name in names:
        json_path = out / f"{name}.json"
        argv = [sys.executable, str(HERE / f"{name}.py"), "--json", str(json_path), "--cache", str(cache)]
        if args.quick:
            argv.append("--quick")
        else:
            argv += FULL_ARGS.get(name, [])
        if name == "throughput" and not args.quick:
            argv += ["--profile-out", str(out / "throughput.pyinstrument.txt")]
        print(f"\n$ {' '.join(argv)}", flush=True)
        t0 = time.perf_counter()
        with open(out / f"{name}.txt", "w") as text:
            proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
            for line in proc.stdout:
                sys.stdout.write(line)
                text.write(line)
            code = proc.wait()
        print(f"[{name}: exit {code} after {time.perf_counter() - t0:.0f} s]", flush=True)
        if code != 0 or not json_path.is_file():
            failed.append(name)
            continue
        reports.append(json.loads(json_path.read_text()))

    print("\n" + summary(reports))
    if args.json:
        args.json.write_text(json.dumps(reports, indent=1))
    if args.markdown:
        args.markdown.write_text(markdown(reports))
        print(f"\nREADME section written to {args.markdown}")
    print(f"reports in {out}")
    if failed:
        sys.exit(f"failed: {', '.join(failed)}")


def summary(reports: list[dict]) -> str:
    lines = ["== summary of issue 4 targets"]
    if reports:
        lines.append(f"machine: {reports[0]['machine_line']}")
    for rep in reports:
        for t in rep["targets"]:
            verdict = "MET" if t["met"] else "MISSED"
            value = "n/a" if t["value"] is None else f"{t['value']:.2f}"
            lines.append(f"  {rep['benchmark']:<13} {t['name']:<52} {value:>8}  target {t['op']} {t['target']:g}"
                         f"  {verdict}")
    return "\n".join(lines)


# --- the README section ------------------------------------------------------------------------


def _f(value, digits: int = 0, unit: str = "") -> str:
    if value is None:
        return "n/a"
    if isinstance(value, bool):
        return "yes" if value else "no"
    text = f"{value:,.{digits}f}"
    return f"{text} {unit}".rstrip()


def _pick(fig: dict, prefix: str) -> list[tuple[str, float]]:
    return [(k[len(prefix):], v) for k, v in fig.items() if k.startswith(prefix)]


# A nested phase ("of which: ...") is listed under the phase whose label starts like this.
_PARENTS = {"pyiceberg scan planning": "published rows"}


def _parent(nested: str) -> str | None:
    return next((parent for child, parent in _PARENTS.items() if child in nested), None)


def markdown(reports: list[dict]) -> str:
    by = {r["benchmark"]: r for r in reports}
    first = reports[0] if reports else None
    mode = "quick" if first and first["mode"] == "quick" else "full"
    out = ["## Benchmarks", ""]
    if first:
        out += [f"Measured with `python scripts/bench/run_all.py{' --quick' if mode == 'quick' else ''}` on "
                f"{first['machine_line']}. Each script in `scripts/bench/` prints its figures, the baseline "
                "measured in the same run and the ratio (`--quick` for CI, `--json PATH` for machine-readable "
                "output).", ""]
        out += ["| # | Benchmark | lakepub | baseline | ratio | issue target | |", "|---|---|---|---|---|---|---|"]
    rows = []
    if "throughput" in by:
        f, p = by["throughput"]["figures"], by["throughput"]["params"]
        targets = {t["name"]: t for t in by["throughput"]["targets"]}
        for pre, shape, tag in (("", "days follow the stream", ""), ("drift_", "drifting: every batch spans 3 years", "drift: ")):
            if f.get(f"{pre}lakepub_events_per_s") is None:
                continue
            vs_seed = next((t for n, t in targets.items() if n.startswith(tag) and "seed" in n and
                            (tag or not n.startswith("drift:"))), None)
            rows.append(("1", f"throughput, {p['events']:,} events ({shape}), one `lakepub run --max-batch "
                              f"{p['max_batch']:,}` process",
                         _f(f.get(f"{pre}lakepub_events_per_s"), 0, "events/s"),
                         f"seed protocol {_f(f.get(f'{pre}seed_events_per_s'), 0, 'events/s')}",
                         _f(f.get(f"{pre}ratio_vs_seed"), 1) + "x",
                         f"≥ {vs_seed['target']:g}x" if vs_seed else "", vs_seed))
            if f.get(f"{pre}upsert_events_per_s") is not None:
                vs_ups = next((t for n, t in targets.items() if n.startswith(tag) and "upsert" in n and
                               (tag or not n.startswith("drift:"))), None)
                rows.append(("1", f"same stream vs pyiceberg upsert", _f(f.get(f"{pre}lakepub_events_per_s"), 0, "events/s"),
                             f"upsert {_f(f.get(f'{pre}upsert_events_per_s'), 0, 'events/s')}",
                             _f(f.get(f"{pre}ratio_vs_upsert"), 1) + "x", "≥ 30x", vs_ups))
    if "wide" in by:
        f, p = by["wide"]["figures"], by["wide"]["params"]
        rows.append(("1", f"throughput, 20-field contract (key of 2; aggregate + current datasets), "
                          f"{p['events']:,} events, `--max-batch {p['max_batch']:,}`",
                     _f(f.get("wide_events_per_s"), 0, "events/s"),
                     f"orders_daily, same size {_f(f.get('orders_events_per_s'), 0, 'events/s')}",
                     _f(f.get("ratio_wide_vs_orders"), 2) + "x", "figure (no target)", None))
    if "history" in by:
        f = by["history"]["figures"]
        batches = _pick(f, "batch_s_")
        if len(batches) >= 2:
            (ta, a), (tb, b) = batches[0], batches[-1]
            rows.append(("2", f"one {by['history']['params']['batch']:,}-event publish, {ta} vs {tb} orders of history",
                         f"{_f(a, 2, 's')} → {_f(b, 2, 's')}", "", f"growth {_f(f.get('growth'), 2)}x", "≤ 1.5x",
                         by["history"]["targets"][0]))
    if "overhead" in by:
        f = by["overhead"]["figures"]
        batch = f"{by['overhead']['params']['max_batch']:,}-event batch"
        rows.append(("3", f"protocol overhead, {batch}: same data (partitions + ledger rows)",
                     _f(f.get("lakepub_s"), 3, "s"),
                     f"bare overwrite + ledger append {_f(f.get('bare_overwrite_append_s'), 3, 's')}",
                     _f(f.get("ratio_vs_overwrite_append"), 2) + "x", "≤ 1.3x", by["overhead"]["targets"][0]))
        if len(by["overhead"]["targets"]) > 1:
            rows.append(("3", f"protocol overhead, {batch}: vs the partition overwrite alone",
                         _f(f.get("lakepub_s"), 3, "s"), f"bare overwrite {_f(f.get('bare_overwrite_s'), 3, 's')}",
                         _f(f.get("ratio_vs_overwrite"), 2) + "x", "≤ 1.3x", by["overhead"]["targets"][1]))
    if "reads" in by:
        f = by["reads"]["figures"]
        rows.append(("4", f"DuckDB aggregate over the published table ({f.get('published_data_files')} data files), "
                          f"`Workspace.connect()` view (raw iceberg_scan {_f(f.get('published_iceberg_s'), 4, 's')}: "
                          f"{_f(f.get('published_iceberg_ratio'), 2)}x)",
                     f"view {_f(f.get('published_lakepub_s'), 4, 's')}",
                     f"read_parquet {_f(f.get('published_parquet_s'), 4, 's')}",
                     _f(f.get("published_ratio"), 2) + "x", "≤ 1.05x", by["reads"]["targets"][0]))
        rows.append(("4", f"same over the ledger ({f.get('ledger_data_files')} data files)",
                     f"iceberg_scan {_f(f.get('ledger_iceberg_s'), 4, 's')}",
                     f"read_parquet {_f(f.get('ledger_parquet_s'), 4, 's')}",
                     _f(f.get("ledger_ratio"), 2) + "x", "≤ 1.2x", by["reads"]["targets"][1]))
    if "janitor" in by:
        f, p = by["janitor"]["figures"], by["janitor"]["params"]
        for tag, where in (("local", "local folder"), ("s3", "S3 (moto server)")):
            if f.get(f"{tag}_files_listed") is not None:
                rows.append(("5", f"janitor, {p['files']:,} files, {where}",
                             f"scan {_f(f.get(f'{tag}_scan_files_per_s'), 0, 'files/s')}, "
                             f"delete {_f(f.get(f'{tag}_delete_files_per_s'), 0, 'files/s')}",
                             f"plain list {_f(f.get(f'{tag}_plain_scan_files_per_s'), 0, 'files/s')}, "
                             f"delete {_f(f.get(f'{tag}_plain_delete_files_per_s'), 0, 'files/s')}",
                             f"{_f(f.get(f'{tag}_scan_ratio'), 2)}x / {_f(f.get(f'{tag}_delete_ratio'), 2)}x",
                             "files/s (no target)", None))
    if "memory" in by:
        f, p = by["memory"]["figures"], by["memory"]["params"]
        hist = _pick(f, "rss_mib_history_")
        rows.append(("6", f"peak RSS of `lakepub run`, {p['events']:,} events, batch {p['fixed_batch']:,}",
                     _f(f.get(f"rss_mib_batch_{p['fixed_batch']}") or (hist[-1][1] if hist else None), 0, "MiB"),
                     f"seed protocol {_f(f.get('seed_rss_mib'), 0, 'MiB')}",
                     f"history ×{_f(f.get('rss_ratio_history'), 2)}", "bounded by batch",
                     by["memory"]["targets"][0]))
    if "startup" in by:
        f = by["startup"]["figures"]
        targets = {t["name"]: t for t in by["startup"]["targets"]}
        for key, name in (("help", "lakepub --help"), ("status", "lakepub status"), ("log", "lakepub log"),
                          ("query", "lakepub query"), ("run_nothing_new", "lakepub run (nothing new)"),
                          ("full_path_status", "lakepub status` with `LAKEPUB_QUICK=0"),
                          ("full_path_log", "lakepub log` with `LAKEPUB_QUICK=0"),
                          ("full_path_query", "lakepub query` with `LAKEPUB_QUICK=0")):
            if f.get(f"{key}_s") is None:
                continue
            t = next((t for n, t in targets.items() if n.startswith(name + " ")), None)
            rows.append(("7", f"process start to exit: `{name}`", _f(f.get(f"{key}_s"), 3, "s"),
                         f"`python -c pass` {_f(f.get('python_c_pass_s'), 3, 's')}",
                         _f(f.get(f"{key}_ratio"), 1) + "x", f"≤ {t['target']:g} s" if t else "figure (no target)", t))
    for num, name, ours, base, ratio, target, t in rows:
        verdict = "" if t is None else ("met" if t["met"] else "**missed**")
        out.append(f"| {num} | {name} | {ours} | {base} | {ratio} | {target} | {verdict} |")
    out.append("")

    if "throughput" in by:
        f = by["throughput"]["figures"]
        cpu = [f"{shape}: lakepub {_f(f.get(f'{pre}lakepub_cpu_s'), 2, 's')} vs the seed protocol "
               f"{_f(f.get(f'{pre}seed_cpu_s'), 2, 's')} ({_f(f.get(f'{pre}cpu_ratio_vs_seed'), 1)}x)"
               for pre, shape in (("", "advancing stream"), ("drift_", "drifting stream"))
               if f.get(f"{pre}lakepub_cpu_s") is not None]
        if cpu:
            out += ["CPU seconds (user + system, all threads) of the same runs, which a shared machine's load "
                    "changes far less than wall seconds: " + "; ".join(cpu) + ". The wall-clock ratios count on "
                    "lakepub's threads (read-ahead, Parquet writers, key index) finding two free cores; the "
                    "seed protocol uses one.", ""]
    if "memory" in by:
        f = by["memory"]["figures"]
        sizes = _pick(f, "rss_mib_batch_")
        out += ["Peak RSS of `lakepub run` by `--max-batch`: " +
                ", ".join(f"{int(b):,}: {_f(v, 0)} MiB" for b, v in sizes) +
                f" (a Python process that only imports lakepub, DuckDB, pyiceberg and pyarrow: "
                f"{_f(f.get('import_only_rss_mib'), 0)} MiB). By history at a fixed batch: " +
                ", ".join(f"{int(n):,} events: {_f(v, 0)} MiB" for n, v in _pick(f, "rss_mib_history_")) + ".", ""]
    if "reads" in by:
        f = by["reads"]["figures"]
        extra = ""
        if f.get("ledger_data_files_compacted") is not None:
            extra = (f" `lakepub compact` brings the ledger to {f['ledger_data_files_compacted']} data file(s) "
                     f"(iceberg/parquet {_f(f.get('ledger_ratio_compacted'), 2)}x).")
        pubs = by["reads"]["params"].get("publishes", "?")
        out += [f"File counts after {pubs} publishes of {by['reads']['params']['max_batch']:,} events: the published "
                f"table holds {f.get('published_data_files')} data files (one per month partition: a publish replaces "
                f"the files of the partitions it rewrites) and its current snapshot lists "
                f"{f.get('published_manifests')} manifest(s), which every `iceberg_scan` reads (a lakepub view: once per "
                f"published snapshot); the ledger holds "
                f"{f.get('ledger_data_files')} data files and {f.get('ledger_manifests')} manifests (one per publish "
                f"until compacted).{extra} A publish late in that run took {_f(f.get('publish_s_late'), 3, 's')} vs "
                f"{_f(f.get('publish_s_early'), 3, 's')} early on.", ""]
    if "throughput" in by:
        f = by["throughput"]["figures"]
        phases = sorted(_pick(f, "phase:"), key=lambda kv: -kv[1])
        if phases:
            wall = f.get("profile_wall_s") or sum(v for k, v in phases if not k.startswith("of which"))
            method = f.get("profile_method", "cProfile")
            out += [f"**Where the time goes** in `lakepub run` over the same stream ({method}"
                    f"{', sampling' if method == 'pyinstrument' else ', its overhead inflates Python-heavy parts'}; "
                    f"{_f(wall, 2)} s profiled):", ""]
            for label, v in phases:
                if v < 0.01 or label.startswith("of which"):
                    continue
                out.append(f"- {label}: {_f(v, 2)} s ({100 * v / wall:.0f}%)")
                out += [f"  - {sub}: {_f(sv, 2)} s ({100 * sv / wall:.0f}%)" for sub, sv in phases
                        if sub.startswith("of which") and _parent(sub) and label.startswith(_parent(sub))]
            out.append("")
        top = f.get("profile_top10")
        if top:
            out += ["Top functions by own time:", ""]
            out += [f"{i}. `{row['function']}` {row['own_s']:.2f} s own, {row['cum_s']:.2f} s cumulative, "
                    f"{row['calls']:,} calls" for i, row in enumerate(top, 1)]
            out.append("")
    out += ["Reproduce: `.venv/bin/python scripts/bench/run_all.py --markdown bench.md` (full, ~10 min) or any "
            "single `scripts/bench/<name>.py [--quick] [--json PATH]`.", ""]
    return "\n".join(out)


if __name__ == "__main__":
    main()
